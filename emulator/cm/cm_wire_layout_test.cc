// Known bytes at known offsets: every message's fixed fields byte for byte,
// written out by hand from the IBTA message tables (Vol 1, chapter 12,
// tables 106-120) and the MAD header (13.4.2), so that a layout error
// cannot hide behind an encoder and a decoder that agree with each other.
// Offsets below are MAD offsets: the message data starts at byte 24.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_test_messages.h"
#include "emulator/cm/mad_header.h"

namespace softverbs::cm {
namespace {

using testing::pattern;
using testing::ramp_gid;
using Bytes = std::vector<uint8_t>;

constexpr size_t kData = kMadHeaderBytes;  // first byte of the message data

Bytes encode(const CmMessage& message, uint64_t tid = 0x0102030405060708,
             uint32_t attribute_modifier = 0) {
  std::array<uint8_t, kMadBytes> mad{};
  const EncodeStatus status = encode_cm_mad({tid, attribute_modifier, message}, mad);
  EXPECT_TRUE(status.ok()) << to_string(status.error) << " " << status.field;
  return Bytes(mad.begin(), mad.end());
}

Bytes slice(const Bytes& mad, size_t offset, size_t length) {
  return Bytes(mad.begin() + offset, mad.begin() + offset + length);
}

template <size_t N>
Bytes bytes_of(const std::array<uint8_t, N>& a) {
  return Bytes(a.begin(), a.end());
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes all;
  for (const Bytes& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// ---- MAD header -----------------------------------------------------------

// BaseVersion ClassVersion... (13.4.2): 8 bit fields, then 16-bit Status
// and ClassSpecific, 64-bit TID, 16-bit AttributeID, 16 reserved, 32-bit
// AttributeModifier, all big-endian.
TEST(CmWireLayout, MadHeaderByteForByte) {
  MadHeader header{.base_version = 0x01, .mgmt_class = 0x81, .class_version = 0x02,
                   .method = 0x83, .status = 0x1234, .class_specific = 0x5678,
                   .transaction_id = 0x1122334455667788, .attribute_id = 0x9abc,
                   .attribute_modifier = 0xdef01234};
  std::array<uint8_t, kMadHeaderBytes> out;
  out.fill(0xee);
  encode_mad_header(header, out);
  EXPECT_EQ(bytes_of(out), (Bytes{0x01, 0x81, 0x02, 0x83, 0x12, 0x34, 0x56, 0x78,
                                  0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                                  0x9a, 0xbc, 0x00, 0x00, 0xde, 0xf0, 0x12, 0x34}));
  EXPECT_EQ(decode_mad_header(out), header);
}

// A CM MAD: base version 1, class 0x07, class version 2, method Send (3),
// status and class-specific 0, the TID, the attribute ID, reserved 0, the
// attribute modifier (ECE options in a REQ or REP).
TEST(CmWireLayout, CmMadHeader) {
  const Bytes mad = encode(testing::sample_rep(), 0x8000000012345678, 0x00000003);
  EXPECT_EQ(slice(mad, 0, kMadHeaderBytes),
            (Bytes{0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00,
                   0x80, 0x00, 0x00, 0x00, 0x12, 0x34, 0x56, 0x78,
                   0x00, 0x13, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03}));
}

TEST(CmWireLayout, AttributeIdsAndMadSize) {
  EXPECT_EQ(slice(encode(testing::sample_req()), 16, 2), (Bytes{0x00, 0x10}));
  EXPECT_EQ(slice(encode(testing::sample_mra()), 16, 2), (Bytes{0x00, 0x11}));
  EXPECT_EQ(slice(encode(testing::sample_rej()), 16, 2), (Bytes{0x00, 0x12}));
  EXPECT_EQ(slice(encode(testing::sample_rep()), 16, 2), (Bytes{0x00, 0x13}));
  EXPECT_EQ(slice(encode(testing::sample_rtu()), 16, 2), (Bytes{0x00, 0x14}));
  EXPECT_EQ(slice(encode(testing::sample_dreq()), 16, 2), (Bytes{0x00, 0x15}));
  EXPECT_EQ(slice(encode(testing::sample_drep()), 16, 2), (Bytes{0x00, 0x16}));
  EXPECT_EQ(slice(encode(testing::sample_sidr_req()), 16, 2), (Bytes{0x00, 0x17}));
  EXPECT_EQ(slice(encode(testing::sample_sidr_rep()), 16, 2), (Bytes{0x00, 0x18}));
  EXPECT_EQ(kMadBytes, 256u);
}

// ---- REQ (table 106) ------------------------------------------------------

TEST(CmWireLayout, ReqFixedFieldsByteForByte) {
  const Bytes mad = encode(testing::sample_req());
  const Bytes head = {
      0x11, 0x22, 0x33, 0x44,  // 0: local communication ID
      0x00, 0x00, 0x02, 0xc9,  // 4: reserved, vendor ID (ECE)
      0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x1f, 0x90,  // 8: service ID
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // 16: local CA GUID
      0x00, 0x00, 0x00, 0x00,  // 24: reserved
      0xca, 0xfe, 0xf0, 0x0d,  // 28: local Q_Key
      0x12, 0x34, 0x56, 0x10,  // 32: local QPN, responder resources
      0x65, 0x43, 0x21, 0x08,  // 36: local EECN, initiator depth
      0x0f, 0xed, 0xcb,        // 40: remote EECN
      0xb3,  // 43: remote CM response timeout 10110, transport UC 01, E2E 1
      0xab, 0xcd, 0xef,  // 44: starting PSN
      0x9e,  // 47: local CM response timeout 10011, retry count 110
      0x80, 0x01,  // 48: P_Key
      0x4d,  // 50: path MTU 0100, RDC exists 1, RNR retry count 101
      0xb9,  // 51: max CM retries 1011, SRQ 1, extended transport type 001
  };
  const Bytes primary_lids = {0x12, 0x34, 0x56, 0x78};  // 52
  const Bytes primary_tail = {
      0xab, 0xcd, 0xe0, 0x2a,  // 88: flow label abcde, reserved 6, rate 101010
      0x5c, 0x40,              // 92: traffic class, hop limit
      0xa8,  // 94: SL 1010, subnet local 1, reserved 3
      0x90,  // 95: local ACK timeout 10010, reserved 3
  };
  const Bytes alternate_lids = {0x9a, 0xbc, 0xde, 0xf0};  // 96
  const Bytes alternate_tail = {
      0x13, 0x57, 0x90, 0x15,  // 132: flow label 13579, rate 010101
      0xa3, 0x07,              // 136
      0x50,  // 138: SL 0101, subnet local 0
      0x70,  // 139: local ACK timeout 01110
  };
  const Bytes expected = concat(
      {head, primary_lids, bytes_of(ramp_gid(0xa0)), bytes_of(ramp_gid(0xb0)),
       primary_tail, alternate_lids, bytes_of(ramp_gid(0xc0)),
       bytes_of(ramp_gid(0xd0)), alternate_tail});
  ASSERT_EQ(expected.size(), 140u);
  EXPECT_EQ(slice(mad, kData, 140), expected);
  EXPECT_EQ(slice(mad, kData + 140, 92), bytes_of(pattern<92>(0x01)));
}

// ---- The other messages ---------------------------------------------------

TEST(CmWireLayout, MraByteForByte) {
  const Bytes mad = encode(testing::sample_mra());
  EXPECT_EQ(slice(mad, kData, 10),
            (Bytes{0xaa, 0xbb, 0xcc, 0xdd, 0x12, 0x34, 0x56, 0x78,
                   0x40,     // 8: message MRAed 01 (REP), reserved 6
                   0xe8}));  // 9: service timeout 11101, reserved 3
  EXPECT_EQ(slice(mad, kData + 10, 222), bytes_of(pattern<222>(0x02)));
}

TEST(CmWireLayout, RejByteForByte) {
  const Bytes mad = encode(testing::sample_rej());
  EXPECT_EQ(slice(mad, kData, 12),
            (Bytes{0x0a, 0x0b, 0x0c, 0x0d, 0x01, 0x02, 0x03, 0x04,
                   0x80,        // 8: message rejected 10 (other), reserved 6
                   0x4a,        // 9: reject info length 0100101, reserved 1
                   0x00, 0x1c}));  // 10: reason 28 (consumer defined)
  EXPECT_EQ(slice(mad, kData + 12, 72), bytes_of(pattern<72>(0x03)));
  EXPECT_EQ(slice(mad, kData + 84, 148), bytes_of(pattern<148>(0x04)));
}

TEST(CmWireLayout, RepByteForByte) {
  const Bytes mad = encode(testing::sample_rep());
  EXPECT_EQ(slice(mad, kData, 36),
            (Bytes{0x01, 0x02, 0x03, 0x04,  // 0: local communication ID
                   0x05, 0x06, 0x07, 0x08,  // 4: remote communication ID
                   0x0b, 0xad, 0xca, 0xfe,  // 8: local Q_Key
                   0x34, 0x56, 0xab, 0xc1,  // 12: local QPN, vendor ID 23:16
                   0x10, 0x20, 0x30, 0xc2,  // 16: local EECN, vendor ID 15:8
                   0x99, 0x88, 0x77, 0xc3,  // 20: starting PSN, vendor ID 7:0
                   0x04, 0x03,              // 24: responder res., initiator depth
                   0x8d,  // 26: target ACK delay 10001, failover 10, E2E 1
                   0xd0,  // 27: RNR retry count 110, SRQ 1, reserved 4
                   0xf0, 0xe0, 0xd0, 0xc0, 0xb0, 0xa0, 0x90, 0x80}));  // 28: GUID
  EXPECT_EQ(slice(mad, kData + 36, 196), bytes_of(pattern<196>(0x05)));
}

TEST(CmWireLayout, RtuAndDrepByteForByte) {
  const Bytes rtu = encode(testing::sample_rtu());
  EXPECT_EQ(slice(rtu, kData, 8), (Bytes{0x31, 0x32, 0x33, 0x34, 0x41, 0x42, 0x43, 0x44}));
  EXPECT_EQ(slice(rtu, kData + 8, 224), bytes_of(pattern<224>(0x06)));
  const Bytes drep = encode(testing::sample_drep());
  EXPECT_EQ(slice(drep, kData, 8), (Bytes{0x51, 0x52, 0x53, 0x54, 0x61, 0x62, 0x63, 0x64}));
  EXPECT_EQ(slice(drep, kData + 8, 224), bytes_of(pattern<224>(0x08)));
}

TEST(CmWireLayout, DreqByteForByte) {
  const Bytes mad = encode(testing::sample_dreq());
  EXPECT_EQ(slice(mad, kData, 12),
            (Bytes{0xde, 0xad, 0xbe, 0xef, 0xfe, 0xed, 0xfa, 0xce,
                   0x7a, 0x7b, 0x7c, 0x00}));  // 8: remote QPN/EECN, reserved
  EXPECT_EQ(slice(mad, kData + 12, 220), bytes_of(pattern<220>(0x07)));
}

TEST(CmWireLayout, SidrReqByteForByte) {
  const Bytes mad = encode(testing::sample_sidr_req());
  EXPECT_EQ(slice(mad, kData, 16),
            (Bytes{0x76, 0x54, 0x32, 0x10,  // 0: request ID
                   0x7f, 0xff, 0x00, 0x00,  // 4: P_Key, reserved
                   0x00, 0x00, 0x00, 0x00, 0x01, 0x11, 0x30, 0x39}));  // 8
  EXPECT_EQ(slice(mad, kData + 16, 216), bytes_of(pattern<216>(0x09)));
}

TEST(CmWireLayout, SidrRepByteForByte) {
  const Bytes mad = encode(testing::sample_sidr_rep());
  EXPECT_EQ(slice(mad, kData, 24),
            (Bytes{0x76, 0x54, 0x32, 0x10,  // 0: request ID
                   0x04, 0x30,              // 4: status (redirect), info length
                   0xa1, 0xb2,              // 6: vendor ID 23:8 (ECE)
                   0x45, 0x67, 0x89, 0xc3,  // 8: QPN, vendor ID 7:0
                   0x00, 0x00, 0x00, 0x00, 0x01, 0x3f, 0x04, 0x57,  // 12: service ID
                   0x01, 0x23, 0x45, 0x67}));  // 20: Q_Key
  EXPECT_EQ(slice(mad, kData + 24, 72), bytes_of(pattern<72>(0x0a)));
  EXPECT_EQ(slice(mad, kData + 96, 136), bytes_of(pattern<136>(0x0b)));
}

// The decoder reads the same offsets: hand-placed bytes of a REQ's packed
// fields come back as the values the IBTA table gives them.
TEST(CmWireLayout, DecoderReadsHandPlacedReqFields) {
  Bytes mad(kMadBytes, 0);
  const Bytes header = {0x01, 0x07, 0x02, 0x03};
  std::copy(header.begin(), header.end(), mad.begin());
  mad[17] = 0x10;                // REQ
  mad[kData + 32] = 0x00;        // local QPN 0x00beef
  mad[kData + 33] = 0xbe;
  mad[kData + 34] = 0xef;
  mad[kData + 43] = 0x4d;        // 01001 10 1
  mad[kData + 47] = 0x3b;        // 00111 011
  mad[kData + 50] = 0x5a;        // 0101 1 010
  mad[kData + 51] = 0x73;        // 0111 0 011
  mad[kData + 88] = 0x00;        // flow label 0x00fff, rate 0x3f
  mad[kData + 89] = 0xff;
  mad[kData + 90] = 0xf0;
  mad[kData + 91] = 0x3f;
  mad[kData + 94] = 0x38;        // SL 0011, subnet local 1
  mad[kData + 95] = 0xf8;        // local ACK timeout 11111
  CmMad decoded;
  ASSERT_EQ(decode_cm_mad(mad, decoded), DecodeError::kNone);
  const auto* req = std::get_if<ReqMessage>(&decoded.message);
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(req->local_qpn, 0x00beefu);
  EXPECT_EQ(req->remote_cm_response_timeout, 0x09);
  EXPECT_EQ(req->transport_service_type, TransportServiceType::kRd);
  EXPECT_TRUE(req->end_to_end_flow_control);
  EXPECT_EQ(req->local_cm_response_timeout, 0x07);
  EXPECT_EQ(req->retry_count, 3);
  EXPECT_EQ(req->path_mtu, 5);
  EXPECT_TRUE(req->rdc_exists);
  EXPECT_EQ(req->rnr_retry_count, 2);
  EXPECT_EQ(req->max_cm_retries, 7);
  EXPECT_FALSE(req->srq);
  EXPECT_EQ(req->extended_transport_type, 3);
  EXPECT_EQ(req->primary_path.flow_label, 0x00fffu);
  EXPECT_EQ(req->primary_path.packet_rate, 0x3f);
  EXPECT_EQ(req->primary_path.sl, 3);
  EXPECT_TRUE(req->primary_path.subnet_local);
  EXPECT_EQ(req->primary_path.local_ack_timeout, 0x1f);
}

}  // namespace
}  // namespace softverbs::cm
