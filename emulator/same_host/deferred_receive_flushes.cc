#include "emulator/same_host/deferred_receive_flushes.h"

#include <algorithm>

namespace softverbs {

void DeferredReceiveFlushes::add(uint64_t key) {
  std::lock_guard lock(mutex_);
  deferrals_.push_back({key, passes_.load(std::memory_order_relaxed)});
  waiting_.store(true, std::memory_order_relaxed);
}

std::vector<uint64_t> DeferredReceiveFlushes::take_due() {
  std::vector<uint64_t> due;
  const uint64_t current = passes_.load(std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  // A deferral made during this pass may have come after the pass took
  // its SENDs from the ring: it waits for the next one.
  std::erase_if(deferrals_, [&](const Deferral& d) {
    if (d.pass >= current) return false;
    due.push_back(d.key);
    return true;
  });
  waiting_.store(!deferrals_.empty(), std::memory_order_relaxed);
  return due;
}

}  // namespace softverbs
