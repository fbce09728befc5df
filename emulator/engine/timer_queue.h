// The deadlines of QP timers (local ACK timeout, RNR wait), soonest first,
// so that finding what is due costs nothing per poll: one relaxed load of
// the soonest deadline.
//
// Entries name a QP by key, never by pointer, and are checked against the
// QP's own deadlines when they fire: an entry for a QP whose timer was
// cancelled, moved later or destroyed is stale and harmless. So cancelling
// costs nothing, and a QP re-queues itself only when its deadline moves
// earlier than the entry it already has (see Completer).
//
// Threads: schedule() from any thread (under a QP's lock: this lock is
// taken after it); take_due() by the progress step.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <queue>
#include <vector>

namespace softverbs {

class TimerQueue {
 public:
  using Key = uint64_t;

  // Asks for `key` to be looked at once `deadline_ns` has come. Returns true
  // when it is now the soonest deadline (a sleeper may have to wake early).
  bool schedule(Key key, uint64_t deadline_ns);

  // Appends the keys whose deadline is at or before `now_ns` to `due`.
  void take_due(uint64_t now_ns, std::vector<Key>& due);

  // The soonest deadline, UINT64_MAX when nothing is queued.
  // Sequentially consistent, with the store in schedule(): a sleeper that
  // publishes its wake-up time and then looks here cannot miss a deadline
  // whose scheduler looked at that wake-up time (Engine::schedule_timer).
  uint64_t next_deadline_ns() const { return next_.load(std::memory_order_seq_cst); }

  size_t size() const;

 private:
  struct Entry {
    uint64_t deadline_ns;
    Key key;
    bool operator>(const Entry& o) const { return deadline_ns > o.deadline_ns; }
  };
  void publish_next_locked();

  mutable std::mutex mutex_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  std::atomic<uint64_t> next_{UINT64_MAX};
};

}  // namespace softverbs
