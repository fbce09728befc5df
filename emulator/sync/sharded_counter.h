// A counter that every thread adds to on a cache line of its own, summed
// when read. For counts every frame moves (the engine's frames sent and
// received): one atomic there puts every thread's increment on the same
// line, and threads with QPs of their own then wait on each other for it.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "emulator/sync/thread_shard.h"

namespace softverbs {

class ShardedCounter {
 public:
  void add(uint64_t n = 1) {
    shards_[thread_shard()].value.fetch_add(n, std::memory_order_relaxed);
  }
  uint64_t load() const {
    uint64_t sum = 0;
    for (const Shard& s : shards_) sum += s.value.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  struct alignas(64) Shard {
    std::atomic<uint64_t> value{0};
  };
  std::array<Shard, kThreadShards> shards_;
};

}  // namespace softverbs
