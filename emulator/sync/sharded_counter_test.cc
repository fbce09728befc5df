#include "emulator/sync/sharded_counter.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace softverbs {
namespace {

TEST(ShardedCounter, SumsWhatEveryThreadAdded) {
  ShardedCounter counter;
  EXPECT_EQ(counter.load(), 0u);
  // More threads than shards: some share one, and nothing is lost.
  constexpr int kThreads = kThreadShards + 4;
  constexpr uint64_t kAdds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&counter, t] {
      for (uint64_t i = 0; i < kAdds; ++i) counter.add(t % 2 ? 1 : 2);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter.load(), kAdds * (kThreads / 2) * 3);
}

TEST(ShardedCounter, EachShardHasACacheLineOfItsOwn) {
  EXPECT_GE(sizeof(ShardedCounter), kThreadShards * 64);
}

}  // namespace
}  // namespace softverbs
