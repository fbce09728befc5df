// Local ACK timeouts fair to a peer that never ran (fair_timeout.h).
#include "emulator/same_host/fair_timeout.h"

#include <algorithm>
#include <string_view>

#include "emulator/same_host/same_host.h"

namespace softverbs {

bool parse_timer_mode(const char* value, bool& fair, std::string& error) {
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "fair") {
    fair = true;
    return true;
  }
  if (v == "wall") {
    fair = false;
    return true;
  }
  error = "SOFTVERBS_TIMERS=" + std::string(v) +
          ": expected 'fair' (a local ACK timeout waits for a peer of this host that has "
          "not run yet) or 'wall' (every expiry counts)";
  return false;
}

bool FairTimeout::behind(const std::optional<IntakeBacklog>& backlog, uint64_t& mark) {
  if (!backlog) {
    mark = 0;
    return false;
  }
  const IntakeBacklog& b = *backlog;
  // Counters no correct process writes (served ahead of claimed, more
  // waiting than a ring holds) say nothing: the timeout counts.
  if (b.served > b.claimed || b.claimed - b.served > b.capacity) {
    mark = 0;
    return false;
  }
  if (mark != 0) {
    if (b.served < mark && mark - b.served <= b.capacity) return true;  // still on it
    mark = 0;  // served past everything that was there at the first look
    return false;
  }
  if (b.served == b.claimed) return false;  // nothing waits: it had its turn
  mark = b.claimed;
  return true;
}

bool FairTimeout::wait_again(SameHost& same_host, const WireAddress& self,
                             const WireAddress& peer, uint64_t now_ns, uint64_t period_ns) {
  if (!same_host.fair_timers()) return false;
  // Both rings are looked at, so both marks move on.
  const bool peer_behind = behind(same_host.intake_backlog(peer), peer_mark_);
  const bool own_behind = behind(same_host.intake_backlog(self), own_mark_);
  if (!peer_behind && !own_behind) return false;
  if (waiting_since_ns_ == 0) waiting_since_ns_ = now_ns;
  const uint64_t patience_ns = std::max(kPatience * period_ns, kLeastPatienceNs);
  if (now_ns - waiting_since_ns_ < patience_ns) return true;
  // Waited long enough: the expiries count again, until progress.
  peer_mark_ = own_mark_ = 0;
  return false;
}

}  // namespace softverbs
