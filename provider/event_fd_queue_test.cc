#include "provider/event_fd_queue.h"

#include <poll.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace softverbs::provider {
namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

class EventFdQueueTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(queue_.open(), 0); }
  EventFdQueue<int> queue_;
};

TEST_F(EventFdQueueTest, ReadableExactlyWhileItHoldsSomething) {
  EXPECT_FALSE(readable(queue_.fd()));
  ASSERT_TRUE(queue_.push(1));
  ASSERT_TRUE(queue_.push(2));
  EXPECT_TRUE(readable(queue_.fd()));
  int out = 0;
  ASSERT_EQ(queue_.pop(out, [](int) {}), 0);
  EXPECT_EQ(out, 1);
  EXPECT_TRUE(readable(queue_.fd()));
  ASSERT_EQ(queue_.pop(out, [](int) {}), 0);
  EXPECT_EQ(out, 2);
  EXPECT_FALSE(readable(queue_.fd()));
}

TEST_F(EventFdQueueTest, ASleeperTakesWhatItPushedWhileAsleep) {
  // The sleep stands for serving the intake: the event it produces is
  // pushed by the very thread that waits for it.
  bool readable_after_own_push = true;
  int out = 0;
  const Errno err = queue_.pop(
      out, [](int) {},
      [&](std::atomic<uint32_t>&, uint32_t) -> Errno {
        EXPECT_TRUE(queue_.push(7));
        readable_after_own_push = readable(queue_.fd());
        return 0;
      });
  ASSERT_EQ(err, 0);
  EXPECT_EQ(out, 7);
  // The eventfd was never written: the sleeper took the event at once.
  EXPECT_FALSE(readable_after_own_push);
  EXPECT_FALSE(readable(queue_.fd()));
}

TEST_F(EventFdQueueTest, WhatASleeperPushedStaysReadableWhenASignalEndsItsWait) {
  int out = 0;
  const Errno err = queue_.pop(
      out, [](int) {},
      [&](std::atomic<uint32_t>&, uint32_t) -> Errno {
        EXPECT_TRUE(queue_.push(9));
        return EINTR;
      });
  EXPECT_EQ(err, EINTR);
  EXPECT_TRUE(readable(queue_.fd()));
  ASSERT_EQ(queue_.pop(out, [](int) {}), 0);
  EXPECT_EQ(out, 9);
  EXPECT_FALSE(readable(queue_.fd()));
}

TEST_F(EventFdQueueTest, AnotherThreadsPushWakesABlockedPopAndMarksTheFd) {
  std::atomic<bool> popped{false};
  int out = 0;
  std::thread waiter([&] {
    EXPECT_EQ(queue_.pop(out, [](int) {}), 0);
    popped = true;
  });
  // Whether or not the waiter is asleep yet, the push must reach it.
  ASSERT_TRUE(queue_.push(5));
  waiter.join();
  EXPECT_TRUE(popped);
  EXPECT_EQ(out, 5);
  EXPECT_FALSE(readable(queue_.fd()));
}

TEST_F(EventFdQueueTest, APushBySomeoneElseWhileAnotherSleepsIsSignalled) {
  // A sleeper of one queue pushing to another is an ordinary push there.
  EventFdQueue<int> other;
  ASSERT_EQ(other.open(), 0);
  int out = 0;
  bool other_readable = false;
  const Errno err = queue_.pop(
      out, [](int) {},
      [&](std::atomic<uint32_t>&, uint32_t) -> Errno {
        EXPECT_TRUE(other.push(3));
        other_readable = readable(other.fd());
        EXPECT_TRUE(queue_.push(4));
        return 0;
      });
  ASSERT_EQ(err, 0);
  EXPECT_EQ(out, 4);
  EXPECT_TRUE(other_readable);
}

TEST_F(EventFdQueueTest, RemovingTheLastItemClearsTheFd) {
  ASSERT_TRUE(queue_.push(1));
  ASSERT_TRUE(queue_.push(2));
  queue_.remove_if([](int item) { return item == 1 || item == 2; });
  EXPECT_FALSE(readable(queue_.fd()));
}

}  // namespace
}  // namespace softverbs::provider
