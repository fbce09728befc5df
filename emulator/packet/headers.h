// IBA packet headers as plain values. Byte order is handled only by the
// codec (codec.h); these fields are host order.
#pragma once

#include <cstdint>

#include "emulator/types.h"

namespace softverbs::packet {

// BTH opcodes (IBTA 9.2, table 35). The upper 3 bits name the transport.
enum class Opcode : uint8_t {
  kRcSendFirst = 0x00,
  kRcSendMiddle = 0x01,
  kRcSendLast = 0x02,
  kRcSendLastImm = 0x03,
  kRcSendOnly = 0x04,
  kRcSendOnlyImm = 0x05,
  kRcWriteFirst = 0x06,
  kRcWriteMiddle = 0x07,
  kRcWriteLast = 0x08,
  kRcWriteLastImm = 0x09,
  kRcWriteOnly = 0x0a,
  kRcWriteOnlyImm = 0x0b,
  kRcReadRequest = 0x0c,
  kRcReadResponseFirst = 0x0d,
  kRcReadResponseMiddle = 0x0e,
  kRcReadResponseLast = 0x0f,
  kRcReadResponseOnly = 0x10,
  kRcAcknowledge = 0x11,
  kRcAtomicAcknowledge = 0x12,
  kRcCompareSwap = 0x13,
  kRcFetchAdd = 0x14,
  kRcSendLastInv = 0x16,
  kRcSendOnlyInv = 0x17,
  // Memory placement extensions (IBTA annex A19).
  kRcFlush = 0x1c,
  kRcAtomicWrite = 0x1d,
  kUcSendFirst = 0x20,
  kUcSendMiddle = 0x21,
  kUcSendLast = 0x22,
  kUcSendLastImm = 0x23,
  kUcSendOnly = 0x24,
  kUcSendOnlyImm = 0x25,
  kUcWriteFirst = 0x26,
  kUcWriteMiddle = 0x27,
  kUcWriteLast = 0x28,
  kUcWriteLastImm = 0x29,
  kUcWriteOnly = 0x2a,
  kUcWriteOnlyImm = 0x2b,
  kUdSendOnly = 0x64,
  kUdSendOnlyImm = 0x65,
  // XRC opcodes are the RC ones with the transport bits 101: xrc_opcode().
};

// IBTA 9.2, table 35: XRC (0xA0-0xB7) mirrors RC (0x00-0x17).
constexpr uint8_t kXrcTransportBits = 0xa0;
constexpr Opcode xrc_opcode(Opcode rc) {
  return static_cast<Opcode>(static_cast<uint8_t>(rc) | kXrcTransportBits);
}
// The RC opcode an XRC one mirrors; any other opcode unchanged.
constexpr Opcode rc_counterpart(Opcode op) {
  const uint8_t raw = static_cast<uint8_t>(op);
  return (raw & 0xe0) == kXrcTransportBits ? static_cast<Opcode>(raw & 0x1f) : op;
}

// The transport an opcode belongs to (its upper three bits).
enum class Transport : uint8_t { kRc, kUc, kUd, kXrc };

// The transport of a QP type's packets: both XRC halves speak XRC.
constexpr Transport transport_of(QpType type) {
  switch (type) {
    case QpType::kRc: return Transport::kRc;
    case QpType::kUc: return Transport::kUc;
    case QpType::kUd: return Transport::kUd;
    case QpType::kXrcSend:
    case QpType::kXrcRecv: return Transport::kXrc;
  }
  return Transport::kRc;
}

// Which extension headers follow the BTH (bit set), per opcode.
enum HeaderBits : uint16_t {
  kHdrReth = 1u << 0,
  kHdrAeth = 1u << 1,
  kHdrAtomicEth = 1u << 2,
  kHdrAtomicAckEth = 1u << 3,
  kHdrImmDt = 1u << 4,
  kHdrIeth = 1u << 5,
  kHdrDeth = 1u << 6,
  kHdrXrceth = 1u << 7,
  kHdrFeth = 1u << 8,
};

// Where a packet sits in its message.
enum class Position : uint8_t { kFirst, kMiddle, kLast, kOnly };

enum class Operation : uint8_t {
  kSend, kWrite, kReadRequest, kReadResponse, kAcknowledge, kAtomicAcknowledge,
  kCompareSwap, kFetchAdd, kFlush, kAtomicWrite,
};

struct OpcodeInfo {
  const char* name = nullptr;  // nullptr: not an opcode softverbs knows
  uint16_t headers = 0;        // HeaderBits
  bool has_payload = false;
  Position position = Position::kOnly;
  Operation operation = Operation::kSend;
  Transport transport = Transport::kRc;
  bool is_request = true;      // false for responses and acknowledgements
};

// Table lookup; info.name == nullptr for unknown opcodes.
const OpcodeInfo& opcode_info(uint8_t opcode);

// Local Route Header (IBTA 7.7). pkt_len is in 4-byte words, LRH to ICRC.
struct Lrh {
  uint8_t vl = 0;
  uint8_t lver = 0;
  uint8_t sl = 0;
  uint8_t lnh = 2;  // 2: IBA local (BTH next), 3: IBA global (GRH next)
  uint16_t dlid = 0;
  uint16_t pkt_len = 0;
  uint16_t slid = 0;

  bool operator==(const Lrh&) const = default;
};

// Global Route Header (IBTA 8.3), IPv6 layout.
struct Grh {
  uint8_t ip_ver = 6;
  uint8_t traffic_class = 0;
  uint32_t flow_label = 0;
  uint16_t pay_len = 0;  // bytes after the GRH, ICRC included
  uint8_t next_hdr = 0x1b;
  uint8_t hop_limit = 0;
  Gid sgid{};
  Gid dgid{};

  bool operator==(const Grh&) const = default;
};

// Base Transport Header (IBTA 9.2).
struct Bth {
  Opcode opcode = Opcode::kRcSendOnly;
  bool solicited = false;
  bool mig_req = false;
  uint8_t pad_count = 0;
  uint8_t tver = 0;
  uint16_t pkey = 0xffff;
  bool fecn = false;
  bool becn = false;
  uint32_t dest_qp = 0;  // 24 bits
  bool ack_req = false;
  uint32_t psn = 0;      // 24 bits

  bool operator==(const Bth&) const = default;
};

struct Reth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint32_t dma_len = 0;

  bool operator==(const Reth&) const = default;
};

// AETH syndrome (IBTA 9.7.5.1): bits 6:5 select ACK (0), RNR NAK (1) or NAK
// (3); bits 4:0 carry the credit count, the RNR timer or the NAK code.
struct Aeth {
  uint8_t syndrome = 0;
  uint32_t msn = 0;  // 24 bits

  bool operator==(const Aeth&) const = default;
};

struct AtomicEth {
  uint64_t va = 0;
  uint32_t rkey = 0;
  uint64_t swap_add = 0;
  uint64_t compare = 0;

  bool operator==(const AtomicEth&) const = default;
};

struct AtomicAckEth {
  uint64_t orig_data = 0;

  bool operator==(const AtomicAckEth&) const = default;
};

// FETH (IBTA annex A19): what a FLUSH makes durable and how much of the MR.
struct Feth {
  uint8_t placement_type = 0;     // 4 bits: 1 global visibility, 2 persistence
  uint8_t selectivity_level = 0;  // 2 bits: 0 the RETH's range, 1 the whole MR

  bool operator==(const Feth&) const = default;
};

struct Deth {
  uint32_t qkey = 0;
  uint32_t src_qp = 0;  // 24 bits

  bool operator==(const Deth&) const = default;
};

// Every header of one packet but the payload. Extension headers are present
// exactly when opcode_info(bth.opcode).headers says so.
struct Headers {
  Lrh lrh;
  bool has_grh = false;
  Grh grh;
  Bth bth;
  Reth reth;
  Aeth aeth;
  AtomicEth atomic_eth;
  AtomicAckEth atomic_ack_eth;
  Deth deth;
  Feth feth;
  uint32_t imm_data = 0;  // kept in network byte order, as applications see it
  uint32_t ieth_rkey = 0;
  uint32_t xrc_srqn = 0;  // XRCETH (24 bits): the XRC SRQ a request is for

  bool operator==(const Headers&) const = default;
};

// 24-bit PSN arithmetic (IBTA 9.7.1: PSNs are compared modulo 2^24).
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint32_t psn_add(uint32_t psn, uint32_t n) { return (psn + n) & kPsnMask; }
// Signed distance a - b in the 24-bit circle, in [-2^23, 2^23).
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(((a - b) & kPsnMask) << 8) >> 8;
}

}  // namespace softverbs::packet
