// CRC-32 with the polynomial and bit order of Ethernet's FCS (IEEE 802.3:
// polynomial 0x04C11DB7, bits processed least significant first), which is
// the CRC the IBTA uses for the ICRC. icrc.h builds the masked ICRC on top.
#pragma once

#include <cstdint>
#include <span>

namespace softverbs::packet {

// A running CRC is a state: start at kCrc32Initial, feed bytes with
// crc32_update() in as many pieces as convenient, finish with crc32_final().
constexpr uint32_t kCrc32Initial = 0xffffffff;

uint32_t crc32_update(uint32_t state, std::span<const uint8_t> bytes);

constexpr uint32_t crc32_final(uint32_t state) { return ~state; }

// One-shot CRC-32 of `bytes` (crc32("123456789") == 0xcbf43926).
inline uint32_t crc32(std::span<const uint8_t> bytes) {
  return crc32_final(crc32_update(kCrc32Initial, bytes));
}

}  // namespace softverbs::packet
