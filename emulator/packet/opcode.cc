// The opcode table of IBTA 9.2 (table 35, "OpCode field") restricted to the
// transports softverbs implements: what each opcode carries and means. The
// codec and the transport engine look everything up here instead of
// branching on opcodes.
#include <array>

#include "emulator/packet/headers.h"

namespace softverbs::packet {
namespace {

constexpr uint16_t kNone = 0;
constexpr bool kPayload = true;
constexpr bool kNoPayload = false;
constexpr bool kRequest = true;
constexpr bool kResponse = false;

struct Row {
  Opcode opcode;
  OpcodeInfo info;
};

constexpr Row row(Opcode opcode, const char* name, uint16_t headers,
                  bool has_payload, Position position, Operation operation,
                  Transport transport, bool is_request) {
  return {opcode,
          {name, headers, has_payload, position, operation, transport,
           is_request}};
}

using enum Opcode;
using enum Position;
using enum Operation;
constexpr Transport kRc = Transport::kRc;
constexpr Transport kUc = Transport::kUc;
constexpr Transport kUd = Transport::kUd;

constexpr Row kRows[] = {
    // Reliable Connection.
    row(kRcSendFirst, "RC_SEND_FIRST", kNone, kPayload, kFirst, kSend, kRc, kRequest),
    row(kRcSendMiddle, "RC_SEND_MIDDLE", kNone, kPayload, kMiddle, kSend, kRc, kRequest),
    row(kRcSendLast, "RC_SEND_LAST", kNone, kPayload, kLast, kSend, kRc, kRequest),
    row(kRcSendLastImm, "RC_SEND_LAST_WITH_IMMEDIATE", kHdrImmDt, kPayload, kLast, kSend, kRc, kRequest),
    row(kRcSendOnly, "RC_SEND_ONLY", kNone, kPayload, kOnly, kSend, kRc, kRequest),
    row(kRcSendOnlyImm, "RC_SEND_ONLY_WITH_IMMEDIATE", kHdrImmDt, kPayload, kOnly, kSend, kRc, kRequest),
    row(kRcWriteFirst, "RC_RDMA_WRITE_FIRST", kHdrReth, kPayload, kFirst, kWrite, kRc, kRequest),
    row(kRcWriteMiddle, "RC_RDMA_WRITE_MIDDLE", kNone, kPayload, kMiddle, kWrite, kRc, kRequest),
    row(kRcWriteLast, "RC_RDMA_WRITE_LAST", kNone, kPayload, kLast, kWrite, kRc, kRequest),
    row(kRcWriteLastImm, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kHdrImmDt, kPayload, kLast, kWrite, kRc, kRequest),
    row(kRcWriteOnly, "RC_RDMA_WRITE_ONLY", kHdrReth, kPayload, kOnly, kWrite, kRc, kRequest),
    row(kRcWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kHdrReth | kHdrImmDt, kPayload, kOnly, kWrite, kRc, kRequest),
    row(kRcReadRequest, "RC_RDMA_READ_REQUEST", kHdrReth, kNoPayload, kOnly, kReadRequest, kRc, kRequest),
    row(kRcReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", kHdrAeth, kPayload, kFirst, kReadResponse, kRc, kResponse),
    row(kRcReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", kNone, kPayload, kMiddle, kReadResponse, kRc, kResponse),
    row(kRcReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", kHdrAeth, kPayload, kLast, kReadResponse, kRc, kResponse),
    row(kRcReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", kHdrAeth, kPayload, kOnly, kReadResponse, kRc, kResponse),
    row(kRcAcknowledge, "RC_ACKNOWLEDGE", kHdrAeth, kNoPayload, kOnly, kAcknowledge, kRc, kResponse),
    row(kRcAtomicAcknowledge, "RC_ATOMIC_ACKNOWLEDGE", kHdrAeth | kHdrAtomicAckEth, kNoPayload, kOnly, kAtomicAcknowledge, kRc, kResponse),
    row(kRcCompareSwap, "RC_CMP_SWAP", kHdrAtomicEth, kNoPayload, kOnly, kCompareSwap, kRc, kRequest),
    row(kRcFetchAdd, "RC_FETCH_ADD", kHdrAtomicEth, kNoPayload, kOnly, kFetchAdd, kRc, kRequest),
    row(kRcSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", kHdrIeth, kPayload, kLast, kSend, kRc, kRequest),
    row(kRcSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", kHdrIeth, kPayload, kOnly, kSend, kRc, kRequest),
    // Memory placement extensions: a FLUSH is answered as a READ of nothing,
    // an ATOMIC WRITE (8 bytes of payload) is acknowledged as a WRITE.
    row(kRcFlush, "RC_FLUSH", kHdrFeth | kHdrReth, kNoPayload, kOnly, kFlush, kRc, kRequest),
    row(kRcAtomicWrite, "RC_ATOMIC_WRITE", kHdrReth, kPayload, kOnly, kAtomicWrite, kRc, kRequest),
    // Unreliable Connection: the RC sends and writes, nothing that answers.
    row(kUcSendFirst, "UC_SEND_FIRST", kNone, kPayload, kFirst, kSend, kUc, kRequest),
    row(kUcSendMiddle, "UC_SEND_MIDDLE", kNone, kPayload, kMiddle, kSend, kUc, kRequest),
    row(kUcSendLast, "UC_SEND_LAST", kNone, kPayload, kLast, kSend, kUc, kRequest),
    row(kUcSendLastImm, "UC_SEND_LAST_WITH_IMMEDIATE", kHdrImmDt, kPayload, kLast, kSend, kUc, kRequest),
    row(kUcSendOnly, "UC_SEND_ONLY", kNone, kPayload, kOnly, kSend, kUc, kRequest),
    row(kUcSendOnlyImm, "UC_SEND_ONLY_WITH_IMMEDIATE", kHdrImmDt, kPayload, kOnly, kSend, kUc, kRequest),
    row(kUcWriteFirst, "UC_RDMA_WRITE_FIRST", kHdrReth, kPayload, kFirst, kWrite, kUc, kRequest),
    row(kUcWriteMiddle, "UC_RDMA_WRITE_MIDDLE", kNone, kPayload, kMiddle, kWrite, kUc, kRequest),
    row(kUcWriteLast, "UC_RDMA_WRITE_LAST", kNone, kPayload, kLast, kWrite, kUc, kRequest),
    row(kUcWriteLastImm, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", kHdrImmDt, kPayload, kLast, kWrite, kUc, kRequest),
    row(kUcWriteOnly, "UC_RDMA_WRITE_ONLY", kHdrReth, kPayload, kOnly, kWrite, kUc, kRequest),
    row(kUcWriteOnlyImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", kHdrReth | kHdrImmDt, kPayload, kOnly, kWrite, kUc, kRequest),
    // Unreliable Datagram: single-packet sends that name their source QP.
    row(kUdSendOnly, "UD_SEND_ONLY", kHdrDeth, kPayload, kOnly, kSend, kUd, kRequest),
    row(kUdSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", kHdrDeth | kHdrImmDt, kPayload, kOnly, kSend, kUd, kRequest),
};

// XRC (IBTA 9.2, table 35): every RC opcode with the transport bits 101 and,
// on requests, the XRCETH naming the target's XRC SRQ (IBTA 9.3.1).
constexpr const char* kXrcNames[] = {
    "XRC_SEND_FIRST", "XRC_SEND_MIDDLE", "XRC_SEND_LAST", "XRC_SEND_LAST_WITH_IMMEDIATE",
    "XRC_SEND_ONLY", "XRC_SEND_ONLY_WITH_IMMEDIATE", "XRC_RDMA_WRITE_FIRST",
    "XRC_RDMA_WRITE_MIDDLE", "XRC_RDMA_WRITE_LAST", "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_ONLY", "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", "XRC_RDMA_READ_REQUEST",
    "XRC_RDMA_READ_RESPONSE_FIRST", "XRC_RDMA_READ_RESPONSE_MIDDLE",
    "XRC_RDMA_READ_RESPONSE_LAST", "XRC_RDMA_READ_RESPONSE_ONLY", "XRC_ACKNOWLEDGE",
    "XRC_ATOMIC_ACKNOWLEDGE", "XRC_CMP_SWAP", "XRC_FETCH_ADD", nullptr,
    "XRC_SEND_LAST_WITH_INVALIDATE", "XRC_SEND_ONLY_WITH_INVALIDATE", nullptr, nullptr,
    nullptr, nullptr, "XRC_FLUSH", "XRC_ATOMIC_WRITE",
};

// Indexed by the raw opcode byte; rows not listed keep name == nullptr.
constexpr std::array<OpcodeInfo, 256> kTable = [] {
  std::array<OpcodeInfo, 256> table{};
  for (const Row& r : kRows) table[static_cast<uint8_t>(r.opcode)] = r.info;
  for (uint8_t rc = 0; rc < std::size(kXrcNames); ++rc) {
    if (!table[rc].name) continue;
    OpcodeInfo xrc = table[rc];
    xrc.name = kXrcNames[rc];
    xrc.transport = Transport::kXrc;
    if (xrc.is_request) xrc.headers |= kHdrXrceth;
    table[rc | kXrcTransportBits] = xrc;
  }
  return table;
}();

}  // namespace

const OpcodeInfo& opcode_info(uint8_t opcode) { return kTable[opcode]; }

}  // namespace softverbs::packet
