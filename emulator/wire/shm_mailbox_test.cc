// The mailbox ring on its own, in one process: ordering, the full ring,
// producers racing, a producer that stalls mid-write, and the doorbell.
#include "emulator/wire/shm_mailbox.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/stat.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "emulator/wire/shm_names.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using testing::fork_child;
using testing::wait_child;

constexpr uint32_t kSlots = kDefaultMailboxSlots;

class ShmMailboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    name_ = mailbox_segment_name(7, 1);
    Errno err = 0;
    consumer_ = ShmMailbox::create(name_, kSlots, err);
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
    return producer_->try_push(frame) == ClaimResult::kClaimed;
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
  EXPECT_NE(producer_->try_push(oversized), ClaimResult::kClaimed);
  EXPECT_NE(producer_->try_push(std::span<const uint8_t>()), ClaimResult::kClaimed);
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));
}

TEST_F(ShmMailboxTest, FullRingRefusesUntilTheConsumerFreesASlot) {
  for (uint64_t i = 0; i < kSlots; ++i) ASSERT_TRUE(push(i, 64)) << i;
  EXPECT_FALSE(push(kSlots, 64));
  EXPECT_TRUE(pop_expecting(0));
  EXPECT_TRUE(push(kSlots, 64));
  EXPECT_FALSE(push(kSlots + 1, 64));
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
  EXPECT_GT(pushed, 10u * kSlots);
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
        while (producer_->try_push(frame) != ClaimResult::kClaimed) std::this_thread::yield();
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
  ASSERT_EQ(producer_->reserve(stalled), ClaimResult::kClaimed);
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
  for (uint64_t i = 2; i < 2 + 3 * kSlots; ++i) {
    ASSERT_TRUE(push(i, 32));
    ASSERT_TRUE(pop_expecting(i));
  }
}

TEST_F(ShmMailboxTest, AConsumerThatSleepsStillGetsPastAStalledSlot) {
  ShmMailbox::Reservation stalled;
  ASSERT_EQ(producer_->reserve(stalled), ClaimResult::kClaimed);
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
  ASSERT_EQ(producer_->reserve(slow), ClaimResult::kClaimed);
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


// ---- Geometry and reservation.

TEST_F(ShmMailboxTest, SlotCountsThatAreNotPowersOfTwoInRangeAreRefused) {
  for (uint32_t slots : {0u, 1u, 32u, 63u, 100u, 511u, 16384u}) {
    Errno err = 0;
    EXPECT_EQ(ShmMailbox::create(mailbox_segment_name(9, slots), slots, err), nullptr) << slots;
    EXPECT_EQ(err, EINVAL) << slots;
  }
  EXPECT_TRUE(testing::segments_of_current_prefix().size() == 1u);  // only the fixture's
}

TEST_F(ShmMailboxTest, AProducerUsesTheSlotCountOfTheMailboxItOpens) {
  Errno err = 0;
  const std::string name = mailbox_segment_name(9, 1);
  auto small = ShmMailbox::create(name, kMinMailboxSlots, err);
  ASSERT_NE(small, nullptr) << err;
  auto into_small = ShmMailbox::open(name, err);
  ASSERT_NE(into_small, nullptr) << err;
  EXPECT_EQ(into_small->slot_count(), kMinMailboxSlots);
  EXPECT_EQ(into_small->segment_bytes(), mailbox_segment_bytes(kMinMailboxSlots));
  std::vector<uint8_t> frame(32, 7);
  for (uint32_t i = 0; i < kMinMailboxSlots; ++i) {
    ASSERT_EQ(into_small->try_push(frame), ClaimResult::kClaimed) << i;
  }
  EXPECT_EQ(into_small->try_push(frame), ClaimResult::kFull);
  EXPECT_EQ(into_small->protocol_violations(), 0u);
}

TEST_F(ShmMailboxTest, AHeaderThatDisagreesWithTheSegmentIsRefused) {
  testing::RawMailbox raw;
  ASSERT_TRUE(raw.open(name_));
  Errno err = 0;
  raw.header().slot_count = kSlots * 2;  // larger than the segment
  EXPECT_EQ(ShmMailbox::open(name_, err), nullptr);
  EXPECT_EQ(err, EPROTO);
  raw.header().slot_count = 100;  // not a power of two
  EXPECT_EQ(ShmMailbox::open(name_, err), nullptr);
  EXPECT_EQ(err, EPROTO);
  raw.header().slot_count = kSlots;
  raw.header().version = kMailboxVersion - 1;
  EXPECT_EQ(ShmMailbox::open(name_, err), nullptr);
  EXPECT_EQ(err, EPROTO);
  raw.header().version = kMailboxVersion;
  EXPECT_NE(ShmMailbox::open(name_, err), nullptr) << err;
  // The consumer never reads the header's geometry again.
  raw.header().slot_count = 1;
  ASSERT_TRUE(push(3, 40));
  EXPECT_TRUE(pop_expecting(3));
}

TEST_F(ShmMailboxTest, TheSegmentsMemoryIsReservedWhenCreated) {
  struct stat st;
  ASSERT_EQ(::stat(shm_file_path(name_).c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), mailbox_segment_bytes(kSlots));
  // Allocated, not sparse: every block is there before any slot is used.
  EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, mailbox_segment_bytes(kSlots));
}

// ---- Writing in place, and empty slots.

TEST_F(ShmMailboxTest, AFrameWrittenInPlaceIsPeekedByteForByte) {
  ShmMailbox::Reservation reservation;
  ASSERT_EQ(producer_->reserve(reservation), ClaimResult::kClaimed);
  std::span<uint8_t> room = ShmMailbox::room(reservation);
  ASSERT_EQ(room.size(), kShmMaxFrameBytes);
  testing::fill_frame(11, room.first(700));
  producer_->publish(reservation, 700);
  std::span<const uint8_t> frame;
  ASSERT_TRUE(consumer_->peek(frame));
  EXPECT_EQ(frame.size(), 700u);
  EXPECT_TRUE(testing::frame_matches(11, frame));
  consumer_->release_peeked();
}

TEST_F(ShmMailboxTest, ASlotPublishedEmptyIsSkippedSilently) {
  ShmMailbox::Reservation nothing;
  ASSERT_EQ(producer_->reserve(nothing), ClaimResult::kClaimed);
  ASSERT_TRUE(push(1, 64));
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));  // frame 1 waits behind the claimed slot
  producer_->publish(nothing, 0);
  EXPECT_TRUE(pop_expecting(1));
  EXPECT_FALSE(consumer_->peek(frame));
  EXPECT_EQ(consumer_->protocol_violations(), 0u);
  EXPECT_EQ(consumer_->abandoned_slots(), 0u);
  // The skipped slot is free again for the next lap.
  for (uint64_t i = 2; i < 2 + 2 * kSlots; ++i) {
    ASSERT_TRUE(push(i, 16));
    ASSERT_TRUE(pop_expecting(i));
  }
}

// ---- Slots claimed and never published.

TEST_F(ShmMailboxTest, SlotsClaimedBeforeAStallAreGivenUpTogether) {
  ShmMailbox::Reservation stalled[3];
  for (auto& reservation : stalled) {
    ASSERT_EQ(producer_->reserve(reservation), ClaimResult::kClaimed);
  }
  ASSERT_TRUE(push(1, 100));
  consumer_->set_stall_limit_ns(20'000'000);
  std::span<const uint8_t> frame;
  // The first look starts the watch; one wait of the stall limit later, all
  // three go in one peek, not one stall limit each.
  consumer_->wait(1);  // marks the stall check due (a claim is pending)
  EXPECT_FALSE(consumer_->peek(frame));
  usleep(40'000);
  consumer_->wait(1);
  ASSERT_TRUE(consumer_->peek(frame));
  EXPECT_TRUE(testing::frame_matches(1, frame));
  consumer_->release_peeked();
  EXPECT_EQ(consumer_->abandoned_slots(), 3u);
  EXPECT_EQ(consumer_->protocol_violations(), 0u);
}

// ---- A peer that breaks the protocol.

class BrokenPeerTest : public ShmMailboxTest {
 protected:
  void SetUp() override {
    ShmMailboxTest::SetUp();
    ASSERT_TRUE(raw_.open(name_));
    consumer_->set_stall_limit_ns(1'000'000);
  }

  // Peeks until a frame shows or `attempts` empty peeks went by (each one
  // also gives the consumer its chance to look for stalls).
  bool peek_patiently(std::span<const uint8_t>& frame, int attempts = 20'000) {
    for (int i = 0; i < attempts; ++i) {
      if (consumer_->peek(frame)) return true;
      if (i % 1000 == 999) usleep(1000);
    }
    return false;
  }

  // Pushes frame `sequence`, letting the consumer repair the ring meanwhile
  // if the producer finds it broken. false if it never got in.
  bool push_patiently(uint64_t sequence) {
    for (int i = 0; i < 20'000; ++i) {
      if (push(sequence, 64)) return true;
      std::span<const uint8_t> frame;
      if (consumer_->peek(frame)) return false;  // nothing else was pushed
      if (i % 1000 == 999) usleep(1000);
    }
    return false;
  }

  testing::RawMailbox raw_;
};

TEST_F(BrokenPeerTest, AClaimCounterSetBackIsSteppedOverByTheProducer) {
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(push(i, 64));
  raw_.set_enqueue_position(2);  // over three published slots
  ASSERT_TRUE(push(5, 64));
  EXPECT_EQ(raw_.enqueue_position(), 6u);
  EXPECT_GE(producer_->protocol_violations(), 1u);
  for (uint64_t i = 0; i < 6; ++i) EXPECT_TRUE(pop_expecting(i));
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));
}

TEST_F(BrokenPeerTest, AClaimCounterFarAheadIsRepairedByTheConsumer) {
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(push(i, 64));
  raw_.set_enqueue_position(uint64_t{1} << 40);
  EXPECT_EQ(producer_->try_push(std::vector<uint8_t>(8, 1)), ClaimResult::kBroken);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_TRUE(pop_expecting(i));
  ASSERT_TRUE(push_patiently(3));
  EXPECT_EQ(raw_.enqueue_position(), 4u);
  EXPECT_TRUE(pop_expecting(3));
  EXPECT_GE(consumer_->protocol_violations(), 1u);
  EXPECT_EQ(consumer_->abandoned_slots(), 0u);
}

TEST_F(BrokenPeerTest, AClaimCounterFarBehindTheConsumerIsRepaired) {
  for (uint64_t i = 0; i < 3 * kSlots; ++i) {
    ASSERT_TRUE(push(i, 16));
    ASSERT_TRUE(pop_expecting(i));
  }
  raw_.set_enqueue_position(0);  // three laps back: more than a producer steps over
  ASSERT_TRUE(push_patiently(7));
  EXPECT_TRUE(pop_expecting(7));
  EXPECT_GE(consumer_->protocol_violations() + producer_->protocol_violations(), 1u);
}

TEST_F(BrokenPeerTest, AClaimCounterAheadWithinALapCostsOneStallLimitNotOneASlot) {
  raw_.set_enqueue_position(40);  // looks like 40 claims, none published
  ASSERT_TRUE(push(1, 64));       // lands in slot 40
  std::span<const uint8_t> frame;
  ASSERT_TRUE(peek_patiently(frame));
  EXPECT_TRUE(testing::frame_matches(1, frame));
  consumer_->release_peeked();
  EXPECT_EQ(consumer_->abandoned_slots(), 40u);
}

TEST_F(BrokenPeerTest, AScribbledSequenceWordIsSkippedNotWaitedFor) {
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(push(i, 64));
  raw_.set_sequence(1, 12345);
  EXPECT_TRUE(pop_expecting(0));
  EXPECT_TRUE(pop_expecting(2));  // at once: no stall limit for slot 1
  EXPECT_EQ(consumer_->protocol_violations(), 1u);
  for (uint64_t i = 3; i < 3 + 2 * kSlots; ++i) {
    ASSERT_TRUE(push(i, 16));
    ASSERT_TRUE(pop_expecting(i));
  }
}

TEST_F(BrokenPeerTest, AFramePublishedByAScribbleStaysWithinItsSlot) {
  // Slot 0 marked published with no producer, first with a length past the
  // slot (skipped), then with the largest length (delivered: just bytes).
  raw_.slot(0).length = 0xffffffffu;
  raw_.set_sequence(0, 1);
  std::span<const uint8_t> frame;
  EXPECT_FALSE(consumer_->peek(frame));
  EXPECT_EQ(consumer_->protocol_violations(), 1u);
  raw_.slot(1).length = kShmMaxFrameBytes;
  raw_.set_sequence(1, 2);
  ASSERT_TRUE(consumer_->peek(frame));
  EXPECT_EQ(frame.size(), kShmMaxFrameBytes);
  EXPECT_EQ(std::memcmp(frame.data(), raw_.slot(1).bytes, kShmMaxFrameBytes), 0);
  consumer_->release_peeked();
  // Producers step over the two slots the consumer took behind their back.
  ASSERT_TRUE(push_patiently(5));
  EXPECT_TRUE(pop_expecting(5));
}

TEST_F(BrokenPeerTest, AScribbledHeaderIsRestoredByTheConsumerForLaterProducers) {
  raw_.header().slot_count = 3;
  raw_.header().total_bytes = 1;
  Errno err = 0;
  EXPECT_EQ(ShmMailbox::open(name_, err), nullptr);
  EXPECT_EQ(err, EPROTO);
  std::span<const uint8_t> frame;
  EXPECT_FALSE(peek_patiently(frame, 2 * kEmptyPeeksPerStallCheck));
  EXPECT_EQ(consumer_->protocol_violations(), 1u);
  auto later = ShmMailbox::open(name_, err);
  ASSERT_NE(later, nullptr) << err;
  EXPECT_EQ(later->slot_count(), kSlots);
}

TEST_F(BrokenPeerTest, NoScribbleMakesAPushOrPeekLoopForEverOrReadOutsideTheSlots) {
  std::mt19937_64 random(20240611);
  auto any_position = [&] {
    switch (random() % 4) {
      case 0: return random();
      case 1: return raw_.enqueue_position() + random() % (3 * kSlots) - kSlots;
      case 2: return raw_.enqueue_position() + (uint64_t{1} << (random() % 64));
      default: return raw_.enqueue_position() - (uint64_t{1} << (random() % 64));
    }
  };
  const std::span<const uint8_t> segment = consumer_->mapped_segment();
  const uint8_t* first_byte = segment.data() + mailbox_header_bytes();
  const uint8_t* past_last = segment.data() + segment.size();
  uint64_t sequence = 0;
  for (int round = 0; round < 100'000; ++round) {
    switch (random() % 4) {
      case 0: raw_.set_enqueue_position(any_position()); break;
      case 1: raw_.set_sequence(random() % kSlots, any_position()); break;
      case 2: raw_.slot(random() % kSlots).length = static_cast<uint32_t>(random()); break;
      default: raw_.slot(random() % kSlots).bytes[random() % kShmMaxFrameBytes] ^= 0x5a; break;
    }
    push(sequence++, 1 + random() % kShmMaxFrameBytes);
    std::span<const uint8_t> frame;
    for (int i = 0; i < 4 && consumer_->peek(frame); ++i) {
      ASSERT_GE(frame.data(), first_byte);
      ASSERT_LE(frame.data() + frame.size(), past_last);
      ASSERT_LE(frame.size(), kShmMaxFrameBytes);
      // Within one slot's bytes.
      const size_t offset = static_cast<size_t>(frame.data() - first_byte) % sizeof(MailboxSlot);
      ASSERT_EQ(offset, offsetof(MailboxSlot, bytes));
      consumer_->release_peeked();
    }
  }
  EXPECT_GT(consumer_->protocol_violations(), 0u);
  EXPECT_GT(producer_->protocol_violations(), 0u);

  // Left alone again, the ring heals as traffic passes every slot.
  for (int lap = 0; lap < 3 * static_cast<int>(kSlots); ++lap) {
    bool pushed = false;
    for (int attempt = 0; attempt < 20'000 && !pushed; ++attempt) {
      pushed = push(sequence, 64);
      std::span<const uint8_t> frame;
      while (consumer_->peek(frame)) consumer_->release_peeked();
      if (attempt % 1000 == 999) usleep(1000);
    }
    ASSERT_TRUE(pushed) << "the ring never took frame " << sequence;
    ++sequence;
  }
  std::span<const uint8_t> leftover;
  while (peek_patiently(leftover, 2000)) consumer_->release_peeked();
  const uint64_t violations = consumer_->protocol_violations() + producer_->protocol_violations();
  for (uint64_t i = sequence; i < sequence + 3 * kSlots; ++i) {
    ASSERT_TRUE(push(i, 1 + i % kShmMaxFrameBytes)) << i;
    ASSERT_TRUE(pop_expecting(i));
  }
  EXPECT_EQ(consumer_->protocol_violations() + producer_->protocol_violations(), violations);
}

}  // namespace
}  // namespace softverbs
