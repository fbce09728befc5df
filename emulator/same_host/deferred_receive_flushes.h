// QPs in ERR whose receive queues wait to be flushed until the SENDs placed
// on them before ERR are taken (placed_send.h). Such a SEND sits in this
// process's ring, ahead of anything its intake takes later, so a pass of
// intake that began after the deferral and finds the ring empty has taken
// every one that will ever come (a frame spoiled by a scribbling process
// never does): each QP deferred before that pass is flushed then, at the
// latest. Passes are counted by the intake, under its lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace softverbs {

class DeferredReceiveFlushes {
 public:
  // QP `key` (its timer key) deferred its flush; any thread.
  void add(uint64_t key);
  // The intake begins a pass.
  void pass_begins() { passes_.fetch_add(1, std::memory_order_relaxed); }
  bool any() const { return waiting_.load(std::memory_order_relaxed); }
  // The keys deferred before the current pass began, removed from the set;
  // call at the pass's end, when it found the ring empty.
  std::vector<uint64_t> take_due();

 private:
  struct Deferral {
    uint64_t key;
    uint64_t pass;  // passes begun when it was deferred
  };
  std::atomic<uint64_t> passes_{0};
  std::atomic<bool> waiting_{false};
  std::mutex mutex_;  // a leaf
  std::vector<Deferral> deferrals_;
};

}  // namespace softverbs
