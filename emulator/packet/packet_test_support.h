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
    Opcode::kRcSendOnlyInv,       Opcode::kRcFlush,
    Opcode::kRcAtomicWrite,       Opcode::kUcSendFirst,
    Opcode::kUcSendMiddle,        Opcode::kUcSendLast,
    Opcode::kUcSendLastImm,       Opcode::kUcSendOnly,
    Opcode::kUcSendOnlyImm,       Opcode::kUcWriteFirst,
    Opcode::kUcWriteMiddle,       Opcode::kUcWriteLast,
    Opcode::kUcWriteLastImm,      Opcode::kUcWriteOnly,
    Opcode::kUcWriteOnlyImm,      Opcode::kUdSendOnly,
    Opcode::kUdSendOnlyImm,
    xrc_opcode(Opcode::kRcSendFirst),         xrc_opcode(Opcode::kRcSendMiddle),
    xrc_opcode(Opcode::kRcSendLast),          xrc_opcode(Opcode::kRcSendLastImm),
    xrc_opcode(Opcode::kRcSendOnly),          xrc_opcode(Opcode::kRcSendOnlyImm),
    xrc_opcode(Opcode::kRcWriteFirst),        xrc_opcode(Opcode::kRcWriteMiddle),
    xrc_opcode(Opcode::kRcWriteLast),         xrc_opcode(Opcode::kRcWriteLastImm),
    xrc_opcode(Opcode::kRcWriteOnly),         xrc_opcode(Opcode::kRcWriteOnlyImm),
    xrc_opcode(Opcode::kRcReadRequest),       xrc_opcode(Opcode::kRcReadResponseFirst),
    xrc_opcode(Opcode::kRcReadResponseMiddle), xrc_opcode(Opcode::kRcReadResponseLast),
    xrc_opcode(Opcode::kRcReadResponseOnly),  xrc_opcode(Opcode::kRcAcknowledge),
    xrc_opcode(Opcode::kRcAtomicAcknowledge), xrc_opcode(Opcode::kRcCompareSwap),
    xrc_opcode(Opcode::kRcFetchAdd),          xrc_opcode(Opcode::kRcSendLastInv),
    xrc_opcode(Opcode::kRcFlush),             xrc_opcode(Opcode::kRcAtomicWrite),
    xrc_opcode(Opcode::kRcSendOnlyInv),
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
