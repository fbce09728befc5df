// Test data that names its own position: the byte at message offset `o` of a
// transfer seeded `s` is a function of (s, o) alone, so any piece of a
// message can be checked where it lands, whatever SGE layout carried it, and
// a misplaced or stale byte is told apart from a correct one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace softverbs::testsupport {

uint8_t pattern_byte(uint64_t seed, uint64_t offset);

// Writes pattern bytes for message offsets [start, start + bytes.size()).
void fill_pattern(std::span<uint8_t> bytes, uint64_t seed, uint64_t start_offset);

struct ByteMismatch {
  uint64_t offset = 0;  // message offset (or buffer offset for fills)
  uint8_t expected = 0;
  uint8_t actual = 0;
};

std::optional<ByteMismatch> find_pattern_mismatch(std::span<const uint8_t> bytes, uint64_t seed,
                                                  uint64_t start_offset);

// For guard areas that must stay untouched.
void fill_constant(std::span<uint8_t> bytes, uint8_t value);
std::optional<ByteMismatch> find_constant_mismatch(std::span<const uint8_t> bytes,
                                                   uint8_t value, uint64_t start_offset = 0);

// "byte at offset 4096: expected 0x3a, found 0x00"
std::string describe_mismatch(const ByteMismatch& mismatch);

}  // namespace softverbs::testsupport
