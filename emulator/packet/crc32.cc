// CRC-32 entry point and its portable engine. Every packet sent and received
// is checksummed, so this is the codec's hot loop: frames of 64 bytes and
// more go through carry-less multiplication where the CPU has it
// (crc32_clmul.cc, several times faster), the rest through tables.
//
// The table engine slices 16 bytes per step: sixteen 256-entry tables
// (16 KiB, L1-resident) fold 16 input bytes with 16 independent lookups
// instead of 16 dependent ones.
#include <array>
#include <bit>
#include <cstring>

#include "emulator/packet/crc32.h"
#include "emulator/packet/crc32_engines.h"

namespace softverbs::packet {
namespace crc32_engines {
namespace {

// 0x04C11DB7 with its bits reversed, for least-significant-bit-first use.
constexpr uint32_t kReflectedPolynomial = 0xedb88320;
constexpr int kSlices = 16;

using SliceTables = std::array<std::array<uint32_t, 256>, kSlices>;

// tables[0][b] is the CRC of byte b; tables[k][b] is that of byte b followed
// by k zero bytes, so byte i of a 16-byte block is looked up in
// tables[15 - i].
constexpr SliceTables make_slice_tables() {
  SliceTables tables{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ ((crc & 1) ? kReflectedPolynomial : 0);
    }
    tables[0][byte] = crc;
  }
  for (int slice = 1; slice < kSlices; ++slice) {
    for (uint32_t byte = 0; byte < 256; ++byte) {
      const uint32_t previous = tables[slice - 1][byte];
      tables[slice][byte] = (previous >> 8) ^ tables[0][previous & 0xff];
    }
  }
  return tables;
}

constexpr SliceTables kTables = make_slice_tables();

// Eight input bytes as a little-endian word: byte 0 in the low bits, where
// the reflected CRC consumes first.
inline uint64_t load_le64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof word);
  if constexpr (std::endian::native == std::endian::big) {
    word = __builtin_bswap64(word);
  }
  return word;
}

inline uint32_t lookup(int slice, uint64_t word, int byte) {
  return kTables[slice][(word >> (8 * byte)) & 0xff];
}

}  // namespace

uint32_t table_update(uint32_t state, const uint8_t* p, size_t count) {
  uint32_t crc = state;
  while (count >= 16) {
    const uint64_t low = load_le64(p) ^ crc;
    const uint64_t high = load_le64(p + 8);
    crc = lookup(15, low, 0) ^ lookup(14, low, 1) ^ lookup(13, low, 2) ^
          lookup(12, low, 3) ^ lookup(11, low, 4) ^ lookup(10, low, 5) ^
          lookup(9, low, 6) ^ lookup(8, low, 7) ^ lookup(7, high, 0) ^
          lookup(6, high, 1) ^ lookup(5, high, 2) ^ lookup(4, high, 3) ^
          lookup(3, high, 4) ^ lookup(2, high, 5) ^ lookup(1, high, 6) ^
          lookup(0, high, 7);
    p += 16;
    count -= 16;
  }
  while (count > 0) {
    crc = (crc >> 8) ^ kTables[0][(crc ^ *p) & 0xff];
    ++p;
    --count;
  }
  return crc;
}

}  // namespace crc32_engines

uint32_t crc32_update(uint32_t state, std::span<const uint8_t> bytes) {
  static const bool use_clmul = crc32_engines::clmul_available();
  if (use_clmul && bytes.size() >= crc32_engines::kClmulMinBytes) {
    return crc32_engines::clmul_update(state, bytes.data(), bytes.size());
  }
  return crc32_engines::table_update(state, bytes.data(), bytes.size());
}

}  // namespace softverbs::packet
