// The mailbox ring on its own, in one process: ordering, the full ring,
// producers racing, a producer that stalls mid-write, and the doorbell.
#include "emulator/wire/shm_mailbox.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "emulator/wire/shm_names.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using testing::fork_child;
using testing::wait_child;

class ShmMailboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = mailbox_segment_name(7, 1);
    Errno err = 0;
    consumer_ = ShmMailbox::create(name_, err);
    ASSERT_NE(consumer_, nullptr) << "errno " << err;
    producer_ = ShmMailbox::open(name_, err);
    ASSERT_NE(producer_, nullptr) << "errno " << err;
  }
  void TearDown() override {
    producer_.reset();
    consumer_.reset();
    testing::remove_segments_of_current_prefix();
  }

  // Pops one frame and checks it is frame `sequence`.
  ::testing::AssertionResult pop_expecting(uint64_t sequence) {
    std::span<const uint8_t> frame;
    if (!consumer_->peek(frame)) return ::testing::AssertionFailure() << "ring empty";
    const bool ok = testing::frame_matches(sequence, frame);
    consumer_->release_peeked();
    if (!ok) return ::testing::AssertionFailure() << "frame " << sequence << " garbled";
    return ::testing::AssertionSuccess();
  }

  bool push(uint64_t sequence, size_t size) {
    std::vector<uint8_t> frame(size);
    testing::fill_frame(sequence, frame);
    return producer_->try_push(frame);
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{300};
  std::string name_;
  std::unique_ptr<ShmMailbox> consumer_;
  std::unique_ptr<ShmMailbox> producer_;
};

TEST_F(ShmMailboxTest, FramePushedIsFramePeekedByteForByte) {
  ASSERT_TRUE(push(1, 1));
  ASSERT_TRUE(push(2, kShmMaxFrameBytes));
  EXPECT_TRUE(pop_expecting(1));
  EXPECT_TRUE(pop_expecting(2));
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));
}

TEST_F(ShmMailboxTest, PeekedFrameHasTheLengthPushed) {
  ASSERT_TRUE(push(5, 1000));
  std::span<const uint8_t> frame;
  ASSERT_TRUE(consumer_->peek(frame));
  EXPECT_EQ(frame.size(), 1000u);
  consumer_->release_peeked();
}

TEST_F(ShmMailboxTest, EmptyAndOversizedFramesAreRefused) {
  std::vector<uint8_t> oversized(kShmMaxFrameBytes + 1, 0xab);
  EXPECT_FALSE(producer_->try_push(oversized));
  EXPECT_FALSE(producer_->try_push(std::span<const uint8_t>()));
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));
}

TEST_F(ShmMailboxTest, FullRingRefusesUntilTheConsumerFreesASlot) {
  for (uint64_t i = 0; i < kMailboxSlotCount; ++i) ASSERT_TRUE(push(i, 64)) << i;
  EXPECT_FALSE(push(kMailboxSlotCount, 64));
  EXPECT_TRUE(pop_expecting(0));
  EXPECT_TRUE(push(kMailboxSlotCount, 64));
  EXPECT_FALSE(push(kMailboxSlotCount + 1, 64));
}

TEST_F(ShmMailboxTest, OrderHoldsOverManyLapsOfTheRing) {
  uint64_t pushed = 0;
  uint64_t popped = 0;
  // Uneven batches so the head and tail meet at every slot index.
  for (int round = 0; round < 200; ++round) {
    const int batch = 1 + (round * 37) % 300;
    for (int i = 0; i < batch; ++i, ++pushed) {
      ASSERT_TRUE(push(pushed, testing::frame_size_for(pushed, 1, kShmMaxFrameBytes)));
    }
    const int drain = batch - (round % 2);
    for (int i = 0; i < drain; ++i, ++popped) ASSERT_TRUE(pop_expecting(popped));
  }
  while (popped < pushed) ASSERT_TRUE(pop_expecting(popped++));
  EXPECT_GT(pushed, 10u * kMailboxSlotCount);
}

TEST_F(ShmMailboxTest, ProducerThreadsRacingKeepEachOnesOrder) {
  constexpr int kProducers = 4;
  constexpr uint64_t kFramesEach = 50'000;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([this, p] {
      std::array<uint8_t, 16> frame{};
      for (uint64_t seq = 0; seq < kFramesEach; ++seq) {
        frame[0] = static_cast<uint8_t>(p);
        std::memcpy(&frame[8], &seq, sizeof(seq));
        while (!producer_->try_push(frame)) std::this_thread::yield();
      }
    });
  }
  std::array<uint64_t, kProducers> next{};
  uint64_t received = 0;
  bool in_order = true;
  while (received < kProducers * kFramesEach) {
    std::span<const uint8_t> frame;
    if (!consumer_->peek(frame)) {
      std::this_thread::yield();
      continue;
    }
    uint64_t seq = 0;
    std::memcpy(&seq, &frame[8], sizeof(seq));
    const int p = frame[0];
    in_order = in_order && p < kProducers && frame.size() == 16 && seq == next[p];
    if (p < kProducers) next[p] = seq + 1;
    consumer_->release_peeked();
    ++received;
  }
  for (auto& t : producers) t.join();
  EXPECT_TRUE(in_order);
  EXPECT_EQ(consumer_->abandoned_slots(), 0u);
}

// A producer that claimed a slot and never published it (it died between
// the two steps) must not block the mailbox for good.
TEST_F(ShmMailboxTest, SlotOfAStalledProducerIsSkippedAfterTheStallLimit) {
  ShmMailbox::Reservation stalled;
  ASSERT_TRUE(producer_->reserve(stalled));
  ASSERT_TRUE(push(1, 100));
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));  // frame 1 waits behind the claimed slot

  consumer_->set_stall_limit_ns(1'000'000);
  bool skipped = false;
  // Busy polling looks for stalls once per kEmptyPeeksPerStallCheck peeks.
  for (int attempt = 0; attempt < 100'000 && !skipped; ++attempt) {
    skipped = consumer_->peek(frame);
    if (!skipped) usleep(50);
  }
  ASSERT_TRUE(skipped);
  EXPECT_TRUE(testing::frame_matches(1, frame));
  consumer_->release_peeked();
  EXPECT_EQ(consumer_->abandoned_slots(), 1u);

  // The stalled producer wakes up late: its frame is lost, nothing else is.
  std::vector<uint8_t> late(50);
  testing::fill_frame(99, late);
  producer_->commit(stalled, late);
  EXPECT_FALSE(consumer_->peek(frame));
  for (uint64_t i = 2; i < 2 + 3 * kMailboxSlotCount; ++i) {
    ASSERT_TRUE(push(i, 32));
    ASSERT_TRUE(pop_expecting(i));
  }
}

TEST_F(ShmMailboxTest, AConsumerThatSleepsStillGetsPastAStalledSlot) {
  ShmMailbox::Reservation stalled;
  ASSERT_TRUE(producer_->reserve(stalled));
  ASSERT_TRUE(push(1, 100));
  consumer_->set_stall_limit_ns(1'000'000);
  pid_t child = fork_child([this] {
    std::span<const uint8_t> frame;
    // An hour-long wait that only the stall limit can cut short.
    while (!consumer_->peek(frame)) consumer_->wait(3'600'000'000'000ull);
    return testing::frame_matches(1, frame) ? 0 : 2;
  }, 30);
  EXPECT_EQ(wait_child(child), 0);
}

TEST_F(ShmMailboxTest, ProducerStillWritingIsNotSkippedBeforeTheLimit) {
  ShmMailbox::Reservation slow;
  ASSERT_TRUE(producer_->reserve(slow));
  std::span<const uint8_t> frame;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(consumer_->peek(frame));
  std::vector<uint8_t> bytes(10);
  testing::fill_frame(4, bytes);
  producer_->commit(slow, bytes);
  EXPECT_TRUE(pop_expecting(4));
  EXPECT_EQ(consumer_->abandoned_slots(), 0u);
}

TEST_F(ShmMailboxTest, WaitReturnsAtOnceWhenAFrameIsReady) {
  ASSERT_TRUE(push(1, 10));
  pid_t child = fork_child([this] {
    consumer_->wait(3'600'000'000'000ull);  // an hour: only the ready frame ends it
    return 0;
  }, 30);
  EXPECT_EQ(wait_child(child), 0);
}

TEST_F(ShmMailboxTest, WakeBeforeWaitMakesWaitReturn) {
  pid_t child = fork_child([this] {
    consumer_->wake();
    consumer_->wait(3'600'000'000'000ull);
    return 0;
  }, 30);
  EXPECT_EQ(wait_child(child), 0);
}

TEST_F(ShmMailboxTest, OpeningAMissingMailboxFailsWithEnoent) {
  Errno err = 0;
  EXPECT_EQ(ShmMailbox::open(mailbox_segment_name(8, 1), err), nullptr);
  EXPECT_EQ(err, ENOENT);
}

TEST_F(ShmMailboxTest, CreatorRemovesTheSegment) {
  const std::string path = shm_file_path(name_);
  EXPECT_TRUE(testing::file_exists(path));
  consumer_.reset();
  EXPECT_FALSE(testing::file_exists(path));
}

}  // namespace
}  // namespace softverbs
