// The standing poll announcement (standing_poll.h): announced once for
// any number of polls, withdrawn once, lapsed only after a lease without
// a poll.
#include "emulator/engine/standing_poll.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace softverbs {
namespace {

// Counts what the announcement says to the doorbell, which keeps at most
// one standing announcement and withdraws it once (as ShmMailbox does).
class CountingDoorbell final : public Doorbell {
 public:
  void wait(uint64_t) override {}
  void wake() override {}
  void begin_standing_poll() override {
    if (!standing.exchange(true)) ++begun;
  }
  bool end_standing_poll() override {
    if (!standing.exchange(false)) return false;
    ++ended;
    return frame_left_unseen;
  }
  void pause_application_poll(bool paused) override { pauses += paused ? 1 : -1; }
  std::atomic<bool> standing{false};
  std::atomic<int> begun{0};
  std::atomic<int> ended{0};
  std::atomic<int> pauses{0};  // paused minus resumed
  bool frame_left_unseen = false;
};

TEST(StandingPoll, ManyPollsAnnounceOnceAndOneWithdrawalEndsIt) {
  CountingDoorbell doorbell;
  StandingPoll standing(doorbell);
  EXPECT_FALSE(standing.standing());
  for (int i = 0; i < 1000; ++i) standing.poll();
  EXPECT_TRUE(standing.standing());
  EXPECT_EQ(doorbell.begun, 1) << "a poll of a standing announcement announced again";
  EXPECT_EQ(doorbell.ended, 0);

  doorbell.frame_left_unseen = true;
  EXPECT_TRUE(standing.withdraw()) << "the doorbell's word that a frame waits was lost";
  EXPECT_FALSE(standing.standing());
  EXPECT_FALSE(standing.withdraw()) << "withdrawn twice";
  EXPECT_EQ(doorbell.ended, 1);

  standing.poll();
  EXPECT_EQ(doorbell.begun, 2) << "a poll after the withdrawal did not announce";
}

TEST(StandingPoll, APollThatReturnedCompletionsPausesItUntilTheNextPoll) {
  CountingDoorbell doorbell;
  StandingPoll standing(doorbell);
  standing.returned_completions();
  EXPECT_EQ(doorbell.pauses, 0) << "paused with nothing standing";
  standing.poll();
  standing.returned_completions();
  standing.returned_completions();
  EXPECT_EQ(doorbell.pauses, 1) << "not paused once, after completions";
  standing.poll();
  EXPECT_EQ(doorbell.pauses, 0) << "the next poll did not resume it";
  standing.returned_completions();
  standing.withdraw();
  EXPECT_EQ(doorbell.pauses, 0) << "withdrawn, it stays paused";
  EXPECT_EQ(doorbell.begun, 1);
}

TEST(StandingPoll, ThreadsPollingAndWithdrawingLeaveTheDoorbellBalanced) {
  CountingDoorbell doorbell;
  StandingPoll standing(doorbell);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20'000; ++i) {
        standing.poll();
        if ((i + t) % 5 == 0) standing.returned_completions();
        if ((i + t) % 7 == 0) standing.withdraw();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  standing.withdraw();
  EXPECT_FALSE(doorbell.standing) << "an announcement outlived the last withdrawal";
  EXPECT_EQ(doorbell.begun, doorbell.ended) << "announcements and withdrawals do not pair";
  EXPECT_GT(doorbell.begun, 1);
}

TEST(StandingPoll, LapsesOnlyAfterALeaseWithoutAPoll) {
  CountingDoorbell doorbell;
  StandingPoll standing(doorbell);
  constexpr uint64_t kLease = StandingPoll::kLeaseNs;
  EXPECT_FALSE(standing.lapsed(kLease)) << "nothing stands";
  standing.poll();
  uint64_t now = 10 * kLease;
  EXPECT_FALSE(standing.lapsed(now)) << "the first look only notes the polls";
  // Polls keep coming: never lapsed, however long.
  for (int i = 0; i < 5; ++i) {
    now += 2 * kLease;
    standing.poll();
    EXPECT_FALSE(standing.lapsed(now)) << "lapsed while polls came";
  }
  EXPECT_FALSE(standing.lapsed(now + kLease - 1)) << "lapsed before the lease was over";
  EXPECT_TRUE(standing.lapsed(now + kLease));
  standing.withdraw();
  EXPECT_FALSE(standing.lapsed(now + 5 * kLease)) << "lapsed with nothing standing";

  // Announced again, it is counted afresh.
  standing.poll();
  EXPECT_FALSE(standing.lapsed(now + 6 * kLease));
  EXPECT_TRUE(standing.lapsed(now + 7 * kLease));
}

TEST(StandingPoll, LooksLessOftenWhilePollsGoOnAndAfreshOnceWithdrawn) {
  CountingDoorbell doorbell;
  StandingPoll standing(doorbell);
  constexpr uint64_t kLease = StandingPoll::kLeaseNs;
  standing.poll();
  uint64_t now = kLease;
  EXPECT_FALSE(standing.lapsed(now));
  EXPECT_EQ(standing.look_interval_ns(), kLease) << "the first look is not a lease away";
  // Each look that finds polls since the last doubles the wait, to the cap.
  uint64_t expected = kLease;
  for (int look = 0; look < 6; ++look) {
    standing.poll();
    now += standing.look_interval_ns();
    EXPECT_FALSE(standing.lapsed(now));
    expected = std::min(2 * expected, StandingPoll::kLongestLookNs);
    EXPECT_EQ(standing.look_interval_ns(), expected) << "look " << look;
  }
  EXPECT_EQ(standing.look_interval_ns(), StandingPoll::kLongestLookNs);
  // No poll for one interval: lapsed, and the next announcement is looked
  // at a lease after it again.
  now += standing.look_interval_ns();
  EXPECT_TRUE(standing.lapsed(now));
  standing.withdraw();
  EXPECT_EQ(standing.look_interval_ns(), kLease);

  // Withdrawn by the program (a CQ armed) and announced again between two
  // looks: counted from the new announcement, not from the old polls.
  standing.poll();
  EXPECT_FALSE(standing.lapsed(now));
  standing.poll();
  now += kLease;
  EXPECT_FALSE(standing.lapsed(now));
  EXPECT_EQ(standing.look_interval_ns(), 2 * kLease);
  standing.withdraw();
  standing.poll();
  now += 2 * kLease;
  EXPECT_FALSE(standing.lapsed(now)) << "an announcement made since the last look lapsed at once";
  EXPECT_EQ(standing.look_interval_ns(), kLease);
  EXPECT_FALSE(standing.lapsed(now + kLease - 1));
  EXPECT_TRUE(standing.lapsed(now + kLease));
}

}  // namespace
}  // namespace softverbs
