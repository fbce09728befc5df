// The UDP wire on the loopback interface: a frame goes out as RoCEv2 and
// comes back as the same frame; what a hostile sender throws at the port is
// dropped and counted.
#include "emulator/wire/udp_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "emulator/packet/codec.h"

namespace softverbs {
namespace {

Gid loopback_gid() {
  Gid g{};
  g[10] = g[11] = 0xff;
  g[12] = 127, g[15] = 1;
  return g;
}

// A port no socket holds now (the wire shares ports with SO_REUSEPORT, so
// an occupied one would split the traffic).
uint16_t unused_port() {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t length = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length);
  close(fd);
  return ntohs(a.sin_port);
}

Gid ipv6_loopback_gid() {
  Gid g{};
  g[15] = 1;
  return g;
}

std::vector<uint8_t> send_frame(uint32_t psn, const Gid& gid = loopback_gid(),
                                size_t payload_bytes = 100) {
  packet::Headers h;
  h.has_grh = true;
  h.grh.sgid = h.grh.dgid = gid;
  h.bth.opcode = packet::Opcode::kRcSendOnly;
  h.bth.dest_qp = 0x21;
  h.bth.psn = psn;
  const std::vector<uint8_t> payload(payload_bytes, static_cast<uint8_t>(psn));
  std::vector<uint8_t> frame(packet::kMaxFrameBytes);
  frame.resize(packet::encode_ib(h, payload, frame));
  return frame;
}

// Receives until `wanted` frames came or a second passed.
std::vector<std::vector<uint8_t>> receive(UdpWire& wire, size_t wanted) {
  std::vector<std::vector<uint8_t>> got;
  for (int i = 0; i < 1000 && got.size() < wanted; ++i) {
    wire.receive([&](std::span<const uint8_t> f) { got.emplace_back(f.begin(), f.end()); }, 16);
    if (got.size() < wanted) usleep(1000);
  }
  return got;
}

WireCounters counters_of(const UdpWire& wire) {
  WireCounters c;
  wire.add_counters(c);
  return c;
}

// Sends raw bytes to the wire's port, as any program could.
void send_raw(uint16_t port, const std::vector<uint8_t>& bytes) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sendto(fd, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  close(fd);
}

TEST(UdpWire, FramesComeBackIntactAndInOrder) {
  Errno err = 0;
  auto wire = UdpWire::open(unused_port(), err);
  ASSERT_TRUE(wire) << err;
  for (uint32_t psn = 1; psn <= 5; ++psn) ASSERT_TRUE(wire->send(send_frame(psn)));
  const auto got = receive(*wire, 5);
  ASSERT_EQ(got.size(), 5u);
  for (uint32_t psn = 1; psn <= 5; ++psn) {
    packet::DecodedPacket p;
    ASSERT_EQ(packet::decode_ib(got[psn - 1], p), packet::DecodeError::kNone);
    EXPECT_EQ(p.headers.bth.psn, psn);
    EXPECT_EQ(p.headers.grh.dgid, loopback_gid());
    EXPECT_EQ(p.payload.size(), 100u);
    EXPECT_EQ(p.payload[99], psn);
  }
  const WireCounters c = counters_of(*wire);
  EXPECT_EQ(c.udp_datagrams_sent, 5u);
  EXPECT_EQ(c.udp_datagrams_received, 5u);
}

// In a burst datagrams wait for its end, or leave kSendBatch at a time;
// every one arrives, in order, intact.
TEST(UdpWire, ABurstLeavesWhenItEndsInOrder) {
  Errno err = 0;
  auto wire = UdpWire::open(unused_port(), err);
  ASSERT_TRUE(wire) << err;
  constexpr uint32_t kFrames = UdpWire::kSendBatch + 5;
  wire->begin_burst();
  wire->begin_burst();  // nested: only the outer end sends
  for (uint32_t psn = 1; psn <= 3; ++psn) ASSERT_TRUE(wire->send(send_frame(psn)));
  wire->end_burst();
  EXPECT_TRUE(receive(*wire, 1).empty()) << "a datagram left before its burst ended";
  for (uint32_t psn = 4; psn <= kFrames; ++psn) ASSERT_TRUE(wire->send(send_frame(psn)));
  // The first kSendBatch left when the batch filled; the rest wait.
  EXPECT_EQ(receive(*wire, UdpWire::kSendBatch).size(), UdpWire::kSendBatch);
  wire->end_burst();
  const auto rest = receive(*wire, kFrames - UdpWire::kSendBatch);
  ASSERT_EQ(rest.size(), kFrames - UdpWire::kSendBatch);
  for (size_t i = 0; i < rest.size(); ++i) {
    packet::DecodedPacket p;
    ASSERT_EQ(packet::decode_ib(rest[i], p), packet::DecodeError::kNone);
    EXPECT_EQ(p.headers.bth.psn, UdpWire::kSendBatch + 1 + i);
    EXPECT_EQ(p.payload[0], static_cast<uint8_t>(p.headers.bth.psn));
  }
  const WireCounters c = counters_of(*wire);
  EXPECT_EQ(c.udp_datagrams_sent, kFrames);
  EXPECT_EQ(c.udp_send_failures, 0u);
}

// Equal datagrams to one destination leave as one UDP GSO send (the
// loopback interface has it); the kernel cuts it up again, and each
// segment, numbered by the kernel, passes the receiver's ICRC check.
TEST(UdpWire, EqualDatagramsToOneDestinationLeaveAsOneSegmentedSend) {
  Errno err = 0;
  auto wire = UdpWire::open(unused_port(), err);
  ASSERT_TRUE(wire) << err;
  wire->begin_burst();
  for (uint32_t psn = 1; psn <= 8; ++psn) ASSERT_TRUE(wire->send(send_frame(psn)));
  wire->end_burst();
  const auto got = receive(*wire, 8);
  ASSERT_EQ(got.size(), 8u);
  for (uint32_t psn = 1; psn <= 8; ++psn) {
    packet::DecodedPacket p;
    ASSERT_EQ(packet::decode_ib(got[psn - 1], p), packet::DecodeError::kNone);
    EXPECT_EQ(p.headers.bth.psn, psn);
  }
  const WireCounters c = counters_of(*wire);
  EXPECT_EQ(c.udp_segmented_sends, 1u);
  EXPECT_EQ(c.udp_segmented_datagrams, 8u);
  // The receiving socket takes it whole (UDP GRO) and the wire cuts it.
  EXPECT_EQ(c.udp_coalesced_receives, 1u);
  EXPECT_EQ(c.udp_coalesced_datagrams, 8u);
  EXPECT_EQ(c.udp_datagrams_received, 8u);
  EXPECT_EQ(c.udp_dropped_bad_icrc, 0u);
}

// A coalesced buffer from any sender: every datagram in it is checked on
// its own, so one with a bad ICRC is dropped and its neighbours, the
// shorter last one included, are delivered.
TEST(UdpWire, EachDatagramOfACoalescedBufferIsCheckedOnItsOwn) {
  Errno err = 0;
  const uint16_t port = unused_port();
  auto wire = UdpWire::open(port, err);
  ASSERT_TRUE(wire) << err;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
  socklen_t length = sizeof from;
  getsockname(fd, reinterpret_cast<sockaddr*>(&from), &length);

  // Four RoCEv2 datagrams from this socket's port, the last one shorter.
  std::vector<uint8_t> stream;
  size_t segment_bytes = 0;
  for (uint32_t psn = 1; psn <= 4; ++psn) {
    packet::RoceV2Addressing a;
    a.destination_port = port;
    a.source_port = ntohs(from.sin_port);
    std::vector<uint8_t> out(packet::kMaxFrameBytes + packet::kRoceV2MaxHeaderBytes);
    const auto datagram =
        packet::ib_to_roce_v2(send_frame(psn, loopback_gid(), psn == 4 ? 40 : 200), a, out);
    ASSERT_FALSE(datagram.empty());
    if (psn == 1) segment_bytes = datagram.size();
    stream.insert(stream.end(), datagram.begin(), datagram.end());
  }
  stream[segment_bytes + packet::kBthBytes + 7] ^= 0x10;  // a payload byte of PSN 2

  sockaddr_in to = from;
  to.sin_port = htons(port);
  const int segment = static_cast<int>(segment_bytes);
  ASSERT_EQ(setsockopt(fd, SOL_UDP, UDP_SEGMENT, &segment, sizeof segment), 0);
  ASSERT_EQ(sendto(fd, stream.data(), stream.size(), 0, reinterpret_cast<sockaddr*>(&to),
                   sizeof to),
            static_cast<ssize_t>(stream.size()));
  close(fd);

  const auto got = receive(*wire, 3);
  ASSERT_EQ(got.size(), 3u);
  std::vector<uint32_t> psns;
  for (const auto& f : got) {
    packet::DecodedPacket p;
    ASSERT_EQ(packet::decode_ib(f, p), packet::DecodeError::kNone);
    EXPECT_EQ(p.payload.size(), p.headers.bth.psn == 4 ? 40u : 200u);
    EXPECT_EQ(p.payload.back(), p.headers.bth.psn);
    psns.push_back(p.headers.bth.psn);
  }
  EXPECT_EQ(psns, (std::vector<uint32_t>{1, 3, 4}));
  const WireCounters c = counters_of(*wire);
  EXPECT_EQ(c.udp_coalesced_receives, 1u);
  EXPECT_EQ(c.udp_coalesced_datagrams, 4u);
  EXPECT_EQ(c.udp_datagrams_received, 4u);
  EXPECT_EQ(c.udp_dropped_bad_icrc, 1u);
}

// IPv4 and IPv6 datagrams in one burst leave from their own sockets, each
// with its own ancillary data.
TEST(UdpWire, ABurstMixesIpv4AndIpv6) {
  Errno err = 0;
  auto wire = UdpWire::open(unused_port(), err);
  ASSERT_TRUE(wire) << err;
  if (!wire->has_ipv6()) GTEST_SKIP() << "this host has no IPv6";
  wire->begin_burst();
  for (uint32_t psn = 1; psn <= 6; ++psn)
    ASSERT_TRUE(wire->send(send_frame(psn, psn % 2 ? ipv6_loopback_gid() : loopback_gid())));
  wire->end_burst();
  const auto got = receive(*wire, 6);
  ASSERT_EQ(got.size(), 6u);
  std::vector<uint32_t> psns;
  for (const auto& f : got) {
    packet::DecodedPacket p;
    ASSERT_EQ(packet::decode_ib(f, p), packet::DecodeError::kNone);
    EXPECT_EQ(p.headers.grh.dgid, p.headers.bth.psn % 2 ? ipv6_loopback_gid() : loopback_gid());
    psns.push_back(p.headers.bth.psn);
  }
  std::sort(psns.begin(), psns.end());
  EXPECT_EQ(psns, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6}));
}

// A child forked while the wire was open does not keep its sockets: once
// the parent closes the wire, none of the port's datagrams go to a socket
// the child holds without reading (SO_REUSEPORT would give it a share).
TEST(UdpWire, AForkedChildKeepsNoSocketOfThePort) {
  Errno err = 0;
  const uint16_t port = unused_port();
  auto wire = UdpWire::open(port, err);
  ASSERT_TRUE(wire) << err;
  int started[2];
  ASSERT_EQ(pipe(started), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Running: whatever fork() leaves the child to do is done.
    if (write(started[1], "x", 1) != 1) _exit(1);
    sleep(10);  // alive, serving nothing, until the test ends
    _exit(0);
  }
  char byte;
  ASSERT_EQ(read(started[0], &byte, 1), 1);
  close(started[0]);
  close(started[1]);
  wire.reset();
  auto next = UdpWire::open(port, err);
  ASSERT_TRUE(next) << err;
  // From many source ports, so that the kernel's hash would spread them
  // over every socket in the group.
  constexpr uint64_t kDatagrams = 32;
  for (uint64_t i = 0; i < kDatagrams; ++i) send_raw(port, std::vector<uint8_t>(30, 0x64));
  WireCounters c;
  for (int i = 0; i < 1000 && c.udp_datagrams_received < kDatagrams; ++i) {
    next->receive([](std::span<const uint8_t>) {}, 16);
    c = counters_of(*next);
    if (c.udp_datagrams_received < kDatagrams) usleep(1000);
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_EQ(c.udp_datagrams_received, kDatagrams);
}

TEST(UdpWire, WhatAHostileSenderSendsIsDroppedAndCounted) {
  Errno err = 0;
  const uint16_t port = unused_port();
  auto wire = UdpWire::open(port, err);
  ASSERT_TRUE(wire) << err;
  // A good packet with one payload byte changed, truncated headers, a
  // length that is no whole number of words, and nothing at all.
  const std::vector<uint8_t> frame = send_frame(9);
  std::vector<uint8_t> tampered(frame.begin() + packet::kLrhBytes + packet::kGrhBytes, frame.end());
  packet::RoceV2Addressing a;
  std::vector<uint8_t> out(frame.size() + packet::kRoceV2MaxHeaderBytes);
  const auto good = packet::ib_to_roce_v2(frame, a, out);
  tampered.assign(good.begin(), good.end());
  tampered[packet::kBthBytes + 10] ^= 0xff;
  send_raw(port, tampered);
  send_raw(port, std::vector<uint8_t>(7, 0x64));
  send_raw(port, std::vector<uint8_t>(30, 0x64));
  send_raw(port, {});
  const auto got = receive(*wire, 1);
  EXPECT_TRUE(got.empty());
  const WireCounters c = counters_of(*wire);
  EXPECT_EQ(c.udp_datagrams_received, 4u);
  EXPECT_EQ(c.udp_dropped_bad_icrc, 1u);
  EXPECT_EQ(c.udp_dropped_malformed, 3u);
}

}  // namespace
}  // namespace softverbs
