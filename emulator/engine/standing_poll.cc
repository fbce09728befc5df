#include "emulator/engine/standing_poll.h"

#include <algorithm>

namespace softverbs {

// No lock: the doorbell keeps at most one standing announcement and
// withdraws it once (a second announcement or withdrawal is a no-op), so
// threads racing here can only leave it withdrawn while `standing_` says
// otherwise: senders then ring (slower, never stuck) until the next
// withdrawal and announcement.
void StandingPoll::stand() {
  doorbell_.begin_standing_poll();
  announcements_.fetch_add(1, std::memory_order_relaxed);
  standing_.store(true, std::memory_order_relaxed);
}

bool StandingPoll::withdraw() {
  if (!standing_.load(std::memory_order_relaxed) || !standing_.exchange(false)) return false;
  if (paused_.exchange(false)) doorbell_.pause_application_poll(false);
  return doorbell_.end_standing_poll();
}

bool StandingPoll::lapsed(uint64_t now_ns) {
  if (!standing()) return false;
  // Announced anew since the last look: looked at from the start again.
  if (const uint32_t announced = announcements_.load(std::memory_order_relaxed);
      announced != announcements_seen_) {
    announcements_seen_ = announced;
    beat_seen_ns_ = 0;
  }
  const uint32_t beat = beat_.load(std::memory_order_relaxed);
  if (beat != beat_seen_ || beat_seen_ns_ == 0) {
    // The polls go on: looked at less often, the longer they do.
    look_interval_ns_ =
        beat_seen_ns_ == 0 ? kLeaseNs : std::min(2 * look_interval_ns_, kLongestLookNs);
    beat_seen_ = beat;
    beat_seen_ns_ = now_ns;
    return false;
  }
  if (now_ns - beat_seen_ns_ < kLeaseNs) return false;
  beat_seen_ns_ = 0;  // counted afresh when it next stands
  look_interval_ns_ = kLeaseNs;
  return true;
}

}  // namespace softverbs
