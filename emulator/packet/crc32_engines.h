// The two ways crc32_update() (crc32.h) computes a CRC-32, exposed so that
// tests can check each against a reference whatever the host CPU picks.
// Same contract as crc32_update(): reflected state in, reflected state out.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softverbs::packet::crc32_engines {

// Portable: sixteen 256-entry tables, 16 bytes per step.
uint32_t table_update(uint32_t state, const uint8_t* bytes, size_t count);

// x86-64 carry-less multiplication (PCLMULQDQ), 64 bytes per step. Only
// call when clmul_available().
bool clmul_available();
uint32_t clmul_update(uint32_t state, const uint8_t* bytes, size_t count);

// Below this many bytes the folding set-up costs more than it saves.
constexpr size_t kClmulMinBytes = 64;

}  // namespace softverbs::packet::crc32_engines
