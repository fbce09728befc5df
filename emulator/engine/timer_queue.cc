#include "emulator/engine/timer_queue.h"

namespace softverbs {

bool TimerQueue::schedule(Key key, uint64_t deadline_ns) {
  std::lock_guard lock(mutex_);
  heap_.push(Entry{deadline_ns, key});
  const bool soonest = heap_.top().key == key && heap_.top().deadline_ns == deadline_ns;
  publish_next_locked();
  return soonest;
}

void TimerQueue::take_due(uint64_t now_ns, std::vector<Key>& due) {
  if (next_deadline_ns() > now_ns) return;
  std::lock_guard lock(mutex_);
  while (!heap_.empty() && heap_.top().deadline_ns <= now_ns) {
    due.push_back(heap_.top().key);
    heap_.pop();
  }
  publish_next_locked();
}

size_t TimerQueue::size() const {
  std::lock_guard lock(mutex_);
  return heap_.size();
}

void TimerQueue::publish_next_locked() {
  next_.store(heap_.empty() ? UINT64_MAX : heap_.top().deadline_ns, std::memory_order_seq_cst);
}

}  // namespace softverbs
