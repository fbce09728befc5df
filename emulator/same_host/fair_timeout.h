// Local ACK timeouts that are fair to a peer that never ran.
//
// On an HCA the responder answers whatever its host's CPUs do. Here a peer
// process of this host answers only when the kernel schedules it, so on a
// loaded machine a local ACK timeout can expire while the request still
// waits, unserved, in the peer's ring; counted, such timeouts spend
// retry_cnt on nothing lost and end in IBV_WC_RETRY_EXC_ERR. So, between
// processes of one host, a timeout that expires while the peer (or this
// process, whose ring may hold the ACK) has not yet served everything that
// was in its ring is re-armed instead, without spending a retry, and
// counted as `retransmit_timeouts_waited`. The next expiry counts unless
// the ring is still not served up to where it was claimed at the first:
// a request that reached the ring has been served by then, so a timeout
// that still fires is a loss. What the rule never hides:
//   - a packet a fault plan dropped, or one the wire lost (it never entered
//     the ring, which its owner keeps serving);
//   - a peer that died (the registry says so) or a port that is down
//     (packets dropped before the ring);
//   - a peer on another host: the UDP wire's timers stay wall-clock.
// A peer process that is stopped (SIGSTOP, a debugger) is waited for, as
// an HCA would keep answering for it, but not for ever: after kPatience
// periods (at least kLeastPatienceNs) of waiting the expiries count again,
// so a peer that never runs, or counters a buggy process scribbled over,
// end in IBV_WC_RETRY_EXC_ERR as a dead peer does. SOFTVERBS_TIMERS=wall
// turns the rule off: every expiry counts, as before.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "emulator/wire/same_host_peers.h"

namespace softverbs {

class SameHost;

// SOFTVERBS_TIMERS: "fair" (or unset) or "wall". false + a message otherwise.
bool parse_timer_mode(const char* value, bool& fair, std::string& error);

class FairTimeout {
 public:
  static constexpr uint64_t kPatience = 64;                     // timeout periods
  static constexpr uint64_t kLeastPatienceNs = 1'000'000'000;  // 1 s

  // At the expiry, at `now_ns`, of the local ACK timer (of `period_ns`) of
  // the QP at `self`, connected to `peer`: true when the expiry should wait
  // again without counting.
  bool wait_again(SameHost& same_host, const WireAddress& self, const WireAddress& peer,
                  uint64_t now_ns, uint64_t period_ns);
  // An acknowledgement moved the QP on: start over.
  void reset() {
    peer_mark_ = own_mark_ = 0;
    waiting_since_ns_ = 0;
  }

 private:
  // One ring: true while it has not been served up to `mark` (set at the
  // first expiry that found it behind; 0: none).
  static bool behind(const std::optional<IntakeBacklog>& backlog, uint64_t& mark);

  uint64_t peer_mark_ = 0;
  uint64_t own_mark_ = 0;
  uint64_t waiting_since_ns_ = 0;  // the first wait since progress; 0: none
};

}  // namespace softverbs
