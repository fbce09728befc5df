// Readers of different threads hold the lock together; a writer waits for
// every one of them, whichever shard it took, keeps them all out, and is not
// kept waiting by readers that come after it.
#include "emulator/sync/reader_sharded_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "emulator/sync/thread_shard.h"

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

// A writer waiting for a shard keeps new readers of that shard out: with
// readers preferred, threads of one shard whose reads overlap would keep a
// registration waiting for as long as they overlap.
TEST(ReaderShardedMutex, AWaitingWriterGoesBeforeNewReadersOfItsShard) {
  ReaderShardedMutex mutex;
  std::atomic<int> reader_shard{-1};
  std::atomic<bool> release_reader{false};
  std::thread reader([&] {
    std::shared_lock lock(mutex);
    reader_shard.store(static_cast<int>(thread_shard()));
    while (!release_reader.load()) std::this_thread::yield();
  });
  while (reader_shard.load() < 0) std::this_thread::yield();

  std::atomic<bool> written{false};
  std::thread writer([&] {
    std::unique_lock lock(mutex);
    written.store(true);
  });
  // A thread of the reader's shard: threads are given shards in turn.
  bool refused = false;
  for (size_t attempt = 0; attempt < 4 * kThreadShards && !refused; ++attempt) {
    std::thread latecomer([&] {
      if (static_cast<int>(thread_shard()) != reader_shard.load()) return;
      // The writer may not be waiting yet: look until it is, for 10 s at most.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (std::chrono::steady_clock::now() < give_up) {
        if (!mutex.try_lock_shared()) {
          refused = true;
          return;
        }
        mutex.unlock_shared();
        std::this_thread::yield();
      }
    });
    latecomer.join();
  }
  EXPECT_TRUE(refused) << "a new reader went ahead of the waiting writer";
  EXPECT_FALSE(written.load());
  release_reader.store(true);
  reader.join();
  writer.join();
  EXPECT_TRUE(written.load());
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// Sanitizer builds stop a thread that takes the lock shared a second time,
// which deadlocks as soon as a writer waits between the two.
TEST(ReaderShardedMutexDeathTest, TakingItSharedTwiceStopsTheProgram) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ReaderShardedMutex mutex;
  EXPECT_DEATH(
      {
        std::shared_lock first(mutex);
        std::shared_lock second(mutex);
      },
      "taken shared twice");
}
#endif

}  // namespace
}  // namespace softverbs
