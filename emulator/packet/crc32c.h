// CRC-32C (Castagnoli, reflected, as iSCSI and ext4 use it): the checksum of
// frames private to the shared-memory wire (emulator/same_host/placed_send.h),
// where no IBA rule names one and the CPU's SSE4.2 instruction computes it
// in a few cycles per 8 bytes; a table where the CPU lacks it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softverbs::packet {

// Reflected state in and out: start from ~0u, finish with ~.
uint32_t crc32c_update(uint32_t state, const uint8_t* bytes, size_t count);

inline uint32_t crc32c(std::span<const uint8_t> bytes) {
  return ~crc32c_update(~0u, bytes.data(), bytes.size());
}

// The portable way, for tests to hold the instruction's answers against.
uint32_t crc32c_table_update(uint32_t state, const uint8_t* bytes, size_t count);

}  // namespace softverbs::packet
