// The opcode table against IBTA 9.2 table 35 and 9.3 (which extension
// headers each opcode carries).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "emulator/packet/headers.h"
#include "emulator/packet/packet_test_support.h"

namespace softverbs::packet {
namespace {

using testing::kAllOpcodes;

const OpcodeInfo& info(Opcode opcode) {
  return opcode_info(static_cast<uint8_t>(opcode));
}

bool name_contains(Opcode opcode, const char* part) {
  return std::string(info(opcode).name).find(part) != std::string::npos;
}

TEST(OpcodeTable, EveryEnumOpcodeIsKnownWithAUniqueName) {
  std::set<std::string> names;
  for (Opcode opcode : kAllOpcodes) {
    ASSERT_NE(info(opcode).name, nullptr) << int(opcode);
    names.insert(info(opcode).name);
  }
  EXPECT_EQ(names.size(), std::size(kAllOpcodes));
}

TEST(OpcodeTable, EveryOtherByteIsUnknown) {
  std::set<uint8_t> known;
  for (Opcode opcode : kAllOpcodes) known.insert(static_cast<uint8_t>(opcode));
  for (int code = 0; code < 256; ++code) {
    if (known.count(code)) continue;
    const OpcodeInfo& unknown = opcode_info(static_cast<uint8_t>(code));
    EXPECT_EQ(unknown.name, nullptr) << code;
    EXPECT_EQ(unknown.headers, 0) << code;
  }
}

// IBTA 9.2: the upper three bits of the opcode name the transport.
TEST(OpcodeTable, TransportFollowsTheUpperThreeBits) {
  for (Opcode opcode : kAllOpcodes) {
    const uint8_t prefix = static_cast<uint8_t>(opcode) >> 5;
    const Transport expected = prefix == 0   ? Transport::kRc
                               : prefix == 1 ? Transport::kUc
                               : prefix == 3 ? Transport::kUd
                                             : Transport::kXrc;
    EXPECT_TRUE(prefix == 0 || prefix == 1 || prefix == 3 || prefix == 5) << int(opcode);
    EXPECT_EQ(info(opcode).transport, expected) << info(opcode).name;
    const char* name_prefix = prefix == 0   ? "RC_"
                              : prefix == 1 ? "UC_"
                              : prefix == 3 ? "UD_"
                                            : "XRC_";
    EXPECT_EQ(std::string(info(opcode).name).rfind(name_prefix, 0), 0u)
        << info(opcode).name;
  }
}

// IBTA 9.3: which opcodes carry which extension header.
TEST(OpcodeTable, ExtensionHeadersPerIbta) {
  for (Opcode listed : kAllOpcodes) {
    const uint16_t headers = info(listed).headers;
    // XRC carries what its RC counterpart carries, plus the XRCETH on requests.
    const Opcode opcode = rc_counterpart(listed);
    const bool imm = name_contains(opcode, "IMMEDIATE");
    const bool inv = name_contains(opcode, "INVALIDATE");
    const bool reth = opcode == Opcode::kRcWriteFirst ||
                      opcode == Opcode::kRcWriteOnly ||
                      opcode == Opcode::kRcWriteOnlyImm ||
                      opcode == Opcode::kRcReadRequest ||
                      opcode == Opcode::kUcWriteFirst ||
                      opcode == Opcode::kUcWriteOnly ||
                      opcode == Opcode::kUcWriteOnlyImm ||
                      opcode == Opcode::kRcFlush || opcode == Opcode::kRcAtomicWrite;
    const bool aeth = opcode == Opcode::kRcReadResponseFirst ||
                      opcode == Opcode::kRcReadResponseLast ||
                      opcode == Opcode::kRcReadResponseOnly ||
                      opcode == Opcode::kRcAcknowledge ||
                      opcode == Opcode::kRcAtomicAcknowledge;
    const bool atomic = opcode == Opcode::kRcCompareSwap ||
                        opcode == Opcode::kRcFetchAdd;
    const bool deth = info(listed).transport == Transport::kUd;
    const bool xrceth = info(listed).transport == Transport::kXrc && info(listed).is_request;
    SCOPED_TRACE(info(listed).name);
    EXPECT_EQ(bool(headers & kHdrXrceth), xrceth);
    EXPECT_EQ(bool(headers & kHdrImmDt), imm);
    EXPECT_EQ(bool(headers & kHdrIeth), inv);
    EXPECT_EQ(bool(headers & kHdrReth), reth);
    EXPECT_EQ(bool(headers & kHdrAeth), aeth);
    EXPECT_EQ(bool(headers & kHdrAtomicEth), atomic);
    EXPECT_EQ(bool(headers & kHdrAtomicAckEth),
              opcode == Opcode::kRcAtomicAcknowledge);
    EXPECT_EQ(bool(headers & kHdrDeth), deth);
    EXPECT_EQ(bool(headers & kHdrFeth), opcode == Opcode::kRcFlush);  // IBTA annex A19
  }
}

TEST(OpcodeTable, PayloadOnlyOnDataCarryingOpcodes) {
  for (Opcode listed : kAllOpcodes) {
    const Opcode opcode = rc_counterpart(listed);
    const bool none = opcode == Opcode::kRcReadRequest ||
                      opcode == Opcode::kRcAcknowledge ||
                      opcode == Opcode::kRcAtomicAcknowledge ||
                      opcode == Opcode::kRcCompareSwap ||
                      opcode == Opcode::kRcFetchAdd || opcode == Opcode::kRcFlush;
    EXPECT_EQ(info(listed).has_payload, !none) << info(listed).name;
  }
}

TEST(OpcodeTable, PositionMatchesTheName) {
  for (Opcode opcode : kAllOpcodes) {
    Position expected = Position::kOnly;  // requests, acks and atomics
    if (name_contains(opcode, "_FIRST")) expected = Position::kFirst;
    if (name_contains(opcode, "_MIDDLE")) expected = Position::kMiddle;
    if (name_contains(opcode, "_LAST")) expected = Position::kLast;
    EXPECT_EQ(info(opcode).position, expected) << info(opcode).name;
  }
}

TEST(OpcodeTable, OperationMatchesTheName) {
  for (Opcode opcode : kAllOpcodes) {
    Operation expected;
    if (name_contains(opcode, "RDMA_WRITE")) expected = Operation::kWrite;
    else if (name_contains(opcode, "READ_REQUEST")) expected = Operation::kReadRequest;
    else if (name_contains(opcode, "READ_RESPONSE")) expected = Operation::kReadResponse;
    else if (name_contains(opcode, "ATOMIC_ACK")) expected = Operation::kAtomicAcknowledge;
    else if (name_contains(opcode, "ACKNOWLEDGE")) expected = Operation::kAcknowledge;
    else if (name_contains(opcode, "CMP_SWAP")) expected = Operation::kCompareSwap;
    else if (name_contains(opcode, "FETCH_ADD")) expected = Operation::kFetchAdd;
    else if (name_contains(opcode, "FLUSH")) expected = Operation::kFlush;
    else if (name_contains(opcode, "ATOMIC_WRITE")) expected = Operation::kAtomicWrite;
    else expected = Operation::kSend;
    EXPECT_EQ(info(opcode).operation, expected) << info(opcode).name;
  }
}

// Responses (read responses, ACKs) travel responder to requester.
TEST(OpcodeTable, OnlyResponsesAndAcknowledgementsAreNotRequests) {
  for (Opcode opcode : kAllOpcodes) {
    const Operation op = info(opcode).operation;
    const bool response = op == Operation::kReadResponse ||
                          op == Operation::kAcknowledge ||
                          op == Operation::kAtomicAcknowledge;
    EXPECT_EQ(info(opcode).is_request, !response) << info(opcode).name;
  }
}

// IBTA 9.2: a UC opcode is the RC opcode of the same operation plus 0x20.
TEST(OpcodeTable, UcOpcodesMirrorTheirRcCounterparts) {
  for (Opcode opcode : kAllOpcodes) {
    if (info(opcode).transport != Transport::kUc) continue;
    const OpcodeInfo& uc = info(opcode);
    const OpcodeInfo& rc = opcode_info(static_cast<uint8_t>(opcode) - 0x20);
    ASSERT_NE(rc.name, nullptr) << uc.name;
    EXPECT_STREQ(rc.name + 3, uc.name + 3);
    EXPECT_EQ(rc.headers, uc.headers) << uc.name;
    EXPECT_EQ(rc.has_payload, uc.has_payload) << uc.name;
    EXPECT_EQ(rc.position, uc.position) << uc.name;
    EXPECT_EQ(rc.operation, uc.operation) << uc.name;
  }
}

// IBTA 9.2: an XRC opcode is the RC opcode of the same operation plus 0xA0,
// and only XRC requests carry the XRCETH.
TEST(OpcodeTable, XrcOpcodesMirrorTheirRcCounterparts) {
  int xrc = 0;
  for (Opcode opcode : kAllOpcodes) {
    if (info(opcode).transport != Transport::kXrc) continue;
    ++xrc;
    const OpcodeInfo& x = info(opcode);
    const OpcodeInfo& rc = opcode_info(static_cast<uint8_t>(opcode) - 0xa0);
    ASSERT_NE(rc.name, nullptr) << x.name;
    EXPECT_STREQ(rc.name + 3, x.name + 4);
    EXPECT_EQ(rc.headers | (rc.is_request ? kHdrXrceth : 0), x.headers) << x.name;
    EXPECT_EQ(rc.position, x.position) << x.name;
    EXPECT_EQ(rc.operation, x.operation) << x.name;
    EXPECT_EQ(rc.is_request, x.is_request) << x.name;
  }
  EXPECT_EQ(xrc, 25);
}

}  // namespace
}  // namespace softverbs::packet
