// Readers of different threads hold the lock together; a writer waits for
// every one of them, whichever shard it took, and keeps them all out.
#include "emulator/reader_sharded_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace softverbs {
namespace {

TEST(ReaderShardedMutex, AWriterIsRefusedWhileAnyThreadReads) {
  ReaderShardedMutex mutex;
  // More readers than shards: some share one, the rest have their own.
  constexpr int kReaders = 20;
  std::atomic<int> holding{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      std::shared_lock lock(mutex);
      holding.fetch_add(1);
      while (!release.load()) std::this_thread::yield();
    });
  }
  while (holding.load() != kReaders) std::this_thread::yield();
  EXPECT_FALSE(mutex.try_lock());
  release.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_TRUE(mutex.try_lock());
  mutex.unlock();
}

TEST(ReaderShardedMutex, AWriterKeepsEveryReaderOut) {
  ReaderShardedMutex mutex;
  std::unique_lock writer(mutex);
  std::atomic<int> refused{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 20; ++i)
    readers.emplace_back([&] {
      if (!mutex.try_lock_shared()) refused.fetch_add(1);
      else mutex.unlock_shared();
    });
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(refused.load(), 20);
}

TEST(ReaderShardedMutex, ReadersSeeWhatWritersWrote) {
  ReaderShardedMutex mutex;
  uint64_t a = 0, b = 0;  // always equal under the lock
  std::atomic<bool> torn{false};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&] {
      while (!stop.load()) {
        std::shared_lock lock(mutex);
        if (a != b) torn.store(true);
      }
    });
  for (int i = 0; i < 20000; ++i) {
    std::unique_lock lock(mutex);
    ++a;
    ++b;
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(torn.load());
  EXPECT_EQ(a, 20000u);
}

}  // namespace
}  // namespace softverbs
