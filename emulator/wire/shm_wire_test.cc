// The shared-memory wire between real processes, with real data: bulk
// transfer, several producers, a slow consumer, the doorbell, and peers that
// die or are replaced. Frames written in place and what the receiver's ring
// holds: shm_wire_ring_test.cc.
#include "emulator/wire/shm_wire.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
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

constexpr uint64_t kAnHourNs = 3'600'000'000'000ull;

TEST_F(ShmWireTest, AFrameForOurOwnQpnComesBackThroughOurRing) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  ASSERT_TRUE(send_numbered(*self.wire, self.qpn, 42, 1, buffer));
  std::vector<uint8_t> received;
  EXPECT_EQ(self.wire->poll([&](std::span<const uint8_t> f) { received.assign(f.begin(), f.end()); },
                            16),
            1u);
  EXPECT_EQ(received.size(), frame_size_for(42, 1, kShmMaxFrameBytes));
  EXPECT_TRUE(frame_matches(42, received));
  const WireCounters counters = self.wire->counters();
  EXPECT_EQ(counters.frames_sent, 1u);
  EXPECT_EQ(counters.frames_received, 1u);
  EXPECT_EQ(counters.frames_unroutable, 0u);
}

TEST_F(ShmWireTest, AFrameForAnUnallocatedQpnIsDroppedAndCounted) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  const std::array<uint8_t, 4> frame{1, 2, 3, 4};
  EXPECT_FALSE(self.wire->send(WireAddress{kDevice, self.qpn + 1}, frame));
  EXPECT_FALSE(self.wire->send(WireAddress{kDevice + 1, self.qpn}, frame));  // other device
  EXPECT_FALSE(self.wire->send(WireAddress{99, self.qpn}, frame));
  EXPECT_EQ(self.wire->counters().frames_unroutable, 3u);
  EXPECT_EQ(self.wire->counters().frames_sent, 0u);
  EXPECT_EQ(self.wire->poll(kIgnoreFrames, 16), 0u);
}

TEST_F(ShmWireTest, FramesLargerThanTheMaximumAreRefused) {
  Endpoint self;
  ASSERT_TRUE(self.open());
  std::vector<uint8_t> too_big(kShmMaxFrameBytes + 1);
  EXPECT_FALSE(self.wire->send(WireAddress{kDevice, self.qpn}, too_big));
  EXPECT_EQ(self.wire->poll(kIgnoreFrames, 16), 0u);
}

// One side of a two-way transfer: sends `count` numbered frames to `peer_qpn`
// while receiving and checking `count` from the peer, like an engine that
// posts and polls in one loop. Never runs more than one ring ahead: while
// frames are held it only polls. True when every frame arrived in order.
bool exchange_numbered(ShmWire& wire, uint32_t peer_qpn, uint64_t count) {
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  uint64_t sent = 0;
  uint64_t expected = 0;
  bool intact = true;
  auto check = [&](std::span<const uint8_t> frame) {
    intact = intact && frame.size() == frame_size_for(expected, 1, kShmMaxFrameBytes) &&
             frame_matches(expected, frame);
    ++expected;
  };
  while (sent < count || expected < count || wire.has_deferred()) {
    for (int burst = 0; burst < 32 && sent < count && !wire.has_deferred(); ++burst) {
      if (!send_numbered(wire, peer_qpn, sent++, 1, buffer)) return false;
    }
    wire.poll(check, 256);
  }
  return intact;
}

TEST_F(ShmWireTest, TwoProcessesExchangeAMillionFramesOfEverySizeInOrderAndIntact) {
  constexpr uint64_t kFramesEachWay = 1'000'000;
  Pipe to_parent, to_child;
  pid_t child = fork_child([&] {
    Endpoint end;
    if (!end.open()) return 1;
    to_parent.write(end.qpn);
    uint32_t parent_qpn = 0;
    if (!to_child.read(parent_qpn)) return 3;
    return exchange_numbered(*end.wire, parent_qpn, kFramesEachWay) ? 0 : 2;
  }, 900);
  Endpoint parent;
  ASSERT_TRUE(parent.open());
  uint32_t child_qpn = 0;
  ASSERT_TRUE(to_parent.read(child_qpn));
  to_child.write(parent.qpn);
  EXPECT_TRUE(exchange_numbered(*parent.wire, child_qpn, kFramesEachWay));
  EXPECT_EQ(wait_child(child), 0);
  const WireCounters counters = parent.wire->counters();
  EXPECT_EQ(counters.frames_sent, kFramesEachWay);
  EXPECT_EQ(counters.frames_received, kFramesEachWay);
  EXPECT_EQ(counters.frames_unroutable, 0u);
}

TEST_F(ShmWireTest, ThreeProducersIntoOneConsumerKeepEachProducersOrder) {
  constexpr int kProducers = 3;
  constexpr uint64_t kFramesEach = 100'000;
  Endpoint consumer;
  ASSERT_TRUE(consumer.open());
  std::vector<pid_t> producers;
  for (uint64_t p = 0; p < kProducers; ++p) {
    producers.push_back(fork_child([&, p] {
      Endpoint end;
      if (!end.open()) return 1;
      std::vector<uint8_t> buffer(kShmMaxFrameBytes);
      for (uint64_t n = 0; n < kFramesEach; ++n) {
        // The producer in the top byte: frame_matches checks all eight.
        if (!send_numbered(*end.wire, consumer.qpn, (p << 56) | n, 8, buffer)) return 2;
        if (end.wire->has_deferred()) drain_deferred(*end.wire);
      }
      return 0;
    }, 300));
  }
  std::array<uint64_t, kProducers> next{};
  uint64_t received = 0;
  bool in_order = true;
  auto check = [&](std::span<const uint8_t> frame) {
    uint64_t sequence = 0;
    std::memcpy(&sequence, frame.data(), std::min<size_t>(8, frame.size()));
    const uint64_t p = sequence >> 56;
    const uint64_t n = sequence & ((1ull << 56) - 1);
    in_order = in_order && p < kProducers && n == next[p] &&
               frame.size() == frame_size_for(sequence, 8, kShmMaxFrameBytes) &&
               frame_matches(sequence, frame);
    if (p < kProducers) next[p] = n + 1;
    ++received;
  };
  while (received < kProducers * kFramesEach) {
    if (consumer.wire->poll(check, 256) == 0) consumer.wire->wait(10'000'000);
  }
  EXPECT_TRUE(in_order);
  for (pid_t producer : producers) EXPECT_EQ(wait_child(producer), 0);
  EXPECT_EQ(consumer.wire->counters().frames_received, kProducers * kFramesEach);
}

TEST_F(ShmWireTest, ThreadsSendingAtOnceKeepEachThreadsOrder) {
  constexpr uint64_t kThreads = 3;
  constexpr uint64_t kFramesEach = 50'000;
  Pipe address;
  pid_t receiver = fork_child([&] {
    Endpoint end;
    if (!end.open()) return 1;
    address.write(end.qpn);
    std::array<uint64_t, kThreads> next{};
    uint64_t received = 0;
    bool in_order = true;
    auto check = [&](std::span<const uint8_t> frame) {
      uint64_t sequence = 0;
      std::memcpy(&sequence, frame.data(), 8);
      const uint64_t t = sequence >> 56;
      in_order = in_order && t < kThreads && (sequence & 0xffffff) == next[t] &&
                 frame_matches(sequence, frame);
      if (t < kThreads) ++next[t];
      ++received;
    };
    while (received < kThreads * kFramesEach) {
      if (end.wire->poll(check, 256) == 0) end.wire->wait(10'000'000);
    }
    return in_order ? 0 : 2;
  }, 300);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  uint32_t qpn = 0;
  ASSERT_TRUE(address.read(qpn));
  std::atomic<bool> all_sent{true};
  std::mutex poll_mutex;  // poll() is for one thread at a time
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> buffer(kShmMaxFrameBytes);
      for (uint64_t n = 0; n < kFramesEach; ++n) {
        if (!send_numbered(*sender.wire, qpn, (t << 56) | n, 8, buffer)) all_sent = false;
        while (sender.wire->has_deferred()) {
          if (poll_mutex.try_lock()) {
            sender.wire->poll(kIgnoreFrames, 0);
            poll_mutex.unlock();
          }
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(all_sent);
  EXPECT_EQ(wait_child(receiver), 0);
}

TEST_F(ShmWireTest, ASlowConsumerMakesTheSenderHoldFramesWithoutLossOrReordering) {
  constexpr uint64_t kFrames = 20'000;
  Pipe address, go;
  pid_t receiver = fork_child([&] {
    Endpoint end;
    if (!end.open()) return 1;
    address.write(end.qpn);
    uint8_t token = 0;
    if (!go.read(token)) return 3;  // not a single poll before this
    return receive_numbered(*end.wire, kFrames, 1) ? 0 : 2;
  }, 300);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  // Slow here means slow, not stalled: a loaded machine (or a sanitizer)
  // may hold the receiver off for seconds, which is no reason to give up.
  sender.wire->set_peer_unusable_deadline_ns(120'000'000'000);
  uint32_t qpn = 0;
  ASSERT_TRUE(address.read(qpn));
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  for (uint64_t seq = 0; seq < kFrames; ++seq) {
    ASSERT_TRUE(send_numbered(*sender.wire, qpn, seq, 1, buffer)) << seq;
  }
  // The receiver's ring took exactly its capacity; the rest waits here.
  WireCounters counters = sender.wire->counters();
  EXPECT_TRUE(sender.wire->has_deferred());
  EXPECT_EQ(counters.frames_sent, kDefaultMailboxSlots);
  EXPECT_EQ(counters.frames_deferred, kFrames - kDefaultMailboxSlots);
  go.write(uint8_t{1});
  drain_deferred(*sender.wire);
  EXPECT_EQ(wait_child(receiver), 0);
  counters = sender.wire->counters();
  EXPECT_EQ(counters.frames_sent, kFrames);
  EXPECT_EQ(counters.frames_unroutable, 0u);
}

TEST_F(ShmWireTest, ASleepingConsumerIsWokenByTheProducer) {
  Pipe address;
  pid_t receiver = fork_child([&] {
    Endpoint end;
    if (!end.open()) return 1;
    address.write(end.qpn);
    // Nothing but the producer's doorbell ends an hour-long wait; the
    // watchdog fails the test if it never rings.
    size_t received = 0;
    while (received == 0) {
      end.wire->wait(kAnHourNs);
      received = end.wire->poll(kIgnoreFrames, 16);
    }
    return 0;
  }, 60);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  uint32_t qpn = 0;
  ASSERT_TRUE(address.read(qpn));
  ProcessRef owner;
  ASSERT_TRUE(sender.registry->lookup_qpn(kDevice, qpn, owner));
  Errno err = 0;
  auto peek_at_receiver = ShmMailbox::open(ShmRegistry::mailbox_name(owner), err);
  ASSERT_NE(peek_at_receiver, nullptr) << err;
  // Only send once it has said it sleeps, so the doorbell path is the one taken.
  for (int i = 0; i < 30'000 && !peek_at_receiver->consumer_asleep(); ++i) usleep(1000);
  ASSERT_TRUE(peek_at_receiver->consumer_asleep());
  const std::array<uint8_t, 3> frame{7, 7, 7};
  ASSERT_TRUE(sender.wire->send(WireAddress{kDevice, qpn}, frame));
  EXPECT_EQ(wait_child(receiver), 0);
}

TEST_F(ShmWireTest, WakeFromAnotherThreadEndsWait) {
  pid_t child = fork_child([] {
    Endpoint end;
    if (!end.open()) return 1;
    Errno err = 0;
    auto own_mailbox = ShmMailbox::open(ShmRegistry::mailbox_name(end.registry->self()), err);
    if (!own_mailbox) return 2;
    std::atomic<bool> returned{false};
    std::thread sleeper([&] {
      end.wire->wait(kAnHourNs);
      returned = true;
    });
    while (!own_mailbox->consumer_asleep()) usleep(100);
    end.wire->wake();
    sleeper.join();
    return returned ? 0 : 3;
  }, 60);
  EXPECT_EQ(wait_child(child), 0);
}

TEST_F(ShmWireTest, WakeBeforeWaitMakesTheNextWaitReturn) {
  pid_t child = fork_child([] {
    Endpoint end;
    if (!end.open()) return 1;
    end.wire->wake();
    end.wire->wait(kAnHourNs);
    return 0;
  }, 60);
  EXPECT_EQ(wait_child(child), 0);
}

TEST_F(ShmWireTest, FramesForAKilledProcessBecomeUnroutable) {
  Pipe report;
  pid_t receiver = spawn_deaf_receiver(report);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  uint32_t qpn = 0;
  ASSERT_TRUE(report.read(qpn));
  const std::array<uint8_t, 8> frame{};
  ASSERT_TRUE(sender.wire->send(WireAddress{kDevice, qpn}, frame));
  kill(receiver, SIGKILL);
  EXPECT_EQ(wait_child(receiver), 128 + SIGKILL);
  // Its slot is not reclaimed yet, so the registry still names it; the wire
  // finds out at the latest when its ring is full.
  bool refused = false;
  for (uint32_t i = 0; i <= kDefaultMailboxSlots && !refused; ++i) {
    refused = !sender.wire->send(WireAddress{kDevice, qpn}, frame);
  }
  EXPECT_TRUE(refused);
  EXPECT_FALSE(sender.wire->has_deferred());
  EXPECT_GE(sender.wire->counters().frames_unroutable, 1u);
}

TEST_F(ShmWireTest, FramesHeldForAProcessThatDiesAreDroppedAndCounted) {
  constexpr uint64_t kFrames = 3000;
  Pipe report;
  pid_t receiver = spawn_deaf_receiver(report);
  Endpoint sender;
  ASSERT_TRUE(sender.open());
  uint32_t qpn = 0;
  ASSERT_TRUE(report.read(qpn));
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);
  for (uint64_t seq = 0; seq < kFrames; ++seq) {
    ASSERT_TRUE(send_numbered(*sender.wire, qpn, seq, 1, buffer));
  }
  ASSERT_EQ(sender.wire->counters().frames_deferred, kFrames - kDefaultMailboxSlots);
  kill(receiver, SIGKILL);
  EXPECT_EQ(wait_child(receiver), 128 + SIGKILL);
  for (int i = 0; i < 10'000 && sender.wire->has_deferred(); ++i) {
    sender.wire->poll(kIgnoreFrames, 0);
    usleep(1000);
  }
  EXPECT_FALSE(sender.wire->has_deferred());
  EXPECT_EQ(sender.wire->counters().frames_unroutable, kFrames - kDefaultMailboxSlots);
}

TEST_F(ShmWireTest, ANewProcessInAReusedSlotGetsItsOwnFrames) {
  Endpoint sender;  // attached first: the receivers share the next slot
  ASSERT_TRUE(sender.open());
  struct Identity {
    ProcessRef process;
    uint32_t qpn;
  };
  auto spawn_receiver = [](Pipe& report, uint64_t expected) {
    return fork_child([&report, expected] {
      Endpoint end;
      if (!end.open()) return 1;
      report.write(Identity{end.registry->self(), end.qpn});
      bool intact = false;
      size_t received = 0;
      while (received == 0) {
        received = end.wire->poll(
            [&](std::span<const uint8_t> f) { intact = frame_matches(expected, f); }, 1);
        if (received == 0) end.wire->wait(10'000'000);
      }
      return intact ? 0 : 2;  // leaves cleanly: the slot is free again
    }, 60);
  };
  std::vector<uint8_t> buffer(kShmMaxFrameBytes);

  Pipe first_report;
  pid_t first = spawn_receiver(first_report, 1);
  Identity first_identity{};
  ASSERT_TRUE(first_report.read(first_identity));
  ASSERT_TRUE(send_numbered(*sender.wire, first_identity.qpn, 1, 16, buffer));
  EXPECT_EQ(wait_child(first), 0);

  Pipe second_report;
  pid_t second = spawn_receiver(second_report, 2);
  Identity second_identity{};
  ASSERT_TRUE(second_report.read(second_identity));
  ASSERT_EQ(second_identity.process.slot, first_identity.process.slot);
  ASSERT_NE(second_identity.process.generation, first_identity.process.generation);
  ASSERT_TRUE(send_numbered(*sender.wire, second_identity.qpn, 2, 16, buffer));
  EXPECT_EQ(wait_child(second), 0);
}

}  // namespace
}  // namespace softverbs
