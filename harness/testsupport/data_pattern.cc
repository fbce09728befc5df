#include "harness/testsupport/data_pattern.h"

#include <cstdio>
#include <cstring>

namespace softverbs::testsupport {
namespace {

// SplitMix64 finalizer: consecutive words get unrelated values.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t pattern_word(uint64_t seed, uint64_t word_index) {
  return mix(seed * 0x2545f4914f6cdd1dull ^ word_index);
}

}  // namespace

uint8_t pattern_byte(uint64_t seed, uint64_t offset) {
  return static_cast<uint8_t>(pattern_word(seed, offset / 8) >> (8 * (offset % 8)));
}

void fill_pattern(std::span<uint8_t> bytes, uint64_t seed, uint64_t start_offset) {
  size_t i = 0;
  // Unaligned head byte by byte, then whole words.
  while (i < bytes.size() && (start_offset + i) % 8 != 0) {
    bytes[i] = pattern_byte(seed, start_offset + i);
    ++i;
  }
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = pattern_word(seed, (start_offset + i) / 8);
    for (int b = 0; b < 8; ++b) bytes[i + b] = static_cast<uint8_t>(word >> (8 * b));
  }
  for (; i < bytes.size(); ++i) bytes[i] = pattern_byte(seed, start_offset + i);
}

std::optional<ByteMismatch> find_pattern_mismatch(std::span<const uint8_t> bytes, uint64_t seed,
                                                  uint64_t start_offset) {
  size_t i = 0;
  auto check = [&](size_t index, uint8_t expected) -> std::optional<ByteMismatch> {
    if (bytes[index] == expected) return std::nullopt;
    return ByteMismatch{start_offset + index, expected, bytes[index]};
  };
  while (i < bytes.size() && (start_offset + i) % 8 != 0) {
    if (auto m = check(i, pattern_byte(seed, start_offset + i))) return m;
    ++i;
  }
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = pattern_word(seed, (start_offset + i) / 8);
    for (int b = 0; b < 8; ++b) {
      if (auto m = check(i + b, static_cast<uint8_t>(word >> (8 * b)))) return m;
    }
  }
  for (; i < bytes.size(); ++i) {
    if (auto m = check(i, pattern_byte(seed, start_offset + i))) return m;
  }
  return std::nullopt;
}

void fill_constant(std::span<uint8_t> bytes, uint8_t value) {
  if (!bytes.empty()) std::memset(bytes.data(), value, bytes.size());
}

std::optional<ByteMismatch> find_constant_mismatch(std::span<const uint8_t> bytes,
                                                   uint8_t value, uint64_t start_offset) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != value) return ByteMismatch{start_offset + i, value, bytes[i]};
  }
  return std::nullopt;
}

std::string describe_mismatch(const ByteMismatch& mismatch) {
  char text[96];
  std::snprintf(text, sizeof text, "byte at offset %llu: expected 0x%02x, found 0x%02x",
                static_cast<unsigned long long>(mismatch.offset), mismatch.expected,
                mismatch.actual);
  return text;
}

}  // namespace softverbs::testsupport
