// SENDs placed by the initiator (placed_send.h), through the transport: a
// SEND that finds a receive free completes at once and its target takes it
// with no ACK; anything else goes as packets, with the answers packets get;
// and the target's ERR, reset and later WRITEs keep the order an HCA keeps.
#include <algorithm>
#include <cstring>

#include "emulator/same_host/direct_transport_fixture.h"

namespace softverbs {
namespace {

using packet::Opcode;

class PlacedSend : public DirectTransport {
 protected:
  void to_state(Endpoint& e, QpState state) {
    QpAttributes attr;
    attr.state = state;
    ASSERT_EQ(e.qp->modify(attr, kQpAttrState), 0);
  }
  // Everything queued for the engine served.
  void serve() {
    run_until_idle();
    engine_->progress();
  }
  // A SEND of 64 bytes from `a` goes as packets, and the receive and the
  // SEND complete with these statuses.
  void expect_a_send_as_packets(Endpoint& a, Endpoint& b, WcStatus receive, WcStatus send) {
    Sge s = sge(a, 0, 64);
    ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
    ASSERT_EQ(sent_.size(), 1u);
    EXPECT_FALSE(sent_[0].placed);
    Completion c;
    ASSERT_TRUE(poll_one(*b.recv_cq, c));
    EXPECT_EQ(c.status, receive);
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.status, send);
  }
};

TEST_F(PlacedSend, CompletesAtOnceAndItsTargetTakesItWithNoAcknowledgement) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 100, 200);
  fill(a.buffer, 5);
  Sge r = sge(b, 1024, 256);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 0, 200);
  SendRequest wr = send_of(1, s);
  wr.opcode = WrOpcode::kSendWithImm;
  wr.imm_data = 0x11223344;
  ASSERT_EQ(a.qp->post_send(wr), 0);
  // Done inside post_send, before the target ran.
  Completion c;
  ASSERT_EQ(a.send_cq->poll(std::span<Completion>(&c, 1)), 1u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kSend);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_TRUE(sent_[0].placed);
  EXPECT_EQ(sent_[0].opcode, Opcode::kRcSendOnlyImm);
  EXPECT_EQ(sent_[0].psn, 100u);

  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kRecv);
  EXPECT_EQ(c.byte_len, 200u);
  EXPECT_TRUE(c.wc_flags & kWcWithImm);
  EXPECT_EQ(c.imm_data, 0x11223344u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 200, b.buffer.begin() + 1024));
  serve();
  EXPECT_EQ(count_opcode(Opcode::kRcAcknowledge), 0u);
  EXPECT_EQ(a.qp->counters().sends_placed, 1u);
  EXPECT_EQ(b.qp->counters().placed_sends_taken, 1u);

  // The responder took up the PSN: the next request, a packet, is expected.
  Sge r2 = sge(b, 2048, 4096);
  ASSERT_EQ(b.qp->post_recv({8, {&r2, 1}}), 0);
  Sge big = sge(a, 0, 1000);  // four packets at this MTU: never placed
  ASSERT_EQ(a.qp->post_send(send_of(2, big)), 0);
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, 1000u);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(sent_[1].psn, 101u);
  EXPECT_FALSE(sent_[1].placed);
  EXPECT_EQ(b.qp->counters().sequence_naks_sent + b.qp->counters().duplicate_requests, 0u);
}

TEST_F(PlacedSend, WithNoReceiveFreeTheSendGoesAsPacketsAndMeetsRnr) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0, Mtu::k256, 14, 3, 7);
  Sge r = sge(b, 0, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_EQ(a.qp->post_send(send_of(2, s)), 0);  // the one receive is spoken for
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_TRUE(sent_[0].placed);
  EXPECT_FALSE(sent_[1].placed);
  serve();
  EXPECT_EQ(b.qp->counters().rnr_naks_sent, 1u);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 7u);
  // A receive posted later takes the SEND when it comes again.
  Sge r2 = sge(b, 64, 64);
  ASSERT_EQ(b.qp->post_recv({8, {&r2, 1}}), 0);
  advance(1'000'000'000);
  serve();
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 8u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  for (uint64_t id = 1; id <= 2; ++id) {
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
}

TEST_F(PlacedSend, ASendLongerThanAReceivePostedGoesAsPacketsAndGetsTheirError) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r = sge(b, 0, 32);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  expect_a_send_as_packets(a, b, WcStatus::kLocLenErr, WcStatus::kRemInvReqErr);
}

// A receive whose memory does not check out when posted (an L_Key no MR
// has) stops placement: the SEND meets the responder, which reports it.
TEST_F(PlacedSend, AReceiveThatFailsItsChecksSendsTheSendAsPacketsWithTheirErrors) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r = sge(b, 0, 64);
  r.lkey ^= 0x5a5a00;
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  expect_a_send_as_packets(a, b, WcStatus::kLocProtErr, WcStatus::kRemOpErr);
}

// A receive posted, then its MR deregistered: the receive no longer checks
// out, and the SEND goes as packets.
TEST_F(PlacedSend, DeregisteringTheMrOfAPostedReceiveStopsPlacement) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Errno err;
  std::vector<uint8_t> other(4096);
  std::unique_ptr<Mr> mr = hca_->register_mr(*b.pd, reinterpret_cast<uint64_t>(other.data()),
                                             other.size(), kAccessLocalWrite, err);
  ASSERT_TRUE(mr) << err;
  Sge r{reinterpret_cast<uint64_t>(other.data()), 64, mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  mr.reset();
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_FALSE(sent_[0].placed);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_NE(c.status, WcStatus::kSuccess);
}

// The target moved to ERR with SENDs placed and not yet taken: they
// complete, in order, before the rest of its receive queue is flushed, as
// on an HCA that had placed them before the Modify QP.
TEST_F(PlacedSend, ErrAtTheTargetCompletesTheSendsPlacedBeforeItThenFlushes) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r[3] = {sge(b, 0, 64), sge(b, 64, 64), sge(b, 128, 64)};
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(b.qp->post_recv({10 + i, {&r[i], 1}}), 0);
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_EQ(a.qp->post_send(send_of(2, s)), 0);
  ASSERT_EQ(placed_seen_, 2u);
  to_state(b, QpState::kErr);
  // A receive posted now waits its turn in the flush.
  Sge r4 = sge(b, 192, 64);
  ASSERT_EQ(b.qp->post_recv({13, {&r4, 1}}), 0);
  serve();
  const WcStatus expected[4] = {WcStatus::kSuccess, WcStatus::kSuccess, WcStatus::kWrFlushErr,
                                WcStatus::kWrFlushErr};
  for (uint64_t i = 0; i < 4; ++i) {
    Completion c;
    ASSERT_TRUE(poll_one(*b.recv_cq, c)) << i;
    EXPECT_EQ(c.wr_id, 10 + i);
    EXPECT_EQ(c.status, expected[i]) << i;
  }
}

// A placed SEND that never reaches the ring (spoilt there by a scribbling
// process) holds the flush only until an intake pass finds the ring empty.
TEST_F(PlacedSend, AFlushWaitsForALostPlacedSendNoLongerThanAnEmptyRing) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r[2] = {sge(b, 0, 64), sge(b, 64, 64)};
  for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(b.qp->post_recv({10 + i, {&r[i], 1}}), 0);
  drop_ = [this](size_t, const packet::DecodedPacket&) { return placed_seen_ > 0; };
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_EQ(placed_seen_, 1u);
  ASSERT_EQ(wire_->queued(), 0u);
  to_state(b, QpState::kErr);
  Completion c;
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0u);  // deferred
  engine_->progress();
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(poll_one(*b.recv_cq, c)) << i;
    EXPECT_EQ(c.wr_id, 10 + i);
    EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
  }
}

// A placed SEND lost in the ring, which the initiator was told arrived:
// the target finds the gap at the next one and fails rather than go on
// without it.
TEST_F(PlacedSend, AGapInThePlacedSendsFailsTheTargetQp) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r[3] = {sge(b, 0, 64), sge(b, 64, 64), sge(b, 128, 64)};
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(b.qp->post_recv({10 + i, {&r[i], 1}}), 0);
  drop_ = [this](size_t, const packet::DecodedPacket&) { return placed_seen_ == 1; };
  Sge s = sge(a, 0, 64);
  for (uint64_t id = 1; id <= 2; ++id) ASSERT_EQ(a.qp->post_send(send_of(id, s)), 0);
  ASSERT_EQ(placed_seen_, 2u);
  serve();
  EXPECT_EQ(b.qp->state(), QpState::kErr);
  EXPECT_EQ(b.qp->counters().placed_sends_lost, 1u);
  for (uint64_t i = 0; i < 3; ++i) {
    Completion c;
    ASSERT_TRUE(poll_one(*b.recv_cq, c)) << i;
    EXPECT_EQ(c.status, WcStatus::kWrFlushErr) << i;
  }
}

// The last placed SEND spoilt in the ring: no later one shows the gap, so
// once the damage is seen and the ring is empty, the counts that never
// meet fail the QP.
TEST_F(PlacedSend, ASpoiltLastPlacedSendFailsTheTargetQpOnceTheRingIsEmpty) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r = sge(b, 0, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  std::vector<uint8_t> spoilt;
  wire_->set_filter([&](std::span<const uint8_t> f) {
    if (!is_placed_send_frame(f)) return true;
    spoilt.assign(f.begin(), f.end());
    return false;
  });
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_FALSE(spoilt.empty());
  spoilt[spoilt.size() - 9] ^= 0x40;  // a payload bit
  wire_->set_filter(nullptr);
  ASSERT_TRUE(wire_->send(WireAddress{0, b.qp->qpn()}, spoilt));
  serve();
  EXPECT_EQ(engine_->counters().frames_dropped_bad_icrc, 1u);
  EXPECT_EQ(b.qp->state(), QpState::kErr);
  EXPECT_EQ(b.qp->counters().placed_sends_lost, 1u);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
}

// A placed SEND lost in the ring, then a SEND as packets: the packet
// queued behind it shows the gap, and the target fails instead of taking
// the later message in the lost one's place.
TEST_F(PlacedSend, APacketBehindALostPlacedSendFailsTheTargetQp) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r = sge(b, 0, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  drop_ = [this](size_t, const packet::DecodedPacket&) { return sent_.back().placed; };
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_EQ(a.qp->post_send(send_of(2, s)), 0);  // no receive free: packets
  ASSERT_EQ(sent_.size(), 2u);
  EXPECT_FALSE(sent_[1].placed);
  serve();
  EXPECT_EQ(b.qp->state(), QpState::kErr);
  EXPECT_EQ(b.qp->counters().placed_sends_lost, 1u);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
}

TEST_F(PlacedSend, AResetTargetDropsTheSendsPlacedInItsEarlierLife) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r = sge(b, 0, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  ASSERT_EQ(placed_seen_, 1u);
  to_state(b, QpState::kReset);
  // Both connected again, with a receive posted, before the intake ran.
  to_state(a, QpState::kReset);
  connect(a, b, 0, 0);
  Sge r2 = sge(b, 64, 64);
  ASSERT_EQ(b.qp->post_recv({8, {&r2, 1}}), 0);
  serve();
  Completion c;
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0u);
  EXPECT_EQ(b.qp->counters().placed_sends_dropped, 1u);
}

// A WRITE behind a placed SEND the target has not taken goes as packets,
// behind it: where both reach the same bytes, the WRITE's stay.
TEST_F(PlacedSend, AWriteBehindAPlacedSendLandsAfterIt) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  fill(a.buffer, 1);
  Sge r = sge(b, 0, 256);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 0, 128);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  Sge from = sge(a, 4096, 64);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 2, from, b, 32)), 0);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 1u);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  serve();
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  for (uint64_t id = 1; id <= 2; ++id) {
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 32, b.buffer.begin()));
  EXPECT_TRUE(std::equal(a.buffer.begin() + 4096, a.buffer.begin() + 4096 + 64,
                         b.buffer.begin() + 32));
  EXPECT_TRUE(std::equal(a.buffer.begin() + 96, a.buffer.begin() + 128, b.buffer.begin() + 96));
}

}  // namespace
}  // namespace softverbs
