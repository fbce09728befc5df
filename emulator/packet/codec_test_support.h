// Shared by the codec tests (codec_test.cc and codec_decode_test.cc):
// frames encoded into a vector, one set of headers with every field chosen,
// and headers with every field random.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "emulator/packet/codec.h"

namespace softverbs::packet::testing {

using Bytes = std::vector<uint8_t>;

inline const OpcodeInfo& info(Opcode opcode) {
  return opcode_info(static_cast<uint8_t>(opcode));
}

inline Bytes encode(const Headers& headers, std::span<const uint8_t> payload) {
  Bytes frame(kMaxFrameBytes * 2);
  const size_t size = encode_ib(headers, payload, frame);
  frame.resize(size);
  return frame;
}

inline Headers write_first_headers() {
  Headers h;
  h.lrh.vl = 0xa;
  h.lrh.sl = 0x7;
  h.lrh.dlid = 0x1234;
  h.lrh.slid = 0xbeef;
  h.bth.opcode = Opcode::kRcWriteFirst;
  h.bth.solicited = true;
  h.bth.pkey = 0x8001;
  h.bth.fecn = true;
  h.bth.dest_qp = 0xabcdef;
  h.bth.ack_req = true;
  h.bth.psn = 0x123456;
  h.reth = {.va = 0x0102030405060708, .rkey = 0x11223344, .dma_len = 0x10000};
  return h;
}

// Headers with every field random (wider than its wire field, too), for
// `opcode`.
inline Headers random_headers(Opcode opcode, bool has_grh, std::mt19937_64& rng) {
  auto r8 = [&] { return static_cast<uint8_t>(rng()); };
  auto r16 = [&] { return static_cast<uint16_t>(rng()); };
  auto r32 = [&] { return static_cast<uint32_t>(rng()); };
  Headers h;
  h.lrh = {.vl = r8(), .lver = 0, .sl = r8(), .lnh = r8(), .dlid = r16(),
           .pkt_len = r16(), .slid = r16()};
  h.has_grh = has_grh;
  h.grh.traffic_class = r8();
  h.grh.flow_label = r32();
  h.grh.pay_len = r16();
  h.grh.hop_limit = r8();
  for (auto& b : h.grh.sgid) b = r8();
  for (auto& b : h.grh.dgid) b = r8();
  h.bth = {.opcode = opcode, .solicited = bool(rng() & 1),
           .mig_req = bool(rng() & 1), .pad_count = r8(), .tver = 0,
           .pkey = r16(), .fecn = bool(rng() & 1), .becn = bool(rng() & 1),
           .dest_qp = r32(), .ack_req = bool(rng() & 1), .psn = r32()};
  h.reth = {.va = rng(), .rkey = r32(), .dma_len = r32()};
  h.aeth = {.syndrome = r8(), .msn = r32()};
  h.atomic_eth = {.va = rng(), .rkey = r32(), .swap_add = rng(),
                  .compare = rng()};
  h.atomic_ack_eth.orig_data = rng();
  h.deth = {.qkey = r32(), .src_qp = r32()};
  h.imm_data = r32();
  h.ieth_rkey = r32();
  h.xrc_srqn = r32();
  h.feth = {.placement_type = r8(), .selectivity_level = r8()};
  return h;
}

}  // namespace softverbs::packet::testing
