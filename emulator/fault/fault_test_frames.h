// Real IB frames for the fault tests, built by the packet codec.
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/packet/codec.h"

namespace softverbs::fault::testing {

using Bytes = std::vector<uint8_t>;

// One frame to `qpn` with `psn`; the payload bytes derive from the PSN so
// that frames differ. `global` adds a GRH.
inline Bytes make_frame(uint32_t qpn, uint32_t psn,
                        packet::Opcode opcode = packet::Opcode::kRcSendOnly,
                        size_t payload_bytes = 32, bool global = false) {
  packet::Headers headers;
  headers.lrh.dlid = 1;
  headers.lrh.slid = 2;
  headers.has_grh = global;
  headers.grh.hop_limit = 64;
  headers.bth.opcode = opcode;
  headers.bth.dest_qp = qpn;
  headers.bth.psn = psn;
  if (!packet::opcode_info(static_cast<uint8_t>(opcode)).has_payload) payload_bytes = 0;
  Bytes payload(payload_bytes);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(psn * 31 + i);
  Bytes frame(packet::kMaxFrameBytes);
  frame.resize(packet::encode_ib(headers, payload, frame));
  return frame;
}

}  // namespace softverbs::fault::testing
