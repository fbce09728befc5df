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
  static constexpr size_t kShards = 16;
  struct alignas(64) Shard {
    std::shared_mutex mutex;
  };

  // Threads are given shards in turn, so the first kShards threads each
  // have one of their own.
  // initial-exec: one load from the thread pointer, not a call into the
  // dynamic linker on every lock (this code runs in a shared library). The
  // index is 1 + the shard, 0 until the thread first asks.
  static size_t thread_shard() {
    static std::atomic<size_t> next{0};
    [[gnu::tls_model("initial-exec")]] static thread_local size_t mine = 0;
    if (mine == 0) mine = 1 + next.fetch_add(1, std::memory_order_relaxed) % kShards;
    return mine - 1;
  }
  std::shared_mutex& shard() { return shards_[thread_shard()].mutex; }

  std::array<Shard, kShards> shards_;
};

}  // namespace softverbs
