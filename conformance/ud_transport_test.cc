// Unreliable Datagram QPs between two processes (IBTA 9.8.2, 10.2.5, 11.4.1.1;
// ibv_post_send(3), ibv_create_ah(3)): every receive buffer starts with the
// 40 bytes kept for a GRH, the completion names the sender (src_qp, slid,
// sl) and says whether a GRH came; a datagram whose Q_Key differs from the
// receiving QP's is dropped silently; a Q_Key with the high bit set in a WR
// means the sending QP's own; a message above the MTU is refused; a
// datagram to a QPN nobody owns simply vanishes while the send succeeds.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "conformance/datagram_endpoint.h"
#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr auto kWait = std::chrono::milliseconds(3000);
constexpr auto kQuiet = std::chrono::milliseconds(300);

void fill(uint8_t* p, uint32_t length, uint8_t seed) {
  for (uint32_t i = 0; i < length; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
}

bool filled(const uint8_t* p, uint32_t length, uint8_t seed) {
  for (uint32_t i = 0; i < length; ++i)
    if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
  return true;
}

// The receiving side: posts `receives` buffers of `slot` bytes, tells the
// sender where it is, learns the sender's address, then runs `check`.
PeerOutcome run_receiver(PeerChannel& channel, uint32_t receives, uint32_t slot,
                         const std::function<PeerOutcome(DatagramEndpoint&,
                                                         const DatagramAddress&)>& check) {
  DatagramEndpoint self;
  if (!self.error().empty()) return PeerOutcome::fail(self.error());
  for (uint32_t i = 0; i < receives; ++i)
    if (self.post_recv(100 + i, uint64_t(i) * slot, slot))
      return PeerOutcome::fail("post_recv failed");
  if (channel.send(self.address())) return PeerOutcome::fail("send address");
  DatagramAddress sender;
  if (channel.receive(sender)) return PeerOutcome::fail("receive address");
  return check(self, sender);
}

constexpr uint32_t kDatagramSlot = 8192;
constexpr uint32_t kDatagramSizes[] = {0, 1, 100, 1024};

// The receiving side of the next test, in the peer process.
PeerOutcome receive_four_datagrams(PeerChannel& channel, uint32_t) {
  constexpr uint32_t kSlot = kDatagramSlot;
  const auto& sizes = kDatagramSizes;
  return run_receiver(channel, 4, kSlot, [&](DatagramEndpoint& self,
                                             const DatagramAddress& sender) {
    const std::vector<ibv_wc> wcs = self.poll(4, kWait);
    if (wcs.size() != 4) return PeerOutcome::fail("got " + std::to_string(wcs.size()));
    for (uint32_t i = 0; i < 4; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 100 + i || wc.opcode != IBV_WC_RECV)
        return PeerOutcome::fail("completion " + std::to_string(i) + " wrong");
      if (wc.byte_len != sizes[i] + kGrhBytes)
        return PeerOutcome::fail("byte_len " + std::to_string(wc.byte_len));
      if (wc.src_qp != sender.qpn || wc.qp_num != self.qp()->qp_num)
        return PeerOutcome::fail("src_qp/qp_num wrong");
      if (!sender.use_grh && wc.slid != sender.lid) return PeerOutcome::fail("slid wrong");
      const bool imm = i == 3;
      if (imm != bool(wc.wc_flags & IBV_WC_WITH_IMM) || (imm && wc.imm_data != htonl(77)))
        return PeerOutcome::fail("immediate wrong");
      if (sender.use_grh != bool(wc.wc_flags & IBV_WC_GRH))
        return PeerOutcome::fail("IBV_WC_GRH wrong");
      if (!filled(self.buffer() + uint64_t(i) * kSlot + kGrhBytes, sizes[i], uint8_t(i)))
        return PeerOutcome::fail("payload " + std::to_string(i) + " corrupted");
    }
    return PeerOutcome::pass();
  });
}
[[maybe_unused]] const bool kFourDatagramsRegistered =
    register_peer_service("ud-four-datagrams", receive_four_datagrams);

TEST(UdTransport, DatagramsArriveBehindTheGrhAreaAndNameTheirSender) {
  const auto& sizes = kDatagramSizes;
  const PeerOutcome outcome = run_with_peer_service(
      "ud-four-datagrams", 0,
      [&](PeerChannel& channel) {
        DatagramEndpoint self;
        ASSERT_EQ("", self.error());
        DatagramAddress receiver;
        ASSERT_EQ(0, channel.receive(receiver)) << channel.explain(ETIMEDOUT);
        ASSERT_EQ(0, channel.send(self.address()));
        ibv_ah* ah = self.make_ah(receiver);
        ASSERT_NE(nullptr, ah) << strerror(errno);
        for (uint32_t i = 0; i < 4; ++i) {
          fill(self.buffer() + uint64_t(i) * 4096, sizes[i], uint8_t(i));
          const uint32_t imm = htonl(77);
          ASSERT_EQ(0, self.send(ah, receiver.qpn, kTestQkey, i, uint64_t(i) * 4096, sizes[i],
                                 i == 3 ? &imm : nullptr));
        }
        const std::vector<ibv_wc> sent = self.poll(4, kWait);
        ASSERT_EQ(4u, sent.size());
        for (const ibv_wc& wc : sent) EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
      });
  EXPECT_TRUE(outcome.passed) << outcome.message;
}

// The receiving side of the next test, in the peer process.
PeerOutcome receive_by_qkey(PeerChannel& channel, uint32_t) {
  return run_receiver(channel, 4, 4096, [&](DatagramEndpoint& self, const DatagramAddress&) {
    // Three datagrams were sent: wrong Q_Key, right Q_Key, and the
    // high bit (the sender's QP has the receiver's Q_Key).
    const std::vector<ibv_wc> wcs = self.poll(2, kWait);
    if (wcs.size() != 2) return PeerOutcome::fail("got " + std::to_string(wcs.size()));
    if (!self.poll(1, kQuiet).empty()) return PeerOutcome::fail("the wrong Q_Key arrived");
    if (wcs[0].wr_id != 100 || wcs[1].wr_id != 101) return PeerOutcome::fail("order");
    if (!filled(self.buffer() + kGrhBytes, 16, 2)) return PeerOutcome::fail("first");
    if (!filled(self.buffer() + 4096 + kGrhBytes, 16, 3)) return PeerOutcome::fail("second");
    if (soft_control_available()) {  // the drop is counted where it happened
      std::string stats;
      if (soft_control("stats", stats)) return PeerOutcome::fail("stats");
      if (qp_counter(stats, self.qp()->qp_num, "qkey_violations") != 1u)
        return PeerOutcome::fail("qkey_violations not 1:\n" + stats);
    }
    return PeerOutcome::pass();
  });
}
[[maybe_unused]] const bool kByQkeyRegistered =
    register_peer_service("ud-by-qkey", receive_by_qkey);

TEST(UdTransport, WrongQkeyIsDroppedAndTheHighBitMeansTheQpsOwn) {
  const PeerOutcome outcome = run_with_peer_service(
      "ud-by-qkey", 0,
      [&](PeerChannel& channel) {
        DatagramEndpoint self;
        ASSERT_EQ("", self.error());
        DatagramAddress receiver;
        ASSERT_EQ(0, channel.receive(receiver));
        ASSERT_EQ(0, channel.send(self.address()));
        ibv_ah* ah = self.make_ah(receiver);
        ASSERT_NE(nullptr, ah);
        for (uint8_t i = 1; i <= 3; ++i) fill(self.buffer() + i * 64, 16, i);
        ASSERT_EQ(0, self.send(ah, receiver.qpn, kTestQkey + 1, 1, 64, 16));
        ASSERT_EQ(0, self.send(ah, receiver.qpn, kTestQkey, 2, 128, 16));
        ASSERT_EQ(0, self.send(ah, receiver.qpn, 0x80000000u, 3, 192, 16));
        const std::vector<ibv_wc> sent = self.poll(3, kWait);
        ASSERT_EQ(3u, sent.size());  // a UD sender never learns of a drop
        for (const ibv_wc& wc : sent) EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
      });
  EXPECT_TRUE(outcome.passed) << outcome.message;
}

// IBTA C10-93.1.1: a UD message longer than the MTU is not sent, and its
// WR still completes successfully; the next one (of the MTU) arrives.
TEST(UdTransport, AMessageAboveTheMtuIsNotSentAndNoError) {
  DatagramEndpoint self;
  ASSERT_EQ("", self.error());
  const uint32_t mtu = self.mtu_bytes();
  ASSERT_EQ(0, self.post_recv(7, 0, mtu + kGrhBytes));
  ASSERT_EQ(0, self.post_recv(8, 2 * mtu, mtu + kGrhBytes));
  ibv_ah* ah = self.make_ah(self.address());
  ASSERT_NE(nullptr, ah);
  const uint64_t from = 4 * uint64_t(mtu);
  ASSERT_EQ(0, self.send(ah, self.qp()->qp_num, kTestQkey, 1, from, mtu + 1));
  ASSERT_EQ(0, self.send(ah, self.qp()->qp_num, kTestQkey, 2, from, mtu));
  std::vector<ibv_wc> wcs = self.poll(3, kWait);
  const std::vector<ibv_wc> late = self.poll(1, kQuiet);
  wcs.insert(wcs.end(), late.begin(), late.end());
  ASSERT_EQ(3u, wcs.size());
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    if (wc.opcode == IBV_WC_RECV) {
      EXPECT_EQ(7u, wc.wr_id);
      EXPECT_EQ(mtu + kGrhBytes, wc.byte_len);
    }
  }
}

TEST(UdTransport, ADatagramToAQpnNobodyOwnsVanishesAndItsSendSucceeds) {
  DatagramEndpoint self;
  ASSERT_EQ("", self.error());
  ASSERT_EQ(0, self.post_recv(9, 0, 4096));
  ibv_ah* ah = self.make_ah(self.address());
  ASSERT_NE(nullptr, ah);
  ASSERT_EQ(0, self.send(ah, 0xfffff0, kTestQkey, 1, 8192, 64));
  const std::vector<ibv_wc> wcs = self.poll(2, kQuiet);
  ASSERT_EQ(1u, wcs.size());
  EXPECT_EQ(1u, wcs[0].wr_id);
  EXPECT_EQ(IBV_WC_SUCCESS, wcs[0].status);
}

// RoCE has no LIDs: a RoCE port ignores an address handle's DLID (rxe
// does; mlx5 makes it the UDP source port). UCX sets 0xC000, which on
// InfiniBand would name a multicast group; on RoCE the GID alone says
// where a datagram goes.
TEST(UdTransport, OnRoceTheDlidOfAnAddressHandleMeansNothing) {
  DatagramEndpoint self;
  ASSERT_EQ("", self.error());
  if (!self.on_ethernet()) GTEST_SKIP() << "the port is not RoCE: there a DLID is a LID";
  // 1: the LID of an InfiniBand device, were the host's devices mixed.
  const uint16_t dlids[] = {0xc000, 0xfffe, 0xffff, 0x1234, 1, 0};
  uint64_t wr_id = 1;
  for (uint16_t dlid : dlids) {
    SCOPED_TRACE("DLID " + std::to_string(dlid));
    ASSERT_EQ(0, self.post_recv(100 + wr_id, 0, 4096));
    DatagramAddress to = self.address();
    to.lid = dlid;
    ibv_ah* ah = self.make_ah(to);
    ASSERT_NE(nullptr, ah) << strerror(errno);
    fill(self.buffer() + 8192, 64, uint8_t(wr_id));
    ASSERT_EQ(0, self.send(ah, self.qp()->qp_num, kTestQkey, wr_id, 8192, 64));
    const std::vector<ibv_wc> wcs = self.poll(2, kWait);
    ASSERT_EQ(2u, wcs.size()) << "the datagram did not arrive";
    for (const ibv_wc& wc : wcs) {
      EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
      if (wc.opcode != IBV_WC_RECV) continue;
      EXPECT_EQ(100 + wr_id, wc.wr_id);
      EXPECT_EQ(64 + kGrhBytes, wc.byte_len);
      EXPECT_TRUE(filled(self.buffer() + kGrhBytes, 64, uint8_t(wr_id)));
    }
    ++wr_id;
  }
}

TEST(UdTransport, ACreatedAhAnswersTheSenderOfACompletion) {
  // ibv_create_ah_from_wc(3): an AH built from a receive completion (and
  // its GRH area) reaches the QP that sent it.
  DatagramEndpoint a, b;
  ASSERT_EQ("", a.error());
  ASSERT_EQ("", b.error());
  ASSERT_EQ(0, b.post_recv(1, 0, 4096));
  ASSERT_EQ(0, a.post_recv(2, 0, 4096));
  ibv_ah* to_b = a.make_ah(b.address());
  ASSERT_NE(nullptr, to_b);
  ASSERT_EQ(0, a.send(to_b, b.qp()->qp_num, kTestQkey, 10, 8192, 8));
  std::vector<ibv_wc> got = b.poll(1, kWait);
  ASSERT_EQ(1u, got.size());
  ASSERT_EQ(IBV_WC_SUCCESS, got[0].status);
  ibv_ah* back = ibv_create_ah_from_wc(b.pd(), &got[0],
                                       reinterpret_cast<ibv_grh*>(b.buffer()), b.port_num());
  ASSERT_NE(nullptr, back) << strerror(errno);
  ASSERT_EQ(0, b.send(back, got[0].src_qp, kTestQkey, 11, 8192, 8));
  std::vector<ibv_wc> answer = a.poll(2, kWait);
  bool received = false;
  for (const ibv_wc& wc : answer) received = received || (wc.wr_id == 2 && wc.src_qp == b.qp()->qp_num);
  EXPECT_TRUE(received);
  EXPECT_EQ(0, ibv_destroy_ah(back));
}

// The wire's fault rules apply to datagrams: one dropped is simply gone
// (its send succeeded), and the next lands in the receive WQE it would have
// used, for a unicast datagram as for a copy to a group.
TEST(UdTransport, ADroppedDatagramIsGoneNotLate) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  SoftControlReset reset(test_config().device_name);
  DatagramEndpoint sender, receiver;
  ASSERT_EQ("", sender.error());
  ASSERT_EQ("", receiver.error());
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(0, receiver.post_recv(i, i * 4096, 4096));
  ibv_ah* to = sender.make_ah(receiver.address());
  ASSERT_NE(nullptr, to);
  ibv_gid group{};
  group.raw[0] = 0xff;
  group.raw[1] = 0x12;
  group.raw[15] = 0x77;
  ASSERT_EQ(0, ibv_attach_mcast(receiver.qp(), &group, 0xc077));
  ibv_ah* to_group = sender.make_group_ah(group, 0xc077);
  ASSERT_NE(nullptr, to_group);
  // Each datagram its own bytes, so the receiver can tell which came.
  for (uint8_t i = 1; i <= 4; ++i) fill(sender.buffer() + 8192 * i, 64, i);
  std::string reply;
  ASSERT_EQ(0, soft_control("fault set drop:dir=tx,op=UD_SEND_ONLY,nth=1", reply)) << reply;
  ASSERT_EQ(0, sender.send(to, receiver.qp()->qp_num, kTestQkey, 1, 8192, 64));
  ASSERT_EQ(0, sender.send(to, receiver.qp()->qp_num, kTestQkey, 2, 2 * 8192, 64));
  ASSERT_EQ(0, soft_control("fault set drop:dir=tx,op=UD_SEND_ONLY,nth=1", reply)) << reply;
  ASSERT_EQ(0, sender.send(to_group, 0xffffff, kTestQkey, 3, 3 * 8192, 64));
  ASSERT_EQ(0, sender.send(to_group, 0xffffff, kTestQkey, 4, 4 * 8192, 64));
  ASSERT_EQ(0, soft_control("fault clear", reply)) << reply;
  std::vector<ibv_wc> wcs = sender.poll(4, kWait);
  std::vector<ibv_wc> more = receiver.poll(2, kWait);
  wcs.insert(wcs.end(), more.begin(), more.end());
  EXPECT_TRUE(receiver.poll(1, kQuiet).empty()) << "a dropped datagram came late";
  std::vector<uint64_t> sends, receives;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    (wc.opcode == IBV_WC_SEND ? sends : receives).push_back(wc.wr_id);
  }
  EXPECT_EQ((std::vector<uint64_t>{1, 2, 3, 4}), sends);
  EXPECT_EQ((std::vector<uint64_t>{0, 1}), receives) << "two datagrams in the first two WQEs";
  EXPECT_TRUE(filled(receiver.buffer() + kGrhBytes, 64, 2)) << "the second datagram first";
  EXPECT_TRUE(filled(receiver.buffer() + 4096 + kGrhBytes, 64, 4)) << "then the fourth";
}

}  // namespace
}  // namespace softverbs::conformance
