// The RDMA CM's IP header in REQ / SIDR_REQ private data and its service
// IDs, byte for byte against Linux's struct cma_hdr and rdma_cma.h.
#include <gtest/gtest.h>

#include <vector>

#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_test_messages.h"
#include "emulator/cm/cma_ip_header.h"

namespace softverbs::cm {
namespace {

using Bytes = std::vector<uint8_t>;

CmaIpHeader ipv4_header() {
  return {.ip_version = 4, .source_port = 50000,
          .source = cma_ipv4_address({192, 168, 1, 10}),
          .destination = cma_ipv4_address({192, 168, 1, 20})};
}

CmaIpHeader ipv6_header() {
  CmaIpHeader h{.ip_version = 6, .source_port = 0x1234};
  for (size_t i = 0; i < 16; ++i) {
    h.source[i] = static_cast<uint8_t>(0x20 + i);
    h.destination[i] = static_cast<uint8_t>(0xf0 - i);
  }
  return h;
}

// cma_version 0, ip_version 4 in the high nibble, the source port, then
// each address as 12 zero bytes and the IPv4 address.
TEST(CmaIpHeader, Ipv4ByteForByte) {
  Bytes out(40, 0xee);
  ASSERT_EQ(encode_cma_ip_header(ipv4_header(), out), CmaHeaderError::kNone);
  Bytes expected = {0x00, 0x40, 0xc3, 0x50};
  expected.insert(expected.end(), 12, 0x00);
  expected.insert(expected.end(), {192, 168, 1, 10});
  expected.insert(expected.end(), 12, 0x00);
  expected.insert(expected.end(), {192, 168, 1, 20});
  expected.insert(expected.end(), 4, 0xee);  // beyond the header: untouched
  EXPECT_EQ(out, expected);
}

TEST(CmaIpHeader, Ipv6ByteForByte) {
  Bytes out(kCmaIpHeaderBytes);
  ASSERT_EQ(encode_cma_ip_header(ipv6_header(), out), CmaHeaderError::kNone);
  Bytes expected = {0x00, 0x60, 0x12, 0x34};
  for (int i = 0; i < 16; ++i) expected.push_back(static_cast<uint8_t>(0x20 + i));
  for (int i = 0; i < 16; ++i) expected.push_back(static_cast<uint8_t>(0xf0 - i));
  EXPECT_EQ(out, expected);
}

TEST(CmaIpHeader, RoundTripsBothVersions) {
  for (const CmaIpHeader& header : {ipv4_header(), ipv6_header()}) {
    Bytes bytes(kCmaIpHeaderBytes);
    ASSERT_EQ(encode_cma_ip_header(header, bytes), CmaHeaderError::kNone);
    CmaIpHeader decoded;
    ASSERT_EQ(decode_cma_ip_header(bytes, decoded), CmaHeaderError::kNone);
    EXPECT_EQ(decoded, header);
  }
}

// Only the last 4 bytes of an IPv4 address count, as in the kernel's
// union cma_ip_addr; the low nibble of the version byte is reserved.
TEST(CmaIpHeader, Ipv4PaddingAndReservedNibbleAreIgnored) {
  CmaIpHeader header = ipv4_header();
  header.source[0] = 0xff;  // not sent
  Bytes bytes(kCmaIpHeaderBytes);
  ASSERT_EQ(encode_cma_ip_header(header, bytes), CmaHeaderError::kNone);
  EXPECT_EQ(bytes[4], 0x00);
  bytes[1] |= 0x0f;
  bytes[5] = 0x77;   // padding of the source address
  bytes[20] = 0x88;  // padding of the destination address
  CmaIpHeader decoded;
  ASSERT_EQ(decode_cma_ip_header(bytes, decoded), CmaHeaderError::kNone);
  EXPECT_EQ(decoded, ipv4_header());
}

TEST(CmaIpHeader, RejectsMalformedHeaders) {
  CmaIpHeader decoded;
  Bytes bytes(kCmaIpHeaderBytes);
  ASSERT_EQ(encode_cma_ip_header(ipv6_header(), bytes), CmaHeaderError::kNone);
  EXPECT_EQ(decode_cma_ip_header(std::span(bytes).first(35), decoded),
            CmaHeaderError::kTruncated);
  Bytes other_version = bytes;
  other_version[0] = 0x01;
  EXPECT_EQ(decode_cma_ip_header(other_version, decoded), CmaHeaderError::kBadCmVersion);
  for (uint8_t version_byte : {0x00, 0x50, 0x70, 0xf0}) {
    Bytes bad_ip = bytes;
    bad_ip[1] = version_byte;
    EXPECT_EQ(decode_cma_ip_header(bad_ip, decoded), CmaHeaderError::kBadIpVersion);
  }

  Bytes short_out(35);
  EXPECT_EQ(encode_cma_ip_header(ipv4_header(), short_out), CmaHeaderError::kTruncated);
  CmaIpHeader bad = ipv4_header();
  bad.ip_version = 5;
  EXPECT_EQ(encode_cma_ip_header(bad, bytes), CmaHeaderError::kBadIpVersion);
  EXPECT_STREQ(to_string(CmaHeaderError::kBadCmVersion), "CMA version is not 0");
}

// The header sits at the start of the REQ's private data (MAD byte 164),
// the consumer's 56 bytes after it.
TEST(CmaIpHeader, InsideAReq) {
  ReqMessage req = testing::sample_req();
  req.private_data.fill(0);
  ASSERT_EQ(encode_cma_ip_header(ipv4_header(), req.private_data), CmaHeaderError::kNone);
  req.private_data[kCmaIpHeaderBytes] = 0xab;  // first consumer byte
  std::array<uint8_t, kMadBytes> mad{};
  ASSERT_TRUE(encode_cm_mad({1, 0, req}, mad).ok());
  EXPECT_EQ(mad[164], 0x00);
  EXPECT_EQ(mad[165], 0x40);
  EXPECT_EQ(mad[166], 0xc3);
  EXPECT_EQ(mad[167], 0x50);
  EXPECT_EQ(mad[164 + 16], 192);  // source IPv4 address, first byte
  EXPECT_EQ(mad[164 + 35], 20);   // destination IPv4 address, last byte
  EXPECT_EQ(mad[164 + 36], 0xab);
  EXPECT_EQ(ReqMessage::kPrivateDataBytes - kCmaIpHeaderBytes, 56u);

  CmMad decoded;
  ASSERT_EQ(decode_cm_mad(mad, decoded), DecodeError::kNone);
  CmaIpHeader header;
  ASSERT_EQ(decode_cma_ip_header(std::get<ReqMessage>(decoded.message).private_data, header),
            CmaHeaderError::kNone);
  EXPECT_EQ(header, ipv4_header());
}

// ---- Service IDs ------------------------------------------------------------

TEST(RdmaIpServiceId, MatchesRdmaCmaConstants) {
  EXPECT_EQ(rdma_ip_service_id(RdmaPortSpace::kTcp, 0), 0x0000000001060000u);
  EXPECT_EQ(rdma_ip_service_id(RdmaPortSpace::kUdp, 0), 0x0000000001110000u);
  EXPECT_EQ(rdma_ip_service_id(RdmaPortSpace::kIb, 0), 0x00000000013f0000u);
  EXPECT_EQ(kRdmaIpServiceIdTcp, rdma_ip_service_id(RdmaPortSpace::kTcp, 0));
  EXPECT_EQ(kRdmaIpServiceIdUdp, rdma_ip_service_id(RdmaPortSpace::kUdp, 0));
  EXPECT_EQ(kRdmaIpServiceIdIb, rdma_ip_service_id(RdmaPortSpace::kIb, 0));
  EXPECT_EQ(rdma_ip_service_id(RdmaPortSpace::kTcp, 7471), 0x0000000001061d2fu);
  EXPECT_EQ(rdma_ip_service_id(RdmaPortSpace::kUdp, 0xffff), 0x000000000111ffffu);
}

TEST(RdmaIpServiceId, ParsesTheThreePortSpacesOnly) {
  RdmaIpService service{};
  ASSERT_TRUE(parse_rdma_ip_service_id(0x0000000001061d2f, service));
  EXPECT_EQ(service.space, RdmaPortSpace::kTcp);
  EXPECT_EQ(service.port, 7471);
  ASSERT_TRUE(parse_rdma_ip_service_id(0x00000000013f0000, service));
  EXPECT_EQ(service.space, RdmaPortSpace::kIb);
  EXPECT_EQ(service.port, 0);
  ASSERT_TRUE(parse_rdma_ip_service_id(0x0000000001110457, service));
  EXPECT_EQ(service.space, RdmaPortSpace::kUdp);
  EXPECT_EQ(service.port, 0x0457);

  for (uint64_t other : {0x0000000000010000ull,    // SDP
                         0x0000000000020001ull,    // IPoIB port space
                         0x0000000001070000ull,    // unknown protocol
                         0x0000000101060000ull,    // bits above the prefix
                         0x0200000000000000ull}) {  // CM-assigned
    RdmaIpService untouched{RdmaPortSpace::kUdp, 99};
    EXPECT_FALSE(parse_rdma_ip_service_id(other, untouched)) << std::hex << other;
    EXPECT_EQ(untouched.port, 99);
  }
}

}  // namespace
}  // namespace softverbs::cm
