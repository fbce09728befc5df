// Which of kThreadShards a thread uses, for structures that give each thread
// a cache line of its own (reader_sharded_mutex.h, sharded_counter.h).
// Threads are given shards in turn, so the first kThreadShards threads each
// have one of their own.
#pragma once

#include <atomic>
#include <cstddef>

namespace softverbs {

inline constexpr size_t kThreadShards = 16;

inline size_t thread_shard() {
  static std::atomic<size_t> next{0};
  // initial-exec: one load from the thread pointer, not a call into the
  // dynamic linker on every use (this code runs in a shared library). The
  // index is 1 + the shard, 0 until the thread first asks.
  [[gnu::tls_model("initial-exec")]] static thread_local size_t mine = 0;
  if (mine == 0) mine = 1 + next.fetch_add(1, std::memory_order_relaxed) % kThreadShards;
  return mine - 1;
}

}  // namespace softverbs
