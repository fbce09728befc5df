// A reader-writer lock whose readers do not share a cache line: readers
// take one of several shards (always the same one for a thread), a writer
// takes them all. For tables that every operation reads and almost nothing
// changes (the MRs of an HCA): one std::shared_mutex there puts every
// reader's atomic increment on the same line, and threads posting to
// different QPs then serialize on it. A writer pays a lock per shard.
//
// Meets SharedMutex, so std::shared_lock and std::unique_lock take it. Like
// std::shared_mutex, a thread must not take it shared twice.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <shared_mutex>

#include "emulator/thread_shard.h"

namespace softverbs {

class ReaderShardedMutex {
 public:
  void lock_shared() { shard().lock_shared(); }
  bool try_lock_shared() { return shard().try_lock_shared(); }
  void unlock_shared() { shard().unlock_shared(); }

  void lock() {
    for (Shard& s : shards_) s.mutex.lock();
  }
  bool try_lock() {
    for (size_t i = 0; i < kShards; ++i) {
      if (shards_[i].mutex.try_lock()) continue;
      while (i-- > 0) shards_[i].mutex.unlock();
      return false;
    }
    return true;
  }
  void unlock() {
    for (Shard& s : shards_) s.mutex.unlock();
  }

 private:
  static constexpr size_t kShards = kThreadShards;
  struct alignas(64) Shard {
    std::shared_mutex mutex;
  };

  std::shared_mutex& shard() { return shards_[thread_shard()].mutex; }

  std::array<Shard, kShards> shards_;
};

}  // namespace softverbs
