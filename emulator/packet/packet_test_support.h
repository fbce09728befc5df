// Shared by the packet unit tests: the opcode list and a deliberately naive
// bit-at-a-time CRC-32 to check the table-driven one against.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/packet/headers.h"

namespace softverbs::packet::testing {

// Every opcode of the Opcode enum, in numeric order.
inline constexpr Opcode kAllOpcodes[] = {
    Opcode::kRcSendFirst,         Opcode::kRcSendMiddle,
    Opcode::kRcSendLast,          Opcode::kRcSendLastImm,
    Opcode::kRcSendOnly,          Opcode::kRcSendOnlyImm,
    Opcode::kRcWriteFirst,        Opcode::kRcWriteMiddle,
    Opcode::kRcWriteLast,         Opcode::kRcWriteLastImm,
    Opcode::kRcWriteOnly,         Opcode::kRcWriteOnlyImm,
    Opcode::kRcReadRequest,       Opcode::kRcReadResponseFirst,
    Opcode::kRcReadResponseMiddle, Opcode::kRcReadResponseLast,
    Opcode::kRcReadResponseOnly,  Opcode::kRcAcknowledge,
    Opcode::kRcAtomicAcknowledge, Opcode::kRcCompareSwap,
    Opcode::kRcFetchAdd,          Opcode::kRcSendLastInv,
    Opcode::kRcSendOnlyInv,       Opcode::kUcSendFirst,
    Opcode::kUcSendMiddle,        Opcode::kUcSendLast,
    Opcode::kUcSendLastImm,       Opcode::kUcSendOnly,
    Opcode::kUcSendOnlyImm,       Opcode::kUcWriteFirst,
    Opcode::kUcWriteMiddle,       Opcode::kUcWriteLast,
    Opcode::kUcWriteLastImm,      Opcode::kUcWriteOnly,
    Opcode::kUcWriteOnlyImm,      Opcode::kUdSendOnly,
    Opcode::kUdSendOnlyImm,
};

// CRC-32 (IEEE 802.3), one bit at a time, straight from the definition.
inline uint32_t reference_crc32_update(uint32_t state,
                                       std::span<const uint8_t> bytes) {
  for (uint8_t byte : bytes) {
    state ^= byte;
    for (int bit = 0; bit < 8; ++bit) {
      state = (state & 1) ? (state >> 1) ^ 0xedb88320u : state >> 1;
    }
  }
  return state;
}

inline uint32_t reference_crc32(std::span<const uint8_t> bytes) {
  return ~reference_crc32_update(0xffffffffu, bytes);
}

}  // namespace softverbs::packet::testing
