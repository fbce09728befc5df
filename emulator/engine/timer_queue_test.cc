#include "emulator/engine/timer_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace softverbs {
namespace {

TEST(TimerQueue, DueKeysComeOutSoonestFirstAndOnlyWhenDue) {
  TimerQueue timers;
  EXPECT_EQ(timers.next_deadline_ns(), UINT64_MAX);
  EXPECT_TRUE(timers.schedule(7, 300));
  EXPECT_TRUE(timers.schedule(8, 100));    // sooner: a sleeper must wake
  EXPECT_FALSE(timers.schedule(9, 200));   // not the soonest
  EXPECT_EQ(timers.next_deadline_ns(), 100u);
  std::vector<TimerQueue::Key> due;
  timers.take_due(99, due);
  EXPECT_TRUE(due.empty());
  timers.take_due(200, due);
  EXPECT_EQ(due, (std::vector<TimerQueue::Key>{8, 9}));
  EXPECT_EQ(timers.next_deadline_ns(), 300u);
  due.clear();
  timers.take_due(1000, due);
  EXPECT_EQ(due, (std::vector<TimerQueue::Key>{7}));
  EXPECT_EQ(timers.next_deadline_ns(), UINT64_MAX);
  EXPECT_EQ(timers.size(), 0u);
}

}  // namespace
}  // namespace softverbs
