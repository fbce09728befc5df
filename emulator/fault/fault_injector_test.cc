// The fault injector on the in-process loopback wire and a manual clock,
// with real IB frames: which frames each rule hits, frames written in place
// (send_with), that a seed replays a run exactly, and plan changes while
// frames flow. What each action does to the frames it hits:
// fault_injector_actions_test.cc.
#include "emulator/fault/fault_injector.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "emulator/fault/fault_injector_test_support.h"
#include "emulator/fault/fault_test_frames.h"
#include "emulator/packet/allocation_counter.h"
#include "emulator/wire/loopback_wire.h"

namespace softverbs::fault {
namespace {

using packet::Opcode;
using testing::Bytes;
using testing::FaultInjectorTest;
using testing::kMs;
using testing::kQp;
using testing::kUs;
using testing::make_frame;
using testing::plan_from;
using testing::psns_of;
using testing::RingWire;

std::vector<uint32_t> range(uint32_t first, uint32_t last) {
  std::vector<uint32_t> values;
  for (uint32_t v = first; v <= last; ++v) values.push_back(v);
  return values;
}

// ---- Pass-through -----------------------------------------------------------

TEST_F(FaultInjectorTest, EmptyPlanPassesEveryFrameThroughUnchanged) {
  std::vector<Bytes> sent;
  for (uint32_t psn = 1; psn <= 20; ++psn) {
    sent.push_back(make_frame(kQp, psn));
    send(sent.back());
  }
  EXPECT_EQ(poll_all(), sent);
  EXPECT_FALSE(injector_->has_deferred());
  const Counters counters = injector_->fault_counters();
  EXPECT_EQ(counters.matched, 0u);
  EXPECT_EQ(counters.dropped + counters.duplicated + counters.reordered + counters.delayed +
                counters.corrupted,
            0u);
}

TEST_F(FaultInjectorTest, WireCountersAreTheInnerWires) {
  use("drop:dir=tx,nth=2");
  send_psns(1, 3);
  poll_all();
  EXPECT_EQ(injector_->counters().frames_sent, 2u);
  EXPECT_EQ(injector_->counters().frames_received, 2u);
}

TEST(FaultInjectorFastPath, NoAllocationPerFrameWhenNoRuleMatches) {
  ManualClock clock;
  auto ring = std::make_unique<RingWire>();
  FaultInjector injector(std::move(ring), clock);
  const Bytes frame = make_frame(kQp, 1);
  size_t delivered = 0;
  const std::function<void(std::span<const uint8_t>)> deliver =
      [&delivered](std::span<const uint8_t>) { ++delivered; };
  auto allocations_for_100_frames = [&] {
    const size_t before = packet::testing::allocation_count();
    for (int i = 0; i < 100; ++i) {
      injector.send(WireAddress{0, kQp}, frame);
      injector.poll(deliver, 16);
    }
    return packet::testing::allocation_count() - before;
  };

  EXPECT_EQ(allocations_for_100_frames(), 0u) << "empty plan";
  // Rules that never match these frames: the slow path, still no allocation.
  injector.set_plan(plan_from("drop:qp=0x999; delay:op=ACKNOWLEDGE,ms=1; dup:p=0"));
  EXPECT_EQ(allocations_for_100_frames(), 0u) << "plan with unmatched rules";
  EXPECT_EQ(delivered, 200u);
}

// ---- Frames written in place (send_with) --------------------------------------

// Writes a copy of one prepared frame.
class FrameCopier final : public FrameWriter {
 public:
  explicit FrameCopier(const Bytes& frame) : frame_(frame) {}
  size_t write(std::span<uint8_t> room) override {
    if (frame_.size() > room.size()) return 0;
    if (!frame_.empty()) std::memcpy(room.data(), frame_.data(), frame_.size());
    return frame_.size();
  }

 private:
  const Bytes& frame_;
};

// A loopback wire that counts which of its two send paths each frame took.
class SendPathSpy final : public Wire {
 public:
  bool send(const WireAddress& dst, std::span<const uint8_t> frame) override {
    ++sends;
    return loopback.send(dst, frame);
  }
  bool send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) override {
    ++sends_with;
    return loopback.send_with(dst, max_bytes, writer);
  }
  size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
              size_t budget) override {
    return loopback.poll(deliver, budget);
  }
  bool has_deferred() const override { return false; }
  WireCounters counters() const override { return loopback.counters(); }

  LoopbackWire loopback;
  int sends = 0;
  int sends_with = 0;
};

class FaultInjectorSendWithTest : public ::testing::Test {
 protected:
  FaultInjectorSendWithTest() {
    auto spy = std::make_unique<SendPathSpy>();
    spy_ = spy.get();
    injector_ = std::make_unique<FaultInjector>(std::move(spy), clock_);
  }
  bool send_with(const Bytes& frame) {
    FrameCopier writer(frame);
    return injector_->send_with(WireAddress{0, kQp}, packet::kMaxFrameBytes, writer);
  }
  std::vector<Bytes> poll_all() {
    std::vector<Bytes> delivered;
    const auto keep = [&](std::span<const uint8_t> f) {
      delivered.emplace_back(f.begin(), f.end());
    };
    while (injector_->poll(keep, 16) > 0) {
    }
    return delivered;
  }

  ManualClock clock_;
  SendPathSpy* spy_ = nullptr;
  std::unique_ptr<FaultInjector> injector_;
};

TEST_F(FaultInjectorSendWithTest, WithNoRuleTheFrameIsWrittenStraightIntoTheInnerWire) {
  std::vector<Bytes> sent;
  for (uint32_t psn = 1; psn <= 5; ++psn) {
    sent.push_back(make_frame(kQp, psn));
    EXPECT_TRUE(send_with(sent.back()));
  }
  EXPECT_EQ(spy_->sends_with, 5);
  EXPECT_EQ(poll_all(), sent);
}

TEST_F(FaultInjectorSendWithTest, UnderTxRulesTheFrameIsFaultedAsSendWouldFaultIt) {
  injector_->set_plan(plan_from("drop:dir=tx,nth=2; dup:dir=tx,nth=3"));
  for (uint32_t psn = 1; psn <= 4; ++psn) EXPECT_TRUE(send_with(make_frame(kQp, psn)));
  EXPECT_EQ(spy_->sends_with, 0);  // written locally, then sent
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 3, 3, 4}));
  const Counters counters = injector_->fault_counters();
  EXPECT_EQ(counters.tx.dropped, 1u);
  EXPECT_EQ(counters.tx.duplicated, 1u);
}

TEST_F(FaultInjectorSendWithTest, WhileFramesAreHeldItGoesThroughTheInjector) {
  injector_->set_plan(plan_from("reorder:dir=tx,nth=1,depth=1"));
  EXPECT_TRUE(send_with(make_frame(kQp, 1)));  // held until one frame overtakes it
  injector_->set_plan(Plan{});                  // no rule left, one frame still held
  EXPECT_TRUE(send_with(make_frame(kQp, 2)));
  EXPECT_EQ(spy_->sends_with, 0);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{2, 1}));
  EXPECT_TRUE(send_with(make_frame(kQp, 3)));  // nothing held now: straight through
  EXPECT_EQ(spy_->sends_with, 1);
}

TEST_F(FaultInjectorSendWithTest, AWriterThatWritesNothingSendsNothingEitherWay) {
  const Bytes empty;
  EXPECT_FALSE(send_with(empty));
  injector_->set_plan(plan_from("dup:dir=tx"));
  EXPECT_FALSE(send_with(empty));
  EXPECT_TRUE(poll_all().empty());
  EXPECT_EQ(injector_->fault_counters().matched, 0u);
}

TEST(FaultInjectorFastPath, NoAllocationPerFrameWrittenInPlace) {
  ManualClock clock;
  FaultInjector injector(std::make_unique<RingWire>(), clock);
  const Bytes frame = make_frame(kQp, 1);
  size_t delivered = 0;
  const std::function<void(std::span<const uint8_t>)> deliver =
      [&delivered](std::span<const uint8_t>) { ++delivered; };
  auto allocations_for_100_frames = [&] {
    FrameCopier writer(frame);
    injector.send_with(WireAddress{0, kQp}, packet::kMaxFrameBytes, writer);  // warms the buffer
    injector.poll(deliver, 16);
    const size_t before = packet::testing::allocation_count();
    for (int i = 0; i < 100; ++i) {
      injector.send_with(WireAddress{0, kQp}, packet::kMaxFrameBytes, writer);
      injector.poll(deliver, 16);
    }
    return packet::testing::allocation_count() - before;
  };
  EXPECT_EQ(allocations_for_100_frames(), 0u) << "empty plan";
  injector.set_plan(plan_from("drop:qp=0x999; delay:op=ACKNOWLEDGE,ms=1; dup:p=0"));
  EXPECT_EQ(allocations_for_100_frames(), 0u) << "plan with unmatched rules";
  EXPECT_EQ(delivered, 202u);
}

// ---- Matching ---------------------------------------------------------------

TEST_F(FaultInjectorTest, DropsExactlyTheNthPacketOfOneQpOnly) {
  use("drop:qp=0x12,nth=3,dir=tx");
  // Interleaved: QP 0x12 gets PSNs 100.., QP 0x13 gets PSNs 200..
  for (uint32_t i = 0; i < 5; ++i) {
    send(make_frame(0x12, 100 + i), 0x12);
    send(make_frame(0x13, 200 + i), 0x13);
  }
  EXPECT_EQ(psns_of(poll_all()),
            (std::vector<uint32_t>{100, 200, 101, 201, 202, 103, 203, 104, 204}));
  const Counters counters = injector_->fault_counters();
  EXPECT_EQ(counters.dropped, 1u);
  EXPECT_EQ(counters.matched, 5u);  // the frames of QP 0x12
}

TEST_F(FaultInjectorTest, OpcodeFilterPicksOnlyThatOpcode) {
  use("drop:op=ACKNOWLEDGE,dir=tx");
  for (uint32_t psn = 1; psn <= 6; ++psn) {
    send(make_frame(kQp, psn, psn % 2 ? Opcode::kRcSendOnly : Opcode::kRcAcknowledge));
  }
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 3, 5}));
}

TEST_F(FaultInjectorTest, FramesThatDoNotDecodeMatchOnlyRulesWithoutQpOrOpcode) {
  const Bytes junk = {0xde, 0xad, 0xbe, 0xef};
  use("drop:qp=0x12,dir=tx; drop:op=SEND_ONLY,dir=tx");
  send(junk);
  EXPECT_EQ(poll_all(), std::vector<Bytes>{junk});

  use("drop:dir=tx");
  send(junk);
  EXPECT_TRUE(poll_all().empty());
}

TEST_F(FaultInjectorTest, TxRulesActInSendRxRulesInPoll) {
  use("drop:dir=tx,nth=2");
  send_psns(1, 3);
  EXPECT_EQ(loopback_->queued(), 2u);  // dropped before the wire
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 3}));
  Counters counters = injector_->fault_counters();
  EXPECT_EQ(counters.tx.dropped, 1u);
  EXPECT_EQ(counters.rx.dropped, 0u);
  EXPECT_EQ(counters.tx.matched, 3u);
  EXPECT_EQ(counters.rx.matched, 0u);

  use("drop:dir=rx,nth=2");
  send_psns(4, 6);
  EXPECT_EQ(loopback_->queued(), 3u);  // all reached the wire
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{4, 6}));
  counters = injector_->fault_counters();
  EXPECT_EQ(counters.tx.dropped, 1u);
  EXPECT_EQ(counters.rx.dropped, 1u);
  EXPECT_EQ(counters.rx.matched, 3u);
  EXPECT_EQ(counters.dropped, 2u);
}

TEST_F(FaultInjectorTest, DirBothActsOnEachSide) {
  // Duplicated when sent, and each copy duplicated again when received.
  use("dup");
  send_psns(1, 1);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 1, 1, 1}));
  const Counters counters = injector_->fault_counters();
  EXPECT_EQ(counters.tx.duplicated, 1u);
  EXPECT_EQ(counters.rx.duplicated, 2u);
  EXPECT_EQ(counters.duplicated, 3u);
}

TEST_F(FaultInjectorTest, LimitCapsInjections) {
  use("drop:dir=tx,limit=3");
  send_psns(1, 10);
  EXPECT_EQ(psns_of(poll_all()), range(4, 10));

  use("seed=9; drop:dir=tx,p=0.5,limit=5");
  send_psns(1, 1000);
  EXPECT_EQ(poll_all().size(), 995u);
  EXPECT_EQ(injector_->fault_counters().dropped, 3u + 5u);
}

TEST_F(FaultInjectorTest, TheFirstRuleThatFiresDecides) {
  use("drop:dir=tx,nth=2; dup:dir=tx,nth=2");
  send_psns(1, 3);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(injector_->fault_counters().duplicated, 0u);

  // Every rule counts its own matches, even those another rule took.
  use("drop:dir=tx,nth=1; dup:dir=tx,nth=2");
  send_psns(1, 3);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{2, 2, 3}));
}

TEST_F(FaultInjectorTest, SetPlanRestartsNthCounts) {
  const Plan plan = plan_from("drop:dir=tx,nth=2");
  injector_->set_plan(plan);
  send_psns(1, 3);
  injector_->set_plan(plan);
  send_psns(4, 6);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 3, 4, 6}));
  EXPECT_EQ(injector_->plan(), plan);
}

// ---- Probability and determinism --------------------------------------------

TEST_F(FaultInjectorTest, ProbabilityGivesAReproducibleCountNearP) {
  use("seed=42; drop:dir=tx,p=0.1");
  constexpr uint32_t kFrames = 10'000;
  send_psns(1, kFrames);
  const uint64_t dropped = kFrames - poll_all().size();
  EXPECT_EQ(dropped, injector_->fault_counters().dropped);
  EXPECT_NEAR(static_cast<double>(dropped), kFrames * 0.1, kFrames * 0.015);
  // The exact count for seed 42 pins the decision function
  // (frame_identity.h): a change here means a saved seed no longer replays
  // the same run.
  EXPECT_EQ(dropped, 1004u);
}

// One run of a plan that uses every action, with time moving on: the frames
// delivered, in order, byte for byte.
std::vector<Bytes> run_mixed_plan(FaultInjector& injector, LoopbackWire& loopback,
                                  ManualClock& clock, uint64_t seed) {
  Plan plan = plan_from(
      "drop:p=0.05; dup:p=0.05; reorder:p=0.05,depth=3; delay:p=0.05,us=30,jitter_us=40;"
      "corrupt:dir=tx,p=0.05");
  plan.seed = seed;
  injector.set_plan(plan);
  std::vector<Bytes> delivered;
  const auto deliver = [&](std::span<const uint8_t> frame) {
    delivered.emplace_back(frame.begin(), frame.end());
  };
  for (uint32_t psn = 0; psn < 2000; ++psn) {
    injector.send(WireAddress{0, psn % 3}, make_frame(psn % 3, psn));
    if (psn % 4 == 0) injector.poll(deliver, 3);
    clock.advance(10 * kUs);
  }
  for (int i = 0; i < 100 && (injector.has_deferred() || loopback.queued() > 0); ++i) {
    clock.advance(1 * kMs);
    while (injector.poll(deliver, 16) > 0) {
    }
  }
  EXPECT_FALSE(injector.has_deferred());
  return delivered;
}

TEST(FaultInjectorReplay, SameSeedSameFaultsDifferentSeedDifferentFaults) {
  auto run = [](uint64_t seed) {
    ManualClock clock;
    auto wire = std::make_unique<LoopbackWire>();
    LoopbackWire& loopback = *wire;
    FaultInjector injector(std::move(wire), clock);
    std::vector<Bytes> delivered = run_mixed_plan(injector, loopback, clock, seed);
    return std::pair(delivered, injector.fault_counters());
  };
  const auto [first, first_counts] = run(7);
  const auto [again, again_counts] = run(7);
  const auto [other, other_counts] = run(8);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_EQ(first_counts.dropped, again_counts.dropped);
  EXPECT_EQ(first_counts.corrupted, again_counts.corrupted);
  // Every action happened, so the comparison above covered them all.
  EXPECT_GT(first_counts.dropped, 0u);
  EXPECT_GT(first_counts.duplicated, 0u);
  EXPECT_GT(first_counts.reordered, 0u);
  EXPECT_GT(first_counts.delayed, 0u);
  EXPECT_GT(first_counts.corrupted, 0u);
}

TEST_F(FaultInjectorTest, SetPlanRestartsTheRandomSequence) {
  const std::vector<Bytes> first = run_mixed_plan(*injector_, *loopback_, clock_, 11);
  const std::vector<Bytes> again = run_mixed_plan(*injector_, *loopback_, clock_, 11);
  EXPECT_EQ(first, again);
}

// ---- Threads ----------------------------------------------------------------

TEST_F(FaultInjectorTest, PlanChangesWhileFramesFlow) {
  const Plan lossy = plan_from("drop:p=0.3; delay:p=0.3,us=5");
  const Plan clean;
  std::atomic<bool> done{false};
  std::thread control([&] {
    for (int i = 0; !done.load(); ++i) {
      injector_->set_plan(i % 2 ? lossy : clean);
      (void)injector_->fault_counters();
    }
  });
  size_t delivered = 0;
  const auto deliver = [&](std::span<const uint8_t>) { ++delivered; };
  for (uint32_t psn = 0; psn < 5000; ++psn) {
    send(make_frame(kQp, psn));
    injector_->poll(deliver, 4);
    clock_.advance(1 * kUs);
  }
  done = true;
  control.join();
  injector_->set_plan(clean);
  clock_.advance(1 * kMs);
  while (injector_->poll(deliver, 64) > 0 || loopback_->queued() > 0) {
  }
  const Counters counters = injector_->fault_counters();
  EXPECT_EQ(delivered + counters.dropped, 5000u);
  EXPECT_FALSE(injector_->has_deferred());
}

}  // namespace
}  // namespace softverbs::fault
