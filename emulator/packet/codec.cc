// The IB frame codec. Field layouts follow the IBTA figures cited at each
// header; all multi-byte fields are big-endian. Extension headers are laid
// out by one table (kExtensionLayout) in the order the IBTA puts them after
// the BTH, so neither direction has per-opcode code.
#include "emulator/packet/codec.h"

#include <array>
#include <cstring>

#include "emulator/packet/byte_order.h"
#include "emulator/packet/icrc.h"

namespace softverbs::packet {
namespace {

using namespace wire_order;

constexpr uint8_t kLnhLocal = 2;   // IBA local: BTH follows the LRH
constexpr uint8_t kLnhGlobal = 3;  // IBA global: GRH follows the LRH
constexpr uint8_t kGrhIpVersion = 6;
constexpr uint8_t kGrhNextHeaderIbaTransport = 0x1b;
constexpr size_t kWordBytes = 4;
constexpr size_t kMaxPktLenWords = 0x7ff;  // LRH PktLen is 11 bits
constexpr size_t kMaxFrameWithPktLen = kMaxPktLenWords * kWordBytes;

// LRH (IBTA 7.7, figure 31):
//   byte 0: VL(4) LVer(4)   byte 1: SL(4) rsv(2) LNH(2)   bytes 2-3: DLID
//   bytes 4-5: rsv(5) PktLen(11)   bytes 6-7: SLID
void put_lrh(uint8_t* p, const Lrh& lrh) {
  p[0] = static_cast<uint8_t>((lrh.vl & 0xf) << 4 | (lrh.lver & 0xf));
  p[1] = static_cast<uint8_t>((lrh.sl & 0xf) << 4 | (lrh.lnh & 0x3));
  store_be16(p + 2, lrh.dlid);
  store_be16(p + 4, lrh.pkt_len & kMaxPktLenWords);
  store_be16(p + 6, lrh.slid);
}

void get_lrh(const uint8_t* p, Lrh& lrh) {
  lrh.vl = p[0] >> 4;
  lrh.lver = p[0] & 0xf;
  lrh.sl = p[1] >> 4;
  lrh.lnh = p[1] & 0x3;
  lrh.dlid = load_be16(p + 2);
  lrh.pkt_len = load_be16(p + 4) & kMaxPktLenWords;
  lrh.slid = load_be16(p + 6);
}

// GRH (IBTA 8.3, figure 32), an IPv6 header:
//   bytes 0-3: IPVer(4) TClass(8) FlowLabel(20)   bytes 4-5: PayLen
//   byte 6: NxtHdr   byte 7: HopLmt   bytes 8-23: SGID   bytes 24-39: DGID
void put_grh(uint8_t* p, const Grh& grh) {
  store_be32(p, uint32_t{grh.ip_ver & 0xfu} << 28 |
                    uint32_t{grh.traffic_class} << 20 |
                    (grh.flow_label & 0xfffff));
  store_be16(p + 4, grh.pay_len);
  p[6] = grh.next_hdr;
  p[7] = grh.hop_limit;
  std::memcpy(p + 8, grh.sgid.data(), grh.sgid.size());
  std::memcpy(p + 24, grh.dgid.data(), grh.dgid.size());
}

void get_grh(const uint8_t* p, Grh& grh) {
  const uint32_t word0 = load_be32(p);
  grh.ip_ver = static_cast<uint8_t>(word0 >> 28);
  grh.traffic_class = static_cast<uint8_t>(word0 >> 20);
  grh.flow_label = word0 & 0xfffff;
  grh.pay_len = load_be16(p + 4);
  grh.next_hdr = p[6];
  grh.hop_limit = p[7];
  std::memcpy(grh.sgid.data(), p + 8, grh.sgid.size());
  std::memcpy(grh.dgid.data(), p + 24, grh.dgid.size());
}

// BTH (IBTA 9.2, figure 33):
//   byte 0: OpCode   byte 1: SE(1) M(1) PadCnt(2) TVer(4)   bytes 2-3: P_Key
//   byte 4: F(1) B(1) rsv(6)   bytes 5-7: DestQP
//   byte 8: A(1) rsv(7)   bytes 9-11: PSN
void put_bth(uint8_t* p, const Bth& bth) {
  p[0] = static_cast<uint8_t>(bth.opcode);
  p[1] = static_cast<uint8_t>(bth.solicited << 7 | bth.mig_req << 6 |
                              (bth.pad_count & 0x3) << 4 | (bth.tver & 0xf));
  store_be16(p + 2, bth.pkey);
  p[4] = static_cast<uint8_t>(bth.fecn << 7 | bth.becn << 6);
  store_be24(p + 5, bth.dest_qp & kPsnMask);
  p[8] = static_cast<uint8_t>(bth.ack_req << 7);
  store_be24(p + 9, bth.psn & kPsnMask);
}

void get_bth(const uint8_t* p, Bth& bth) {
  bth.opcode = static_cast<Opcode>(p[0]);
  bth.solicited = p[1] & 0x80;
  bth.mig_req = p[1] & 0x40;
  bth.pad_count = (p[1] >> 4) & 0x3;
  bth.tver = p[1] & 0xf;
  bth.pkey = load_be16(p + 2);
  bth.fecn = p[4] & 0x80;
  bth.becn = p[4] & 0x40;
  bth.dest_qp = load_be24(p + 5);
  bth.ack_req = p[8] & 0x80;
  bth.psn = load_be24(p + 9);
}

// One extension header: its presence bit, its size, and how it moves
// between the wire and Headers (IBTA 9.3, figures 34-42).
struct ExtensionLayout {
  uint16_t bit;
  uint8_t bytes;
  void (*put)(uint8_t*, const Headers&);
  void (*get)(const uint8_t*, Headers&);
};

// In wire order after the BTH.
constexpr ExtensionLayout kExtensionLayout[] = {
    // XRCETH: rsv(8) XRCSRQ(24).
    {kHdrXrceth, 4,
     [](uint8_t* p, const Headers& h) {
       p[0] = 0;
       store_be24(p + 1, h.xrc_srqn & kPsnMask);
     },
     [](const uint8_t* p, Headers& h) { h.xrc_srqn = load_be24(p + 1); }},
    // DETH: Q_Key(32) rsv(8) SrcQP(24).
    {kHdrDeth, 8,
     [](uint8_t* p, const Headers& h) {
       store_be32(p, h.deth.qkey);
       p[4] = 0;
       store_be24(p + 5, h.deth.src_qp & kPsnMask);
     },
     [](const uint8_t* p, Headers& h) {
       h.deth.qkey = load_be32(p);
       h.deth.src_qp = load_be24(p + 5);
     }},
    // FETH: rsv(26) SEL(2) PLT(4).
    {kHdrFeth, 4,
     [](uint8_t* p, const Headers& h) {
       store_be32(p, uint32_t(h.feth.selectivity_level & 0x3) << 4 |
                         (h.feth.placement_type & 0xf));
     },
     [](const uint8_t* p, Headers& h) {
       const uint32_t word = load_be32(p);
       h.feth.placement_type = static_cast<uint8_t>(word & 0xf);
       h.feth.selectivity_level = static_cast<uint8_t>((word >> 4) & 0x3);
     }},
    // RETH: VA(64) R_Key(32) DMALen(32).
    {kHdrReth, 16,
     [](uint8_t* p, const Headers& h) {
       store_be64(p, h.reth.va);
       store_be32(p + 8, h.reth.rkey);
       store_be32(p + 12, h.reth.dma_len);
     },
     [](const uint8_t* p, Headers& h) {
       h.reth.va = load_be64(p);
       h.reth.rkey = load_be32(p + 8);
       h.reth.dma_len = load_be32(p + 12);
     }},
    // AtomicETH: VA(64) R_Key(32) SwapData/AddData(64) CompareData(64).
    {kHdrAtomicEth, 28,
     [](uint8_t* p, const Headers& h) {
       store_be64(p, h.atomic_eth.va);
       store_be32(p + 8, h.atomic_eth.rkey);
       store_be64(p + 12, h.atomic_eth.swap_add);
       store_be64(p + 20, h.atomic_eth.compare);
     },
     [](const uint8_t* p, Headers& h) {
       h.atomic_eth.va = load_be64(p);
       h.atomic_eth.rkey = load_be32(p + 8);
       h.atomic_eth.swap_add = load_be64(p + 12);
       h.atomic_eth.compare = load_be64(p + 20);
     }},
    // AETH: Syndrome(8) MSN(24).
    {kHdrAeth, 4,
     [](uint8_t* p, const Headers& h) {
       p[0] = h.aeth.syndrome;
       store_be24(p + 1, h.aeth.msn & kPsnMask);
     },
     [](const uint8_t* p, Headers& h) {
       h.aeth.syndrome = p[0];
       h.aeth.msn = load_be24(p + 1);
     }},
    // AtomicAckETH: OrigRemDt(64).
    {kHdrAtomicAckEth, 8,
     [](uint8_t* p, const Headers& h) {
       store_be64(p, h.atomic_ack_eth.orig_data);
     },
     [](const uint8_t* p, Headers& h) {
       h.atomic_ack_eth.orig_data = load_be64(p);
     }},
    // ImmDt: already in network order in Headers, so copied as is.
    {kHdrImmDt, 4,
     [](uint8_t* p, const Headers& h) {
       std::memcpy(p, &h.imm_data, sizeof h.imm_data);
     },
     [](const uint8_t* p, Headers& h) {
       std::memcpy(&h.imm_data, p, sizeof h.imm_data);
     }},
    // IETH: R_Key(32).
    {kHdrIeth, 4,
     [](uint8_t* p, const Headers& h) { store_be32(p, h.ieth_rkey); },
     [](const uint8_t* p, Headers& h) { h.ieth_rkey = load_be32(p); }},
};

// Total extension header bytes for every combination of HeaderBits.
constexpr size_t kHeaderBitCombinations = 512;
static_assert(kHdrFeth < kHeaderBitCombinations && kHdrXrceth < kHeaderBitCombinations,
              "a new HeaderBits value needs a larger kExtensionBytes table");
constexpr std::array<uint8_t, kHeaderBitCombinations> kExtensionBytes = [] {
  std::array<uint8_t, kHeaderBitCombinations> bytes{};
  for (size_t bits = 0; bits < bytes.size(); ++bits) {
    for (const ExtensionLayout& layout : kExtensionLayout) {
      if (bits & layout.bit) bytes[bits] += layout.bytes;
    }
  }
  return bytes;
}();

size_t extension_bytes_for(uint16_t header_bits) {
  return kExtensionBytes[header_bits % kHeaderBitCombinations];
}

// Bytes of zero padding that bring a payload to a whole number of words.
size_t pad_bytes(size_t payload_bytes) {
  return (kWordBytes - payload_bytes % kWordBytes) % kWordBytes;
}

size_t base_header_bytes(const Headers& headers) {
  return kLrhBytes + (headers.has_grh ? kGrhBytes : 0) + kBthBytes;
}

}  // namespace

size_t extension_header_bytes(Opcode opcode) {
  return extension_bytes_for(opcode_info(static_cast<uint8_t>(opcode)).headers);
}

size_t ib_header_bytes(const Headers& headers) {
  return base_header_bytes(headers) +
         extension_header_bytes(headers.bth.opcode);
}

size_t ib_frame_size(const Headers& headers, size_t payload_bytes) {
  return ib_header_bytes(headers) + payload_bytes + pad_bytes(payload_bytes) +
         kIcrcBytes;
}

size_t encode_ib(const Headers& headers, std::span<const uint8_t> payload,
                 std::span<uint8_t> out, Icrc icrc) {
  const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(headers.bth.opcode));
  if (info.name == nullptr) return 0;
  if (!info.has_payload && !payload.empty()) return 0;
  if (payload.size() > kMaxFrameWithPktLen) return 0;  // keeps sums small
  const size_t header_bytes = ib_header_bytes(headers);
  const size_t pad = pad_bytes(payload.size());
  const size_t frame_bytes = header_bytes + payload.size() + pad + kIcrcBytes;
  if (frame_bytes > out.size() || frame_bytes > kMaxFrameWithPktLen) return 0;

  // Payload first: it may overlap the header area of `out`.
  uint8_t* const frame = out.data();
  uint8_t* const payload_at = frame + header_bytes;
  if (!payload.empty() && payload.data() != payload_at) {
    std::memmove(payload_at, payload.data(), payload.size());
  }
  std::memset(payload_at + payload.size(), 0, pad);

  uint8_t* p = frame;
  Lrh lrh = headers.lrh;
  lrh.lnh = headers.has_grh ? kLnhGlobal : kLnhLocal;
  lrh.pkt_len = static_cast<uint16_t>(frame_bytes / kWordBytes);
  put_lrh(p, lrh);
  p += kLrhBytes;
  if (headers.has_grh) {
    Grh grh = headers.grh;
    grh.pay_len = static_cast<uint16_t>(frame_bytes - kLrhBytes - kGrhBytes);
    put_grh(p, grh);
    p += kGrhBytes;
  }
  Bth bth = headers.bth;
  bth.pad_count = static_cast<uint8_t>(pad);
  put_bth(p, bth);
  p += kBthBytes;
  for (const ExtensionLayout& layout : kExtensionLayout) {
    if (info.headers & layout.bit) {
      layout.put(p, headers);
      p += layout.bytes;
    }
  }

  const size_t covered = frame_bytes - kIcrcBytes;
  store_icrc(frame + covered, icrc == Icrc::kComputed ? icrc_ib(std::span(frame, covered)) : 0);
  return frame_bytes;
}

DecodeError decode_ib(std::span<const uint8_t> in, DecodedPacket& out, Icrc icrc) {
  const uint8_t* const frame = in.data();
  const size_t size = in.size();
  Headers& h = out.headers;
  h = Headers{};
  out.payload = {};

  if (size < kLrhBytes) return DecodeError::kTruncated;
  get_lrh(frame, h.lrh);
  if (h.lrh.lver != 0) return DecodeError::kBadLrh;
  if (h.lrh.lnh != kLnhLocal && h.lrh.lnh != kLnhGlobal) {
    return DecodeError::kBadLrh;
  }
  const size_t frame_bytes = size_t{h.lrh.pkt_len} * kWordBytes;
  if (size < frame_bytes) return DecodeError::kTruncated;
  if (size > frame_bytes) return DecodeError::kBadLrh;
  size_t offset = kLrhBytes;

  h.has_grh = h.lrh.lnh == kLnhGlobal;
  if (h.has_grh) {
    if (size < offset + kGrhBytes) return DecodeError::kTruncated;
    get_grh(frame + offset, h.grh);
    offset += kGrhBytes;
    if (h.grh.ip_ver != kGrhIpVersion ||
        h.grh.next_hdr != kGrhNextHeaderIbaTransport ||
        h.grh.pay_len != size - offset) {
      return DecodeError::kBadGrh;
    }
  }

  if (size < offset + kBthBytes) return DecodeError::kTruncated;
  get_bth(frame + offset, h.bth);
  offset += kBthBytes;
  const OpcodeInfo& info = opcode_info(static_cast<uint8_t>(h.bth.opcode));
  if (info.name == nullptr) return DecodeError::kUnknownOpcode;
  if (h.bth.tver != 0) return DecodeError::kBadTver;

  if (size < offset + extension_bytes_for(info.headers) + kIcrcBytes) {
    return DecodeError::kTruncated;
  }
  for (const ExtensionLayout& layout : kExtensionLayout) {
    if (info.headers & layout.bit) {
      layout.get(frame + offset, h);
      offset += layout.bytes;
    }
  }

  // Every header is a whole number of words, and so is the frame, so what
  // lies between the headers and the ICRC is payload plus pad.
  const size_t payload_and_pad = size - offset - kIcrcBytes;
  if (!info.has_payload && payload_and_pad != 0) {
    return DecodeError::kUnexpectedPayload;
  }
  if (h.bth.pad_count > payload_and_pad) return DecodeError::kBadPad;

  const size_t covered = size - kIcrcBytes;
  if (icrc == Icrc::kComputed && load_icrc(frame + covered) != icrc_ib(in.first(covered))) {
    return DecodeError::kBadIcrc;
  }
  out.payload = in.subspan(offset, payload_and_pad - h.bth.pad_count);
  return DecodeError::kNone;
}

const char* to_string(DecodeError error) {
  // In DecodeError's order.
  static constexpr const char* kNames[] = {
      "none",     "truncated", "bad LRH",  "bad GRH",           "unknown opcode",
      "bad TVer", "bad pad",   "bad ICRC", "unexpected payload",
  };
  const auto index = static_cast<size_t>(error);
  return index < std::size(kNames) ? kNames[index] : "unknown decode error";
}

void encode_grh(const Grh& grh, std::span<uint8_t, kGrhBytes> out) { put_grh(out.data(), grh); }

}  // namespace softverbs::packet
