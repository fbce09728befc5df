#include "emulator/engine/standing_poll.h"

namespace softverbs {

void StandingPoll::stand() {
  std::lock_guard lock(transitions_);
  if (standing_.load(std::memory_order_relaxed)) return;
  doorbell_.begin_standing_poll();
  standing_.store(true, std::memory_order_relaxed);
}

bool StandingPoll::withdraw() {
  if (!standing_.load(std::memory_order_relaxed)) return false;
  std::lock_guard lock(transitions_);
  if (!standing_.load(std::memory_order_relaxed)) return false;
  standing_.store(false, std::memory_order_relaxed);
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
