// RoCEv2 framing: what a frame becomes on UDP, its ICRC against headers
// built here independently, the way back, and what is refused.
#include "emulator/packet/roce_v2.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "emulator/packet/icrc.h"

namespace softverbs::packet {
namespace {

Gid ipv4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  Gid g{};
  g[10] = g[11] = 0xff;
  g[12] = a, g[13] = b, g[14] = c, g[15] = d;
  return g;
}

Gid ipv6_gid(uint8_t last) {
  Gid g{};
  g[0] = 0xfd, g[15] = last;
  return g;
}

// An RC SEND_ONLY of `payload` between two GIDs, as the engine builds it.
std::vector<uint8_t> ib_frame(const Gid& from, const Gid& to,
                              const std::vector<uint8_t>& payload) {
  Headers h;
  h.has_grh = true;
  h.grh.sgid = from;
  h.grh.dgid = to;
  h.grh.hop_limit = 1;
  h.grh.traffic_class = 0x28;
  h.bth.opcode = Opcode::kRcSendOnly;
  h.bth.dest_qp = 0x12;
  h.bth.psn = 77;
  h.bth.ack_req = true;
  std::vector<uint8_t> frame(kMaxFrameBytes);
  frame.resize(encode_ib(h, payload, frame));
  return frame;
}

const std::vector<uint8_t> kPayload = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

struct Converted {
  RoceV2Addressing addressing;
  std::vector<uint8_t> udp_payload;
};

Converted to_roce(const std::vector<uint8_t>& frame) {
  Converted c;
  c.addressing.source_port = 0xc123;
  std::vector<uint8_t> out(frame.size() + kRoceV2MaxHeaderBytes);
  const std::span<const uint8_t> p = ib_to_roce_v2(frame, c.addressing, out);
  c.udp_payload.assign(p.begin(), p.end());
  return c;
}

// The IPv4 and UDP headers a kernel writes for the datagram, built here by
// hand: DF, identification `id`, TTL 64, checksum left 0 (masked anyway).
std::vector<uint8_t> ipv4_packet(const Converted& c, uint16_t id) {
  const size_t udp_bytes = 8 + c.udp_payload.size();
  std::vector<uint8_t> p = {0x45, c.addressing.traffic_class,
                            static_cast<uint8_t>((20 + udp_bytes) >> 8),
                            static_cast<uint8_t>(20 + udp_bytes),
                            static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id),
                            0x40, 0, 64, 17, 0, 0};
  p.insert(p.end(), c.addressing.source.begin() + 12, c.addressing.source.end());
  p.insert(p.end(), c.addressing.destination.begin() + 12, c.addressing.destination.end());
  p.insert(p.end(), {static_cast<uint8_t>(c.addressing.source_port >> 8),
                     static_cast<uint8_t>(c.addressing.source_port), 0x12, 0xb7,
                     static_cast<uint8_t>(udp_bytes >> 8), static_cast<uint8_t>(udp_bytes), 0,
                     0});
  p.insert(p.end(), c.udp_payload.begin(), c.udp_payload.end());
  return p;
}

uint32_t icrc_of(const std::vector<uint8_t>& packet) {
  return icrc_roce_v2(std::span(packet).first(packet.size() - kIcrcBytes));
}

TEST(RoceV2, AnIpv4FrameLosesItsLrhAndGrhAndCarriesTheIcrcOfTheRealHeaders) {
  const std::vector<uint8_t> frame = ib_frame(ipv4_gid(198, 18, 0, 1), ipv4_gid(198, 18, 0, 2), kPayload);
  ASSERT_FALSE(frame.empty());
  const Converted c = to_roce(frame);
  ASSERT_EQ(c.udp_payload.size(), frame.size() - kLrhBytes - kGrhBytes);
  EXPECT_TRUE(std::equal(c.udp_payload.begin(), c.udp_payload.end() - kIcrcBytes,
                         frame.begin() + kLrhBytes + kGrhBytes));
  EXPECT_EQ(c.addressing.source, ipv4_gid(198, 18, 0, 1));
  EXPECT_EQ(c.addressing.destination, ipv4_gid(198, 18, 0, 2));
  EXPECT_EQ(c.addressing.traffic_class, 0x28);
  EXPECT_EQ(load_icrc(c.udp_payload.data() + c.udp_payload.size() - kIcrcBytes),
            icrc_of(ipv4_packet(c, 0)));
}

TEST(RoceV2, AReceivedPacketBecomesTheSameFrameWithAFreshIbIcrc) {
  for (bool ipv4 : {true, false}) {
    const Gid from = ipv4 ? ipv4_gid(10, 0, 0, 1) : ipv6_gid(1);
    const Gid to = ipv4 ? ipv4_gid(10, 0, 0, 2) : ipv6_gid(2);
    const std::vector<uint8_t> frame = ib_frame(from, to, kPayload);
    Converted c = to_roce(frame);
    ASSERT_FALSE(c.udp_payload.empty());
    c.addressing.hop_limit = 1;  // as the sender's GRH said
    std::vector<uint8_t> out(c.udp_payload.size() + kRoceV2MaxHeaderBytes);
    std::span<const uint8_t> back;
    ASSERT_EQ(roce_v2_to_ib(c.addressing, c.udp_payload, out, back), DecodeError::kNone);
    DecodedPacket original, received;
    ASSERT_EQ(decode_ib(frame, original), DecodeError::kNone);
    ASSERT_EQ(decode_ib(back, received), DecodeError::kNone) << "ipv4=" << ipv4;
    EXPECT_EQ(received.headers.grh, original.headers.grh);
    EXPECT_EQ(received.headers.bth, original.headers.bth);
    EXPECT_TRUE(std::equal(received.payload.begin(), received.payload.end(), kPayload.begin(),
                           kPayload.end()));
  }
}

TEST(RoceV2, AChangedByteFailsTheIcrc) {
  Converted c = to_roce(ib_frame(ipv4_gid(10, 0, 0, 1), ipv4_gid(10, 0, 0, 2), kPayload));
  c.udp_payload[kBthBytes + 3] ^= 0x10;
  std::vector<uint8_t> out(c.udp_payload.size() + kRoceV2MaxHeaderBytes);
  std::span<const uint8_t> back;
  EXPECT_EQ(roce_v2_to_ib(c.addressing, c.udp_payload, out, back), DecodeError::kBadIcrc);
}

TEST(RoceV2, AFrameDamagedBeforeConversionStaysDamaged) {
  std::vector<uint8_t> frame = ib_frame(ipv4_gid(10, 0, 0, 1), ipv4_gid(10, 0, 0, 2), kPayload);
  frame[frame.size() - kIcrcBytes - 2] ^= 0x01;  // a payload bit, ICRC left as it was
  const Converted c = to_roce(frame);
  ASSERT_FALSE(c.udp_payload.empty());
  std::vector<uint8_t> out(c.udp_payload.size() + kRoceV2MaxHeaderBytes);
  std::span<const uint8_t> back;
  EXPECT_EQ(roce_v2_to_ib(c.addressing, c.udp_payload, out, back), DecodeError::kBadIcrc);
}

TEST(RoceV2, AnIpv4SenderThatNumbersItsPacketsIsStillChecked) {
  Converted c = to_roce(ib_frame(ipv4_gid(10, 0, 0, 1), ipv4_gid(10, 0, 0, 2), kPayload));
  const uint32_t numbered = icrc_of(ipv4_packet(c, 0xbeef));
  store_icrc(c.udp_payload.data() + c.udp_payload.size() - kIcrcBytes, numbered);
  std::vector<uint8_t> out(c.udp_payload.size() + kRoceV2MaxHeaderBytes);
  std::span<const uint8_t> back;
  EXPECT_EQ(roce_v2_to_ib(c.addressing, c.udp_payload, out, back), DecodeError::kNone);
  // The same packet with a payload bit changed is no numbering.
  c.udp_payload[kBthBytes] ^= 0x04;
  EXPECT_EQ(roce_v2_to_ib(c.addressing, c.udp_payload, out, back), DecodeError::kBadIcrc);
}

// A GSO segment's ICRC, made for its identification, is the one computed
// over its real IPv4 header; toggling again gives back identification 0's.
TEST(RoceV2, AnIcrcIsMadeForAnyIdentification) {
  Converted c = to_roce(ib_frame(ipv4_gid(10, 0, 0, 1), ipv4_gid(10, 0, 0, 2), kPayload));
  const std::vector<uint8_t> original = c.udp_payload;
  for (uint16_t id : {1, 2, 7, 15, 0x8001}) {
    toggle_ipv4_identification(c.udp_payload, id);
    EXPECT_EQ(load_icrc(c.udp_payload.data() + c.udp_payload.size() - kIcrcBytes),
              icrc_of(ipv4_packet(c, id)))
        << id;
    toggle_ipv4_identification(c.udp_payload, id);
    EXPECT_EQ(c.udp_payload, original);
  }
}

TEST(RoceV2, WhatIsNoRoceV2PacketIsRefused) {
  // A local (LRH-only) frame, and GIDs of two families.
  Headers h;
  h.bth.opcode = Opcode::kRcSendOnly;
  std::vector<uint8_t> local(kMaxFrameBytes);
  local.resize(encode_ib(h, kPayload, local));
  EXPECT_TRUE(to_roce(local).udp_payload.empty());
  EXPECT_TRUE(to_roce(ib_frame(ipv4_gid(10, 0, 0, 1), ipv6_gid(2), kPayload)).udp_payload.empty());
  // Datagrams too short for a BTH and an ICRC, or not whole words.
  RoceV2Addressing a;
  a.source = ipv4_gid(10, 0, 0, 1);
  a.destination = ipv4_gid(10, 0, 0, 2);
  std::vector<uint8_t> out(256);
  std::span<const uint8_t> back;
  EXPECT_EQ(roce_v2_to_ib(a, std::vector<uint8_t>(12), out, back), DecodeError::kTruncated);
  EXPECT_EQ(roce_v2_to_ib(a, std::vector<uint8_t>(18), out, back), DecodeError::kTruncated);
}

TEST(RoceV2, EachDestinationQpHasOneSourcePortInTheDynamicRange) {
  EXPECT_EQ(roce_v2_source_port(0x12), roce_v2_source_port(0x12));
  EXPECT_NE(roce_v2_source_port(0x12), roce_v2_source_port(0x13));
  for (uint32_t qpn : {0u, 1u, 0x12u, 0xffffffu}) EXPECT_GE(roce_v2_source_port(qpn), 0xc000);
}

}  // namespace
}  // namespace softverbs::packet
