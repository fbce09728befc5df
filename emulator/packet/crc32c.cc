#include "emulator/packet/crc32c.h"

#include <array>
#include <cstring>

namespace softverbs::packet {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82f63b78;

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1) ? kCastagnoliReflected : 0);
    table[i] = c;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t instruction_update(uint32_t state,
                                                              const uint8_t* bytes,
                                                              size_t count) {
  uint64_t wide = state;
  for (; count >= 8; bytes += 8, count -= 8) {
    uint64_t word;
    std::memcpy(&word, bytes, sizeof word);
    wide = __builtin_ia32_crc32di(wide, word);
  }
  auto narrow = static_cast<uint32_t>(wide);
  for (; count != 0; ++bytes, --count) narrow = __builtin_ia32_crc32qi(narrow, *bytes);
  return narrow;
}

bool instruction_available() {
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
}
#endif

}  // namespace

uint32_t crc32c_table_update(uint32_t state, const uint8_t* bytes, size_t count) {
  for (; count != 0; ++bytes, --count) state = kTable[(state ^ *bytes) & 0xff] ^ (state >> 8);
  return state;
}

uint32_t crc32c_update(uint32_t state, const uint8_t* bytes, size_t count) {
#if defined(__x86_64__)
  if (instruction_available()) return instruction_update(state, bytes, count);
#endif
  return crc32c_table_update(state, bytes, count);
}

}  // namespace softverbs::packet
