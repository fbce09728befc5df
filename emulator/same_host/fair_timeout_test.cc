// Local ACK timeouts fair to a peer that has not run: the rule on scripted
// backlogs, and the transport waiting out a timeout whose ACK is still in
// the intake while a lost packet still counts.
#include "emulator/same_host/fair_timeout.h"

#include <gtest/gtest.h>

#include "emulator/same_host/same_host.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

// A wire whose processes' backlogs the test sets: `peer` for QPN 2, `own`
// for QPN 1.
class ScriptedPeers final : public SameHostPeers {
 public:
  std::optional<IntakeBacklog> peer;
  std::optional<IntakeBacklog> own = IntakeBacklog{0, 0, 512};

  bool accepts_runs(const WireAddress&) override { return false; }
  void set_accepting_runs(bool) override {}
  std::span<uint8_t> own_target_area() override { return {}; }
  PeerTargetArea peer_target_area(const WireAddress&, Attention) override { return {}; }
  bool push_now(const WireAddress&, const PeerTargetArea&, std::span<const uint8_t>) override {
    return false;
  }
  std::optional<IntakeBacklog> intake_backlog(const WireAddress& dst) override {
    return dst.qpn == 2 ? peer : own;
  }
  void intake_pass_ended() override {}
  bool own_ring_drained() override { return true; }
  uint64_t ring_damage() const override { return 0; }
};

class FairTimeoutRule : public ::testing::Test {
 protected:
  // One expiry of a 1 ms timer, a period after the last.
  bool expiry() {
    now_ns_ += kPeriodNs;
    return timeout_.wait_again(same_host_, kSelf, kPeer, now_ns_, kPeriodNs);
  }

  static constexpr WireAddress kSelf{0, 1};
  static constexpr WireAddress kPeer{0, 2};
  static constexpr uint64_t kPeriodNs = 1'000'000;
  uint64_t now_ns_ = 0;
  ScriptedPeers peers_;
  SameHost same_host_{&peers_, nullptr, SameHost::Settings{}};
  FairTimeout timeout_;
};

TEST_F(FairTimeoutRule, APeerWithNothingWaitingHadItsTurn) {
  peers_.peer = IntakeBacklog{100, 100, 512};
  EXPECT_FALSE(expiry());
}

TEST_F(FairTimeoutRule, APeerBehindIsWaitedForUntilItServedWhatWasThere) {
  peers_.peer = IntakeBacklog{100, 90, 512};
  EXPECT_TRUE(expiry());
  peers_.peer = IntakeBacklog{130, 99, 512};  // served some, not all that was there
  EXPECT_TRUE(expiry());
  // Served past the 100 frames claimed at the first look: our request was
  // among them, so this expiry is a loss, whatever came since.
  peers_.peer = IntakeBacklog{160, 100, 512};
  EXPECT_FALSE(expiry());
  // And the next look starts over.
  EXPECT_TRUE(expiry());
}

TEST_F(FairTimeoutRule, ThisProcessBehindIsWaitedForToo) {
  peers_.peer = IntakeBacklog{5, 5, 512};
  peers_.own = IntakeBacklog{40, 38, 512};  // the ACK may be among the two
  EXPECT_TRUE(expiry());
  peers_.own = IntakeBacklog{41, 40, 512};
  EXPECT_FALSE(expiry());
}

TEST_F(FairTimeoutRule, NoLivePeerMeansTheTimeoutCounts) {
  peers_.peer = std::nullopt;  // dead, or on no process of this host
  EXPECT_FALSE(expiry());
}

TEST_F(FairTimeoutRule, CountersNoCorrectPeerWritesMeanTheTimeoutCounts) {
  peers_.peer = IntakeBacklog{10, 20, 512};  // served ahead of claimed
  EXPECT_FALSE(expiry());
  peers_.peer = IntakeBacklog{100000, 0, 512};  // more waiting than a ring holds
  EXPECT_FALSE(expiry());
  peers_.peer = IntakeBacklog{100, 90, 512};
  ASSERT_TRUE(expiry());
  peers_.peer = IntakeBacklog{100, UINT64_MAX - 5, 512};  // scribbled after the mark was set
  EXPECT_FALSE(expiry());
}

TEST_F(FairTimeoutRule, WallClockTimersAlwaysCount) {
  SameHost wall{&peers_, nullptr, SameHost::Settings{.fair_timers = false}};
  peers_.peer = IntakeBacklog{100, 90, 512};
  EXPECT_FALSE(timeout_.wait_again(wall, kSelf, kPeer, 1, kPeriodNs));
}

TEST_F(FairTimeoutRule, APeerThatNeverRunsIsWaitedForOnlySoLong) {
  peers_.peer = IntakeBacklog{100, 90, 512};  // stopped, or its counters scribbled on
  int waited = 0;
  while (expiry()) ++waited;
  // 1 s of 1 ms periods (kLeastPatienceNs beats 64 periods), then it counts,
  // and keeps counting until an acknowledgement moves the QP on.
  EXPECT_EQ(waited, 1000);
  EXPECT_FALSE(expiry());
  timeout_.reset();
  EXPECT_TRUE(expiry());
}

TEST(TimerMode, ParsesTheTwoModesAndExplainsAnythingElse) {
  bool fair = false;
  std::string error;
  EXPECT_TRUE(parse_timer_mode(nullptr, fair, error));
  EXPECT_TRUE(fair);
  EXPECT_TRUE(parse_timer_mode("wall", fair, error));
  EXPECT_FALSE(fair);
  EXPECT_TRUE(parse_timer_mode("fair", fair, error));
  EXPECT_TRUE(fair);
  EXPECT_FALSE(parse_timer_mode("strict", fair, error));
  EXPECT_NE(error.find("SOFTVERBS_TIMERS=strict"), std::string::npos) << error;
  EXPECT_NE(error.find("'wall'"), std::string::npos) << error;
}

// The transport: one engine serves both QPs, so an ACK still in its intake
// when the timer runs is "this process behind".
class FairTimeoutTransport : public Transport {
 protected:
  static constexpr uint64_t kPeriod = 4096ull << 14;  // timeout 14: 67.1 ms

  // a, connected to b (timeout 14, retry_cnt 1), posts a SEND of 64 bytes
  // (wr_id 7) to a receive posted at b.
  void post_a_send(Endpoint& a, Endpoint& b) {
    connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14, /*retry=*/1);
    Sge recv = sge(b, 0, 4096);
    ASSERT_EQ(b.qp->post_recv({1, {&recv, 1}}), 0);
    Sge s = sge(a, 0, 64);
    ASSERT_EQ(a.qp->post_send(send_of(7, s)), 0);
  }

  // b serves a's SEND and answers, and the ACK is left unserved in the
  // intake while a's timer expires.
  void expire_with_the_ack_unserved(Endpoint& a, Endpoint& b) {
    post_a_send(a, b);
    engine_->progress(1);  // the SEND: served and answered
    ASSERT_EQ(wire_->queued(), 1u) << "the ACK waits in the intake";
    clock_.advance(kPeriod + 1000);
    engine_->progress(0);  // due timers only
  }

  static void expect_timeouts(const Endpoint& e, uint64_t counted, uint64_t waited,
                              uint64_t resent) {
    const QpCounters c = e.qp->counters();
    EXPECT_EQ(c.retransmit_timeouts, counted);
    EXPECT_EQ(c.retransmit_timeouts_waited, waited);
    EXPECT_EQ(c.retransmitted_packets, resent);
  }
};

TEST_F(FairTimeoutTransport, ATimeoutWhileTheAckWaitsInTheIntakeIsWaitedOut) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  expire_with_the_ack_unserved(a, b);
  expect_timeouts(a, /*counted=*/0, /*waited=*/1, /*resent=*/0);
  Completion done;
  ASSERT_TRUE(poll_one(*a.send_cq, done));
  EXPECT_EQ(done.status, WcStatus::kSuccess);
  EXPECT_EQ(done.wr_id, 7u);
}

TEST_F(FairTimeoutTransport, ALostRequestStillCountsAndIsResent) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 1; };
  post_a_send(a, b);
  run_until_idle();
  advance(kPeriod + 1000);
  run_until_idle();
  expect_timeouts(a, /*counted=*/1, /*waited=*/0, /*resent=*/1);
  Completion done;
  ASSERT_TRUE(poll_one(*a.send_cq, done));
  EXPECT_EQ(done.status, WcStatus::kSuccess);
}

class WallClockTimeoutTransport : public FairTimeoutTransport {
 protected:
  void SetUp() override {
    fair_timers_ = false;
    Transport::SetUp();
  }
};

TEST_F(WallClockTimeoutTransport, EveryExpiryCountsEvenWithTheAckUnserved) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  expire_with_the_ack_unserved(a, b);
  expect_timeouts(a, /*counted=*/1, /*waited=*/0, /*resent=*/1);
}

}  // namespace
}  // namespace softverbs
