// The mailbox's doorbell beside application threads that poll: a frame that
// comes while one polls is left to it, the sleeper is woken only for a
// frame nobody will take, and the last poller out never leaves one behind.
// An application thread blocked for completion events is woken instead of
// the sleeper, and serves the frame itself.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "emulator/wire/futex.h"
#include "emulator/wire/shm_mailbox.h"
#include "emulator/wire/shm_names.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kAnHourNs = 3'600'000'000'000ull;

class ShmDoorbellTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Errno err = 0;
    const std::string name = mailbox_segment_name(9, 1);
    consumer_ = ShmMailbox::create(name, kDefaultMailboxSlots, err);
    ASSERT_NE(consumer_, nullptr) << "errno " << err;
    producer_ = ShmMailbox::open(name, err);
    ASSERT_NE(producer_, nullptr) << "errno " << err;
  }
  void TearDown() override {
    if (sleeper_.joinable()) {
      consumer_->wake();
      sleeper_.join();
    }
    producer_.reset();
    consumer_.reset();
    testing::remove_segments_of_current_prefix();
  }

  void push(uint64_t sequence) {
    std::vector<uint8_t> frame(64);
    testing::fill_frame(sequence, frame);
    ASSERT_EQ(producer_->try_push(frame), ClaimResult::kClaimed);
  }

  // The consumer's thread sleeps as the progress thread does while an
  // application thread polls; `woke_` says when that sleep ended.
  void sleep_while_polled() {
    sleeper_ = std::thread([this] {
      consumer_->wait_while_polled(kAnHourNs);
      woke_.store(true);
    });
    wait_for([this] { return consumer_->consumer_asleep() || woke_.load(); });
  }
  void sleep_until_frame() {
    sleeper_ = std::thread([this] {
      consumer_->wait(kAnHourNs);
      woke_.store(true);
    });
    wait_for([this] { return consumer_->consumer_asleep() || woke_.load(); });
  }

  template <class Condition>
  static void wait_for(Condition condition) {
    for (int i = 0; i < 20'000 && !condition(); ++i) std::this_thread::sleep_for(100us);
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{120};
  std::unique_ptr<ShmMailbox> consumer_;
  std::unique_ptr<ShmMailbox> producer_;
  std::thread sleeper_;
  std::atomic<bool> woke_{false};
};

TEST_F(ShmDoorbellTest, AFrameThatComesWhileAnApplicationThreadPollsIsLeftToIt) {
  consumer_->begin_poll();
  sleep_while_polled();
  ASSERT_TRUE(consumer_->consumer_asleep());
  push(1);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(woke_.load()) << "the sleeper was woken for a frame the poller takes";
  // The poller leaves without having taken it: it must say so, and the
  // caller then wakes the sleeper.
  EXPECT_TRUE(consumer_->end_poll());
  consumer_->wake();
  sleeper_.join();
  EXPECT_TRUE(woke_.load());
}

// A standing announcement (emulator/engine/standing_poll.h) is left the
// frame only while the sleeper sleeps beside pollers (it then wakes now
// and then to see whether the polls went on) and it is not paused.
TEST_F(ShmDoorbellTest, AStandingPollerIsLeftTheFrameOnlyWhileTheSleeperKnowsOfIt) {
  consumer_->begin_poll(ShmMailbox::Poll::kStanding);
  sleep_while_polled();
  push(1);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(woke_.load()) << "woken for a frame the standing poller takes";
  consumer_->wake();
  sleeper_.join();
  std::span<const uint8_t> frame;
  ASSERT_TRUE(consumer_->peek(frame));
  consumer_->release_peeked();

  // A sleep that does not know of pollers: rung, the announcement stands or not.
  woke_ = false;
  sleep_until_frame();
  push(2);
  wait_for([this] { return woke_.load(); });
  EXPECT_TRUE(woke_.load()) << "a sleeper unaware of the standing poller was not rung";
  sleeper_.join();
  EXPECT_TRUE(consumer_->end_poll(ShmMailbox::Poll::kStanding));
  EXPECT_FALSE(consumer_->polling());
}

TEST_F(ShmDoorbellTest, APausedStandingPollerIsNotLeftTheFrame) {
  consumer_->begin_poll(ShmMailbox::Poll::kStanding);
  EXPECT_TRUE(consumer_->polling());
  consumer_->set_poll_paused(true);
  EXPECT_FALSE(consumer_->polling()) << "a paused announcement still counts as a poller";
  sleep_while_polled();
  push(1);
  wait_for([this] { return woke_.load(); });
  EXPECT_TRUE(woke_.load()) << "the sleeper was left asleep beside a paused poller";
  sleeper_.join();
  consumer_->set_poll_paused(false);
  EXPECT_TRUE(consumer_->polling());
  consumer_->end_poll(ShmMailbox::Poll::kStanding);
}

TEST_F(ShmDoorbellTest, TheLastPollerOutReportsAFrameThatCameBeforeTheSleep) {
  // The frame comes while the consumer is awake (no doorbell, no mark);
  // then it sleeps, leaving the frame to the poller, which leaves.
  consumer_->begin_poll();
  push(1);
  sleep_while_polled();
  ASSERT_TRUE(consumer_->consumer_asleep()) << "a ready frame must not end the sleep while one polls";
  EXPECT_TRUE(consumer_->end_poll()) << "the frame would sit until the next timer";
}

TEST_F(ShmDoorbellTest, ThePollerOutReportsNothingWhenItTookEveryFrame) {
  consumer_->begin_poll();
  sleep_while_polled();
  push(1);
  std::span<const uint8_t> frame;
  ASSERT_TRUE(consumer_->peek(frame));
  consumer_->release_peeked();
  EXPECT_FALSE(consumer_->end_poll());
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(woke_.load());
}

TEST_F(ShmDoorbellTest, SleepingWhilePolledEndsAtOnceForAFrameWithNobodyPolling) {
  push(1);
  sleep_while_polled();
  sleeper_.join();
  EXPECT_TRUE(woke_.load());
}

TEST_F(ShmDoorbellTest, AFrameWithNobodyPollingWakesTheSleeper) {
  sleep_until_frame();
  push(1);
  sleeper_.join();
  EXPECT_TRUE(woke_.load());
}

TEST_F(ShmDoorbellTest, AFrameAfterPollsEndedWakesTheSleeperAfterAMoment) {
  // Polls began since the last sleep: the producer gives a poller a moment
  // to come back, and wakes the sleeper when none does.
  consumer_->begin_poll();
  EXPECT_FALSE(consumer_->end_poll());
  sleep_until_frame();
  push(1);
  sleeper_.join();
  EXPECT_TRUE(woke_.load());
}

TEST_F(ShmDoorbellTest, AFrameIsNeverLeftUnreportedWhenAPollerComesBackDuringTheMoment) {
  consumer_->begin_poll();
  EXPECT_FALSE(consumer_->end_poll());
  sleep_until_frame();
  ASSERT_TRUE(consumer_->consumer_asleep());
  // The producer waits for a poller in its push; one arrives meanwhile.
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    push(1);
    pushed.store(true);
  });
  consumer_->begin_poll();
  producer.join();
  std::this_thread::sleep_for(20ms);
  // Either the poller came in time (the sleeper sleeps on and the poller
  // answers for the frame) or the moment had passed (the sleeper woke):
  // never both asleep and unreported.
  const bool reported = consumer_->end_poll();
  EXPECT_TRUE(woke_.load() || reported);
}

// An application thread blocked for completion events sleeps on the word
// begin_application_sleep() gives it, as the provider's ibv_get_cq_event does.
class ApplicationSleep : public ShmDoorbellTest {
 protected:
  void TearDown() override {
    if (application_.joinable()) {
      if (word_) {
        word_->store(0);
        futex_wake_shared(*word_, 1);
      }
      application_.join();
    }
    ShmDoorbellTest::TearDown();
  }
  void application_sleeps() {
    word_ = consumer_->begin_application_sleep();
    ASSERT_NE(word_, nullptr);
    ASSERT_EQ(word_->load(), 1u);
    application_ = std::thread([this] {
      futex_wait_shared(*word_, 1, kAnHourNs);
      application_woke_.store(true);
    });
  }

  std::atomic<uint32_t>* word_ = nullptr;
  std::thread application_;
  std::atomic<bool> application_woke_{false};
};

TEST_F(ApplicationSleep, AFrameWakesTheApplicationThreadInsteadOfTheSleeper) {
  sleep_until_frame();
  application_sleeps();
  push(1);
  application_.join();
  EXPECT_TRUE(application_woke_.load());
  EXPECT_TRUE(consumer_->end_application_sleep()) << "rung: the thread serves the frame";
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(woke_.load()) << "the progress thread's sleep goes on";
  EXPECT_TRUE(consumer_->has_frame());
}

TEST_F(ApplicationSleep, OnlyOneApplicationThreadSleepsSoAtATime) {
  application_sleeps();
  EXPECT_EQ(consumer_->begin_application_sleep(), nullptr);
  push(1);
  application_.join();
  EXPECT_TRUE(consumer_->end_application_sleep());
  EXPECT_NE(consumer_->begin_application_sleep(), nullptr) << "free again after the end";
  EXPECT_TRUE(consumer_->end_application_sleep()) << "the frame is still there";
}

TEST_F(ApplicationSleep, AFrameAlreadyWaitingRingsAtOnce) {
  push(1);
  std::atomic<uint32_t>* word = consumer_->begin_application_sleep();
  ASSERT_NE(word, nullptr);
  EXPECT_EQ(word->load(), 0u) << "a sleep on it would end at once";
  EXPECT_TRUE(consumer_->end_application_sleep());
}

TEST_F(ApplicationSleep, AThreadThatLeavesUnrungLeavesLaterFramesToTheSleeper) {
  ASSERT_NE(consumer_->begin_application_sleep(), nullptr);
  EXPECT_FALSE(consumer_->end_application_sleep()) << "nothing came";
  sleep_until_frame();
  push(1);
  sleeper_.join();
  EXPECT_TRUE(woke_.load());
}

TEST_F(ApplicationSleep, AScribbledWordIsClearedWhenTheSleeperSleepsAndCounted) {
  // Another process writes the word with no application thread asleep on
  // it: producers would ring no one. The owner's sleeper repairs it.
  auto* header = reinterpret_cast<MailboxHeader*>(
      const_cast<uint8_t*>(producer_->mapped_segment().data()));
  header->application_sleeping.store(1);
  const uint64_t violations = consumer_->protocol_violations();
  sleep_until_frame();
  EXPECT_EQ(header->application_sleeping.load(), 0u);
  EXPECT_EQ(consumer_->protocol_violations(), violations + 1);
  push(1);
  sleeper_.join();
  EXPECT_TRUE(woke_.load()) << "the frame woke the sleeper";
}

}  // namespace
}  // namespace softverbs
