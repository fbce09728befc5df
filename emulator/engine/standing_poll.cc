#include "emulator/engine/standing_poll.h"

namespace softverbs {

// No lock: the doorbell keeps at most one standing announcement and
// withdraws it once (a second announcement or withdrawal is a no-op), so
// threads racing here can only leave it withdrawn while `standing_` says
// otherwise: senders then ring (slower, never stuck) until the next
// withdrawal and announcement.
void StandingPoll::stand() {
  doorbell_.begin_standing_poll();
  standing_.store(true, std::memory_order_relaxed);
}

bool StandingPoll::withdraw() {
  if (!standing_.load(std::memory_order_relaxed) || !standing_.exchange(false)) return false;
  if (paused_.exchange(false)) doorbell_.pause_application_poll(false);
  return doorbell_.end_standing_poll();
}

bool StandingPoll::lapsed(uint64_t now_ns) {
  if (!standing()) return false;
  const uint32_t beat = beat_.load(std::memory_order_relaxed);
  if (beat != beat_seen_ || beat_seen_ns_ == 0) {
    beat_seen_ = beat;
    beat_seen_ns_ = now_ns;
    return false;
  }
  if (now_ns - beat_seen_ns_ < kLeaseNs) return false;
  beat_seen_ns_ = 0;  // counted afresh when it next stands
  return true;
}

}  // namespace softverbs
