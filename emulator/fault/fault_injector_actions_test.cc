// The fault injector's actions on real IB frames, on the in-process loopback
// wire and a manual clock: corruption that the receiver catches, delay (and
// the alarm that tells the intake when the next held frame is due),
// reordering and duplication.
#include "emulator/fault/fault_injector.h"

#include <gtest/gtest.h>

#include <vector>

#include "emulator/fault/fault_injector_test_support.h"
#include "emulator/fault/fault_test_frames.h"
#include "emulator/packet/codec.h"
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

// ---- Corruption -------------------------------------------------------------

TEST_F(FaultInjectorTest, CorruptFlipsOneBitThatTheReceiverCatches) {
  use("seed=3; corrupt:dir=tx");
  constexpr uint32_t kFrames = 300;
  std::vector<Bytes> sent;
  for (uint32_t psn = 0; psn < kFrames; ++psn) {
    sent.push_back(make_frame(kQp, psn, Opcode::kRcSendOnly, 256));
    send(sent.back());
  }
  const std::vector<Bytes> received = poll_all();
  ASSERT_EQ(received.size(), sent.size());
  const size_t headers = packet::kLrhBytes + packet::kBthBytes;
  size_t bad_icrc = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_EQ(received[i].size(), sent[i].size());
    size_t flipped_bits = 0, flipped_byte = 0;
    for (size_t b = 0; b < sent[i].size(); ++b) {
      if (const int diff = received[i][b] ^ sent[i][b]; diff != 0) {
        flipped_bits += __builtin_popcount(diff);
        flipped_byte = b;
      }
    }
    ASSERT_EQ(flipped_bits, 1u) << "frame " << i;
    packet::DecodedPacket packet;
    const packet::DecodeError error = packet::decode_ib(received[i], packet);
    EXPECT_NE(error, packet::DecodeError::kNone) << "frame " << i << " byte " << flipped_byte;
    // Past the LRH and BTH only the ICRC can notice.
    if (flipped_byte >= headers) {
      EXPECT_EQ(error, packet::DecodeError::kBadIcrc);
    }
    if (error == packet::DecodeError::kBadIcrc) ++bad_icrc;
  }
  // Most of the frame is payload, so most flips are ICRC failures.
  EXPECT_GT(bad_icrc, kFrames * 3 / 4);
  EXPECT_EQ(injector_->fault_counters().corrupted, kFrames);
}

TEST_F(FaultInjectorTest, CorruptOnReceiveToo) {
  use("corrupt:dir=rx,nth=2");
  send_psns(1, 3);
  const std::vector<Bytes> received = poll_all();
  ASSERT_EQ(received.size(), 3u);
  packet::DecodedPacket packet;
  EXPECT_EQ(packet::decode_ib(received[0], packet), packet::DecodeError::kNone);
  EXPECT_NE(packet::decode_ib(received[1], packet), packet::DecodeError::kNone);
  EXPECT_EQ(packet::decode_ib(received[2], packet), packet::DecodeError::kNone);
}

// ---- Delay ------------------------------------------------------------------

TEST_F(FaultInjectorTest, DelayedTxFrameGoesOutInPollOnceTheClockPasses) {
  use("delay:dir=tx,nth=1,ms=5");
  send_psns(1, 2);
  EXPECT_EQ(loopback_->counters().frames_sent, 1u);  // frame 1 held back
  EXPECT_TRUE(injector_->has_deferred());
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{2}));

  clock_.advance(5 * kMs - 1);
  EXPECT_TRUE(poll_all().empty());
  EXPECT_EQ(loopback_->counters().frames_sent, 1u);

  clock_.advance(1);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1}));
  EXPECT_EQ(loopback_->counters().frames_sent, 2u);
  EXPECT_FALSE(injector_->has_deferred());
  EXPECT_EQ(injector_->fault_counters().delayed, 1u);
}

TEST_F(FaultInjectorTest, DelayedRxFrameIsDeliveredOnceTheClockPasses) {
  use("delay:dir=rx,nth=1,us=200");
  send_psns(1, 2);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{2}));
  clock_.advance(199 * kUs);
  EXPECT_TRUE(poll_all().empty());
  clock_.advance(1 * kUs);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1}));
}

TEST_F(FaultInjectorTest, DelayJitterStaysWithinItsBounds) {
  use("seed=5; delay:dir=tx,us=100,jitter_us=50");
  send_psns(1, 200);
  clock_.advance(100 * kUs - 1);
  EXPECT_TRUE(poll_all().empty());
  clock_.advance(1);
  size_t released = poll_all().size();
  EXPECT_LT(released, 200u);
  for (int step = 0; step < 50; ++step) {
    clock_.advance(1 * kUs);
    released += poll_all().size();
  }
  EXPECT_EQ(released, 200u);  // all out by 150 us
  EXPECT_FALSE(injector_->has_deferred());
}

TEST(FaultInjectorReleaseAlarm, SaysEachTimeTheEarliestReleaseChanges) {
  ManualClock clock;
  FaultInjector injector(std::make_unique<RingWire>(), clock);
  const uint64_t start = clock.now_ns();
  std::vector<uint64_t> alarms;
  injector.set_release_alarm([&](uint64_t release_ns) { alarms.push_back(release_ns); });
  const auto send_held_for = [&](const char* plan, uint32_t psn) {
    injector.set_plan(plan_from(plan));
    injector.send(WireAddress{0, kQp}, make_frame(kQp, psn));
  };
  size_t delivered = 0;
  const auto poll = [&] {
    injector.poll([&](std::span<const uint8_t>) { ++delivered; }, 16);
  };

  send_held_for("delay:dir=tx,ms=2", 1);
  EXPECT_EQ(alarms, (std::vector<uint64_t>{start + 2 * kMs}));
  send_held_for("delay:dir=tx,ms=3", 2);  // later than the one held: no news
  EXPECT_EQ(alarms.size(), 1u);
  send_held_for("delay:dir=tx,ms=1", 3);  // earlier
  EXPECT_EQ(alarms.back(), start + 1 * kMs);

  clock.advance(1 * kMs);
  poll();  // releases the 1 ms frame; the 2 ms one is next
  EXPECT_EQ(alarms.back(), start + 2 * kMs);
  clock.advance(1 * kMs);
  poll();
  EXPECT_EQ(alarms.back(), start + 3 * kMs);
  const size_t before = alarms.size();
  clock.advance(1 * kMs);
  poll();  // the last one: nothing more to wake for
  poll();  // what the releases sent comes back round the ring
  EXPECT_EQ(delivered, 3u);
  EXPECT_EQ(alarms.size(), before);
  EXPECT_FALSE(injector.has_deferred());
}

TEST_F(FaultInjectorTest, EmptyingThePlanStillReleasesHeldFrames) {
  use("delay:dir=tx,ms=1");
  send_psns(1, 1);
  injector_->set_plan(Plan{});
  send_psns(2, 2);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{2}));
  clock_.advance(1 * kMs);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1}));
}

// ---- Reorder and duplicate --------------------------------------------------

TEST_F(FaultInjectorTest, ReorderLetsDepthLaterFramesOvertake) {
  use("reorder:dir=tx,nth=2,depth=3");
  send_psns(1, 6);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 3, 4, 5, 2, 6}));
  EXPECT_EQ(injector_->fault_counters().reordered, 1u);
}

TEST_F(FaultInjectorTest, ReorderOnReceive) {
  use("reorder:dir=rx,nth=1,depth=2");
  send_psns(1, 4);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{2, 3, 1, 4}));
}

TEST_F(FaultInjectorTest, ReorderedFramesWaitingTogetherKeepTheirOrder) {
  use("reorder:dir=tx,limit=2,depth=2");
  send_psns(1, 5);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{3, 4, 1, 2, 5}));
}

TEST_F(FaultInjectorTest, AReorderedLoneFrameGoesOutAfterTheTimeout) {
  use("reorder:dir=tx,depth=5");
  send_psns(1, 1);
  EXPECT_TRUE(poll_all().empty());
  EXPECT_TRUE(injector_->has_deferred());
  clock_.advance(kReorderReleaseAfterNs - 1);
  EXPECT_TRUE(poll_all().empty());
  clock_.advance(1);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1}));
  EXPECT_FALSE(injector_->has_deferred());
}

TEST_F(FaultInjectorTest, DuplicateDeliversTwice) {
  use("dup:dir=tx,nth=2");
  send_psns(1, 3);
  EXPECT_EQ(psns_of(poll_all()), (std::vector<uint32_t>{1, 2, 2, 3}));
  EXPECT_EQ(injector_->fault_counters().duplicated, 1u);
}

}  // namespace
}  // namespace softverbs::fault
