// Fault decisions follow the frame, not the clock: the same frames of the
// same conversations get the same faults whatever order they pass in,
// whatever QPNs and first PSNs the run had, and a retransmission gets a
// decision of its own.
#include "emulator/fault/frame_identity.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "emulator/engine/clock.h"
#include "emulator/fault/fault_injector.h"
#include "emulator/fault/fault_test_frames.h"
#include "emulator/wire/loopback_wire.h"

namespace softverbs::fault {
namespace {

using testing::Bytes;
using testing::make_frame;

// A QP of the scripted process: its QPN, its peer's QPN, where its PSNs start.
struct ScriptedQp {
  uint32_t ordinal;
  uint32_t qpn;
  uint32_t peer_qpn;
  uint32_t sq_psn;
  uint32_t rq_psn;
  uint32_t resend_rounds = 0;
  // Its responder answered a gap before this relative PSN: later requests
  // are dropped unseen.
  std::optional<uint32_t> gap_answered_at = std::nullopt;
};

// The engine's QPs as the test says: a sender is named by the address of its
// ScriptedQp (never dereferenced as a QpImpl), a receiver by its QPN.
class ScriptedConversations final : public ConversationDirectory {
 public:
  explicit ScriptedConversations(std::vector<ScriptedQp> qps) : qps_(std::move(qps)) {}
  std::optional<Conversation> of_sender(const WireAddress& dst) override {
    for (const ScriptedQp& qp : qps_)
      if (dst.sender == sender(qp))
        return Conversation{qp.ordinal, qp.sq_psn, qp.rq_psn, qp.resend_rounds};
    return std::nullopt;
  }
  std::optional<Conversation> of_receiver(const packet::Headers& h) override {
    for (const ScriptedQp& qp : qps_) {
      if (h.bth.dest_qp != qp.qpn) continue;
      const uint32_t relative = (h.bth.psn - qp.rq_psn) & 0xffffff;
      return Conversation{qp.ordinal, qp.sq_psn, qp.rq_psn, 0,
                          qp.gap_answered_at && relative > *qp.gap_answered_at};
    }
    return std::nullopt;
  }
  static const QpImpl* sender(const ScriptedQp& qp) {
    return reinterpret_cast<const QpImpl*>(&qp);
  }
  std::vector<ScriptedQp>& qps() { return qps_; }

 private:
  std::vector<ScriptedQp> qps_;
};

// One process's injector: what got through, by (ordinal, relative PSN, attempt).
class Process {
 public:
  Process(std::string_view plan_text, std::vector<ScriptedQp> qps, uint64_t salt = 0)
      : conversations_(std::move(qps)) {
    auto wire = std::make_unique<LoopbackWire>();
    wire_ = wire.get();
    injector_ = std::make_unique<FaultInjector>(std::move(wire), clock_);
    Plan plan;
    std::string error;
    EXPECT_TRUE(parse_plan(plan_text, plan, error)) << error;
    injector_->set_plan(plan);
    injector_->set_conversations(&conversations_);
    injector_->set_salt(salt);
  }

  // QP `index` sends the request with relative PSN `relative`; what gets
  // through is taken off the wire at once.
  void send(size_t index, uint32_t relative) {
    const ScriptedQp& qp = conversations_.qps()[index];
    const WireAddress to{0, qp.peer_qpn, ScriptedConversations::sender(qp)};
    injector_->send(to, make_frame(qp.peer_qpn, (qp.sq_psn + relative) & kPsnMask));
    wire_->poll([&](std::span<const uint8_t> f) { count(index, f, qp.sq_psn); }, 64);
  }
  // QP `index` receives its peer's request with relative PSN `relative`:
  // the frame arrives on the wire and comes in through the injector.
  void receive(size_t index, uint32_t relative) {
    const ScriptedQp& qp = conversations_.qps()[index];
    wire_->send(WireAddress{}, make_frame(qp.qpn, (qp.rq_psn + relative) & kPsnMask));
    injector_->poll([&](std::span<const uint8_t> f) { count(index, f, qp.rq_psn); }, 64);
  }

  // QP `index`'s requester goes back N.
  void go_back(size_t index) { ++conversations_.qps()[index].resend_rounds; }
  // QP `index`'s responder answered a gap at `relative` (nullopt: none).
  void answer_gap(size_t index, std::optional<uint32_t> relative) {
    conversations_.qps()[index].gap_answered_at = relative;
  }

  // (QP index, relative PSN) of every frame that got through, with how
  // often: the decisions, in the run's own terms.
  std::map<std::pair<size_t, uint32_t>, int> through;

 private:
  static constexpr uint32_t kPsnMask = 0xffffff;

  void count(size_t index, std::span<const uint8_t> frame, uint32_t first_psn) {
    packet::DecodedPacket p;
    ASSERT_EQ(packet::decode_ib(frame, p), packet::DecodeError::kNone);
    ++through[{index, (p.headers.bth.psn - first_psn) & kPsnMask}];
  }

  ManualClock clock_;
  ScriptedConversations conversations_;
  LoopbackWire* wire_ = nullptr;
  std::unique_ptr<FaultInjector> injector_;
};

constexpr char kPlan[] = "seed=5; drop:p=0.3";
constexpr uint32_t kFrames = 300;

TEST(FrameIdentity, DecisionsFollowTheFrameNotTheOrderFramesPass) {
  const std::vector<ScriptedQp> qps = {{1, 0x20, 0x40, 0, 0}, {2, 0x21, 0x41, 0, 0}};
  Process interleaved(kPlan, qps), one_after_the_other(kPlan, qps);
  for (uint32_t psn = 0; psn < kFrames; ++psn) {
    interleaved.send(0, psn);
    interleaved.send(1, psn);
  }
  for (size_t qp : {1, 0})
    for (uint32_t psn = 0; psn < kFrames; ++psn) one_after_the_other.send(qp, psn);
  EXPECT_EQ(interleaved.through, one_after_the_other.through);
  // And the plan did drop about 30% of them.
  EXPECT_NEAR(static_cast<double>(interleaved.through.size()), 2 * kFrames * 0.7,
              2 * kFrames * 0.08);
}

TEST(FrameIdentity, QpnsAndFirstPsnsOfTheRunDoNotMatter) {
  Process one(kPlan, {{1, 0x20, 0x40, 100, 7}});
  Process other(kPlan, {{1, 0x9a3, 0x77, 0xfffff0, 123456}});  // PSNs wrap, too
  for (uint32_t psn = 0; psn < kFrames; ++psn) {
    one.send(0, psn);
    other.send(0, psn);
    one.receive(0, psn);
    other.receive(0, psn);
  }
  EXPECT_EQ(one.through, other.through);
}

TEST(FrameIdentity, ARetransmissionGetsADecisionOfItsOwn) {
  Process process("seed=5; drop:dir=tx,p=0.5", {{1, 0x20, 0x40, 0, 0}});
  for (uint32_t psn = 0; psn < kFrames; ++psn) process.send(0, psn);
  const auto first_attempts = process.through;
  process.go_back(0);
  for (uint32_t psn = 0; psn < kFrames; ++psn) process.send(0, psn);
  int lost_then_through = 0, through_then_lost = 0;
  for (uint32_t psn = 0; psn < kFrames; ++psn) {
    const bool first = first_attempts.count({0, psn}) != 0;
    const int both = process.through.count({0, psn}) ? process.through.at({0, psn}) : 0;
    if (!first && both == 1) ++lost_then_through;
    if (first && both == 1) ++through_then_lost;
  }
  EXPECT_GT(lost_then_through, 30);  // a dropped packet is not dropped for good
  EXPECT_GT(through_then_lost, 30);
}

// After a NAK, how far the requester had gone past the lost packet depends
// on the host's timing: what it sends after going back does not.
TEST(FrameIdentity, RequestsAfterAGoBackDoNotDependOnHowFarTheRequesterHadGone) {
  Process near("seed=5; drop:dir=tx,p=0.3", {{1, 0x20, 0x40, 0, 0}});
  Process far("seed=5; drop:dir=tx,p=0.3", {{1, 0x20, 0x40, 0, 0}});
  for (uint32_t psn = 0; psn < 12; ++psn) near.send(0, psn);
  for (uint32_t psn = 0; psn < 200; ++psn) far.send(0, psn);
  near.go_back(0);
  far.go_back(0);
  near.through.clear();
  far.through.clear();
  for (uint32_t psn = 10; psn < kFrames; ++psn) {
    near.send(0, psn);
    far.send(0, psn);
  }
  EXPECT_EQ(near.through, far.through);
  EXPECT_LT(near.through.size(), kFrames - 10);  // and some were dropped
}

// What the responder drops unseen is passed as it is, and asks no rule
// (the rule would drop every frame here).
TEST(FrameIdentity, ARequestTheResponderDropsUnseenPassesUnconsidered) {
  Process process("seed=5; drop:dir=rx,p=1", {{1, 0x20, 0x40, 0, 0}});
  process.answer_gap(0, 4);
  process.receive(0, 4);  // the missing one itself: considered, dropped
  process.receive(0, 5);
  process.receive(0, 9);
  process.answer_gap(0, std::nullopt);
  process.receive(0, 6);
  const std::map<std::pair<size_t, uint32_t>, int> expected = {{{0, 5}, 1}, {{0, 9}, 1}};
  EXPECT_EQ(process.through, expected);
}

TEST(FrameIdentity, TheSeedAndTheProcessSaltChangeTheDecisions) {
  const std::vector<ScriptedQp> qps = {{1, 0x20, 0x40, 0, 0}};
  Process seed5("seed=5; drop:p=0.3", qps), seed6("seed=6; drop:p=0.3", qps);
  Process salted("seed=5; drop:p=0.3", qps, /*salt=*/99);
  for (uint32_t psn = 0; psn < kFrames; ++psn) {
    seed5.send(0, psn);
    seed6.send(0, psn);
    salted.send(0, psn);
  }
  EXPECT_NE(seed5.through, seed6.through);
  EXPECT_NE(seed5.through, salted.through);
}

TEST(FrameIdentity, AttemptsAreCountedPerKeyAcrossGenerations) {
  AttemptCounter attempts;
  EXPECT_EQ(attempts.next(7), 0u);
  EXPECT_EQ(attempts.next(7), 1u);
  // Far more other keys than a generation holds: 7 is still remembered
  // right after one rotation.
  for (uint64_t key = 100; key < 100 + (1u << 15); ++key) attempts.next(key);
  EXPECT_EQ(attempts.next(7), 2u);
  attempts.clear();
  EXPECT_EQ(attempts.next(7), 0u);
}

}  // namespace
}  // namespace softverbs::fault
