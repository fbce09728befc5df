// A reader-writer lock whose readers do not share a cache line: readers
// take one of several shards (always the same one for a thread), a writer
// takes them all. For tables that every operation reads and almost nothing
// changes (the MRs of an HCA): one std::shared_mutex there puts every
// reader's atomic increment on the same line, and threads posting to
// different QPs then serialize on it. A writer pays a lock per shard.
//
// Each shard prefers its writer: once a writer waits for a shard, new
// readers of it wait behind the writer. With readers preferred (what
// std::shared_mutex is on glibc), two threads of one shard whose reads
// overlap kept a registration out for milliseconds on two cores, and for
// as long as their reads kept overlapping.
//
// Meets SharedMutex, so std::shared_lock and std::unique_lock take it. A
// thread must not take it shared twice: a waiting writer would hold the
// second read, and the thread, back.
#pragma once

#include <pthread.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <shared_mutex>  // std::shared_lock, how users take it shared

#include "emulator/sync/thread_shard.h"

namespace softverbs {

// A pthread read-write lock of the writer-preferring kind.
class WriterPreferringRwlock {
 public:
  WriterPreferringRwlock() {
    pthread_rwlockattr_t attributes;
    pthread_rwlockattr_init(&attributes);
    pthread_rwlockattr_setkind_np(&attributes, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attributes);
    pthread_rwlockattr_destroy(&attributes);
  }
  ~WriterPreferringRwlock() { pthread_rwlock_destroy(&lock_); }
  WriterPreferringRwlock(const WriterPreferringRwlock&) = delete;
  WriterPreferringRwlock& operator=(const WriterPreferringRwlock&) = delete;

  void lock_shared() { pthread_rwlock_rdlock(&lock_); }
  bool try_lock_shared() { return pthread_rwlock_tryrdlock(&lock_) == 0; }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }
  void lock() { pthread_rwlock_wrlock(&lock_); }
  bool try_lock() { return pthread_rwlock_trywrlock(&lock_) == 0; }
  void unlock() { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

class ReaderShardedMutex {
 public:
  void lock_shared() {
    note_shared_hold();
    shard().lock_shared();
  }
  bool try_lock_shared() {
    note_shared_hold();
    if (shard().try_lock_shared()) return true;
    note_shared_release();
    return false;
  }
  void unlock_shared() {
    shard().unlock_shared();
    note_shared_release();
  }

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
    WriterPreferringRwlock mutex;
  };

  WriterPreferringRwlock& shard() { return shards_[thread_shard()].mutex; }

  std::array<Shard, kShards> shards_;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Sanitizer builds: a second shared hold by one thread deadlocks as soon
  // as a writer comes between the two, which tests seldom arrange. Say so
  // at the second hold instead.
  static constexpr size_t kMostHeld = 8;
  struct Held {
    std::array<const ReaderShardedMutex*, kMostHeld> mutexes{};
    size_t count = 0;
  };
  static Held& held() {
    static thread_local Held h;
    return h;
  }
  void note_shared_hold() {
    Held& h = held();
    for (size_t i = 0; i < h.count; ++i)
      if (h.mutexes[i] == this) {
        std::fprintf(stderr, "softverbs: a ReaderShardedMutex taken shared twice by one thread\n");
        std::abort();
      }
    if (h.count < kMostHeld) h.mutexes[h.count++] = this;
  }
  void note_shared_release() {
    Held& h = held();
    for (size_t i = 0; i < h.count; ++i)
      if (h.mutexes[i] == this) {
        h.mutexes[i] = h.mutexes[--h.count];
        return;
      }
  }
#else
  void note_shared_hold() {}
  void note_shared_release() {}
#endif
};

}  // namespace softverbs
