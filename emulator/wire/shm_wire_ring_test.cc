// The shared-memory wire and the receiver's ring: frames written in place
// into it (send_with), frames held while it is full and dropped when its
// owner takes nothing, rings of another slot count (and the environment
// variable that sets it), and a claim counter scribbled far ahead.
#include "emulator/wire/shm_wire.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "emulator/wire/mailbox_slots.h"
#include "emulator/wire/shm_wire_test_support.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using testing::drain_deferred;
using testing::Endpoint;
using testing::fork_child;
using testing::frame_matches;
using testing::frame_size_for;
using testing::kDevice;
using testing::kIgnoreFrames;
using testing::Pipe;
using testing::receive_numbered;
using testing::send_numbered;
using testing::ShmWireTest;
using testing::spawn_deaf_receiver;
using testing::wait_child;

// ---- send_with: frames written in place.

// Writes numbered frame `sequence` of `size` bytes, or nothing when size is 0.
class NumberedWriter final : public FrameWriter {
 public:
  NumberedWriter(uint64_t sequence, size_t size) : sequence_(sequence), size_(size) {}
  size_t write(std::span<uint8_t> room) override {
    ++calls;
    room_bytes = room.size();
    if (size_ == 0 || size_ > room.size()) return 0;
    testing::fill_frame(sequence_, room.first(size_));
    return size_;
  }
  int calls = 0;
  size_t room_bytes = 0;

 private:
  uint64_t sequence_;
  size_t size_;
};

TEST_F(ShmWireTest, SendWithWritesTheFrameIntoTheDestinationsRing) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  NumberedWriter writer(77, 300);
  ASSERT_TRUE(self.wire->send_with(WireAddress{kDevice, self.qpn}, 1000, writer));
  EXPECT_EQ(writer.calls, 1);
  EXPECT_EQ(writer.room_bytes, 1000u);
  std::vector<uint8_t> received;
  const auto keep = [&](std::span<const uint8_t> f) { received.assign(f.begin(), f.end()); };
  EXPECT_EQ(self.wire->poll(keep, 16), 1u);
  EXPECT_EQ(received.size(), 300u);
  EXPECT_TRUE(frame_matches(77, received));
  const WireCounters counters = self.wire->counters();
  EXPECT_EQ(counters.frames_sent, 1u);
  EXPECT_EQ(counters.frames_deferred, 0u);
  EXPECT_EQ(counters.ring_protocol_violations, 0u);
}

TEST_F(ShmWireTest, SendWithAWriterThatWritesNothingSendsNothingAndBlocksNothing) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  NumberedWriter nothing(1, 0);
  EXPECT_FALSE(self.wire->send_with(WireAddress{kDevice, self.qpn}, 500, nothing));
  EXPECT_EQ(nothing.calls, 1);
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  ASSERT_TRUE(send_numbered(*self.wire, self.qpn, 2, 1, buffer));
  std::vector<std::vector<uint8_t>> received;
  self.wire->poll([&](std::span<const uint8_t> f) { received.emplace_back(f.begin(), f.end()); },
                  16);
  ASSERT_EQ(received.size(), 1u);  // the empty slot is skipped, the next frame comes
  EXPECT_TRUE(frame_matches(2, received[0]));
  const WireCounters counters = self.wire->counters();
  EXPECT_EQ(counters.frames_sent, 1u);
  EXPECT_EQ(counters.frames_received, 1u);
  EXPECT_EQ(counters.ring_protocol_violations, 0u);
}

TEST_F(ShmWireTest, SendWithRefusesARoomLargerThanASlotOrNoRoom) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  NumberedWriter writer(1, 10);
  EXPECT_FALSE(self.wire->send_with(WireAddress{kDevice, self.qpn}, kShmMaxFrameBytes + 1, writer));
  EXPECT_FALSE(self.wire->send_with(WireAddress{kDevice, self.qpn}, 0, writer));
  EXPECT_EQ(writer.calls, 0);
  EXPECT_TRUE(self.wire->send_with(WireAddress{kDevice, self.qpn}, kShmMaxFrameBytes, writer));
}

TEST_F(ShmWireTest, SendWithToAQpnNobodyOwnsIsCountedAsSendCountsIt) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  NumberedWriter writer(1, 10);
  EXPECT_FALSE(self.wire->send_with(WireAddress{kDevice, self.qpn + 1}, 100, writer));
  EXPECT_EQ(writer.calls, 0);
  EXPECT_EQ(self.wire->counters().frames_unroutable, 1u);
  EXPECT_EQ(self.wire->counters().frames_sent, 0u);
}

// Frames sent with send() and send_with() alternately to a receiver that
// does not poll yet: the ring takes its capacity, the rest is held, and
// everything arrives in order once it polls.
TEST_F(ShmWireTest, SendWithQueuesBehindHeldFramesSoOrderHolds) {
  constexpr uint64_t kFrames = 3 * kDefaultMailboxSlots + 17;
  Pipe address, go;
  pid_t receiver = fork_child([&] {
    Endpoint end;
    if (!end.open()) return 1;
    address.write(end.qpn);
    uint8_t token = 0;
    if (!go.read(token)) return 3;
    return receive_numbered(*end.wire, kFrames, 1) ? 0 : 2;
  }, 300);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  uint32_t qpn = 0;
  ASSERT_TRUE(address.read(qpn));
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  for (uint64_t seq = 0; seq < kFrames; ++seq) {
    if (seq % 2 == 0) {
      NumberedWriter writer(seq, frame_size_for(seq, 1, kShmMaxFrameBytes));
      ASSERT_TRUE(sender.wire->send_with(WireAddress{kDevice, qpn}, kShmMaxFrameBytes, writer));
    } else {
      ASSERT_TRUE(send_numbered(*sender.wire, qpn, seq, 1, buffer));
    }
  }
  WireCounters counters = sender.wire->counters();
  EXPECT_EQ(counters.frames_sent, kDefaultMailboxSlots);
  EXPECT_EQ(counters.frames_deferred, kFrames - kDefaultMailboxSlots);
  go.write(uint8_t{1});
  drain_deferred(*sender.wire);
  EXPECT_EQ(wait_child(receiver), 0);
  counters = sender.wire->counters();
  EXPECT_EQ(counters.frames_sent, kFrames);
  EXPECT_EQ(counters.frames_dropped_peer_unusable, 0u);
}

// ---- Peers that take nothing, and rings of another size.

TEST_F(ShmWireTest, HeldFramesForAPeerThatTakesNothingAreDroppedAfterTheDeadline) {
  constexpr uint64_t kHeld = 100;
  Pipe report;
  pid_t receiver = spawn_deaf_receiver(report);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  sender.wire->set_peer_unusable_deadline_ns(200'000'000);
  uint32_t qpn = 0;
  ASSERT_TRUE(report.read(qpn));
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  // Before the first frame is held, so that however long the sends take
  // (a loaded machine, a sanitizer) the deadline cannot have run earlier.
  const auto started = std::chrono::steady_clock::now();
  for (uint64_t seq = 0; seq < kDefaultMailboxSlots + kHeld; ++seq) {
    ASSERT_TRUE(send_numbered(*sender.wire, qpn, seq, 1, buffer));
  }
  ASSERT_TRUE(sender.wire->has_deferred());
  while (sender.wire->has_deferred() &&
         std::chrono::steady_clock::now() - started < std::chrono::seconds(20)) {
    sender.wire->poll(kIgnoreFrames, 0);
    usleep(1000);
  }
  const auto waited = std::chrono::steady_clock::now() - started;
  EXPECT_FALSE(sender.wire->has_deferred());
  // Not before the deadline (less the coarse clock's few milliseconds).
  EXPECT_GE(waited, std::chrono::milliseconds(150));
  WireCounters counters = sender.wire->counters();
  EXPECT_EQ(counters.frames_dropped_peer_unusable, kHeld);
  EXPECT_EQ(counters.frames_unroutable, 0u);  // it is alive: not unroutable
  // The peer is still there: a new frame is held again, not refused.
  EXPECT_TRUE(send_numbered(*sender.wire, qpn, 9999, 1, buffer));
  EXPECT_TRUE(sender.wire->has_deferred());
  kill(receiver, SIGKILL);
  EXPECT_EQ(wait_child(receiver), 128 + SIGKILL);
}

TEST_F(ShmWireTest, APeerWhoseRingHasAnotherSlotCountTakesExactlyItsCapacity) {
  constexpr uint64_t kFrames = 5 * kMinMailboxSlots;
  Pipe address, go;
  pid_t receiver = fork_child([&] {
    Endpoint end;
    end.mailbox_slots = kMinMailboxSlots;
    if (!end.open()) return 1;
    address.write(end.qpn);
    uint8_t token = 0;
    if (!go.read(token)) return 3;
    return receive_numbered(*end.wire, kFrames, 1) ? 0 : 2;
  }, 300);
  Endpoint sender;
  sender.mailbox_slots = kMaxMailboxSlots;
  ASSERT_TRUE(sender.open());
  EXPECT_EQ(sender.wire->mailbox_slots(), kMaxMailboxSlots);
  uint32_t qpn = 0;
  ASSERT_TRUE(address.read(qpn));
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  for (uint64_t seq = 0; seq < kFrames; ++seq) {
    ASSERT_TRUE(send_numbered(*sender.wire, qpn, seq, 1, buffer));
  }
  EXPECT_EQ(sender.wire->counters().frames_sent, kMinMailboxSlots);
  go.write(uint8_t{1});
  drain_deferred(*sender.wire);
  EXPECT_EQ(wait_child(receiver), 0);
  EXPECT_EQ(sender.wire->counters().frames_sent, kFrames);
}

// Sets an environment variable for the scope of a test.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* previous = std::getenv(name)) previous_ = previous;
    setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (previous_) {
      setenv(name_, previous_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

TEST_F(ShmWireTest, TheMailboxHasTheSlotCountTheEnvironmentAsksFor) {
  ScopedVariable slots(kMailboxSlotsVariable, "128");
  Errno err = 0;
  auto registry = ShmRegistry::attach(err);
  ASSERT_NE(registry, nullptr) << err;
  auto wire = ShmWire::create(*registry, err);
  ASSERT_NE(wire, nullptr) << err;
  EXPECT_EQ(wire->mailbox_slots(), 128u);
  wire.reset();
}

TEST_F(ShmWireTest, ASlotCountThatIsNotAPowerOfTwoInRangeIsRefused) {
  Errno err = 0;
  auto registry = ShmRegistry::attach(err);
  ASSERT_NE(registry, nullptr) << err;
  for (const char* bad : {"100", "0", "32", "16384", "512k", " 512", "-512"}) {
    ScopedVariable slots(kMailboxSlotsVariable, bad);
    EXPECT_EQ(ShmWire::create(*registry, err), nullptr) << bad;
    EXPECT_EQ(err, EINVAL) << bad;
  }
  EXPECT_EQ(testing::segments_of_current_prefix().size(), 1u);  // the registry only
}

// Our own ring's claim counter scribbled far ahead: sends are held, never
// waited for, and flow again once our consumer repairs the counter.
TEST_F(ShmWireTest, AClaimCounterScribbledFarAheadDelaysFramesButLosesNone) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  self.wire->set_stall_limit_ns(1'000'000);
  testing::RawMailbox raw;
  ASSERT_TRUE(raw.open(ShmRegistry::mailbox_name(self.registry->self())));
  raw.set_enqueue_position(uint64_t{1} << 50);
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  for (uint64_t seq = 0; seq < 10; ++seq) {
    ASSERT_TRUE(send_numbered(*self.wire, self.qpn, seq, 1, buffer));
  }
  EXPECT_TRUE(self.wire->has_deferred());
  EXPECT_EQ(self.wire->counters().frames_deferred, 10u);
  EXPECT_TRUE(receive_numbered(*self.wire, 10, 1));
  const WireCounters counters = self.wire->counters();
  EXPECT_GE(counters.ring_protocol_violations, 2u);  // seen as producer and as consumer
  EXPECT_EQ(counters.frames_sent, 10u);
  EXPECT_EQ(counters.frames_dropped_peer_unusable, 0u);
}

}  // namespace
}  // namespace softverbs
