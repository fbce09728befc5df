// The linear algebra behind ipv4_identification.h. A CRC state is a vector
// of 32 bits over GF(2); feeding a zero byte is a 32x32 matrix, and flipping
// one bit of the input changes the final CRC by that bit's CRC carried
// through every byte that follows it.
#include "emulator/packet/ipv4_identification.h"

#include <array>

namespace softverbs::packet {
namespace {

constexpr uint32_t kCrc32Polynomial = 0xedb88320;  // reflected, as crc32.h

uint32_t feed_byte(uint32_t state, uint8_t byte) {
  state ^= byte;
  for (int bit = 0; bit < 8; ++bit) state = (state >> 1) ^ ((state & 1) ? kCrc32Polynomial : 0);
  return state;
}

// A linear map on CRC states: column j is the image of state bit j.
struct Matrix {
  std::array<uint32_t, 32> columns{};

  uint32_t apply(uint32_t v) const {
    uint32_t out = 0;
    for (int j = 0; v != 0; ++j, v >>= 1)
      if (v & 1) out ^= columns[j];
    return out;
  }
  Matrix after(const Matrix& first) const {  // this * first
    Matrix m;
    for (int j = 0; j < 32; ++j) m.columns[j] = apply(first.columns[j]);
    return m;
  }
};

Matrix identity() {
  Matrix m;
  for (int j = 0; j < 32; ++j) m.columns[j] = uint32_t{1} << j;
  return m;
}

// The effect of `count` zero bytes on a CRC state, by repeated squaring.
Matrix zero_bytes(size_t count) {
  Matrix one_zero;
  for (int j = 0; j < 32; ++j) one_zero.columns[j] = feed_byte(uint32_t{1} << j, 0);
  Matrix result = identity();
  for (Matrix power = one_zero; count != 0; count >>= 1, power = power.after(power))
    if (count & 1) result = power.after(result);
  return result;
}

// How each identification bit (bit i of the big-endian value) changes the
// final CRC when `trailing` bytes follow the field. Cached per thread for
// the few packet sizes a flow uses.
std::array<uint32_t, 16> identification_columns(size_t trailing) {
  struct Entry {
    size_t trailing = SIZE_MAX;
    std::array<uint32_t, 16> columns{};
  };
  thread_local std::array<Entry, 4> cache;
  thread_local size_t next_victim = 0;
  for (const Entry& e : cache)
    if (e.trailing == trailing) return e.columns;

  const Matrix carry = zero_bytes(trailing);
  std::array<uint32_t, 16> columns{};
  for (int bit = 0; bit < 8; ++bit) {
    const uint32_t low = feed_byte(0, static_cast<uint8_t>(1u << bit));  // second byte
    const uint32_t high = feed_byte(low, 0);                             // first byte
    columns[bit] = carry.apply(low);
    columns[bit + 8] = carry.apply(high);
  }
  cache[next_victim] = Entry{trailing, columns};
  next_victim = (next_victim + 1) % cache.size();
  return columns;
}

// Whether `target` is a sum of some of `columns` (Gaussian elimination).
bool in_span(const std::array<uint32_t, 16>& columns, uint32_t target) {
  std::array<uint32_t, 32> basis{};  // by leading bit; 0: none yet
  for (uint32_t v : columns) {
    for (int bit = 31; bit >= 0 && v != 0; --bit) {
      if (!(v >> bit & 1)) continue;
      if (basis[bit] == 0) {
        basis[bit] = v;
        break;
      }
      v ^= basis[bit];
    }
  }
  for (int bit = 31; bit >= 0 && target != 0; --bit) {
    if (!(target >> bit & 1)) continue;
    if (basis[bit] == 0) return false;
    target ^= basis[bit];
  }
  return target == 0;
}

}  // namespace

bool ipv4_identification_explains(size_t covered, size_t identification_offset,
                                  uint32_t difference) {
  if (covered < identification_offset + 2) return false;
  return in_span(identification_columns(covered - identification_offset - 2), difference);
}

uint32_t ipv4_identification_icrc_change(size_t covered, size_t identification_offset,
                                         uint16_t identification) {
  if (covered < identification_offset + 2) return 0;
  const std::array<uint32_t, 16> columns =
      identification_columns(covered - identification_offset - 2);
  uint32_t change = 0;
  for (int bit = 0; bit < 16; ++bit)
    if (identification >> bit & 1) change ^= columns[bit];
  return change;
}

}  // namespace softverbs::packet
