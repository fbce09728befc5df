// The door to the same-host shortcuts of one engine. Between QPs of one
// host a frame, a WRITE, a READ or a SEND may skip the packet path four ways:
//
//   local delivery    both QPs in this process: the frame is handed over
//                     by the sending thread, without the wire or an ICRC
//                     (local_delivery.h)
//   runs              the MTU segments of a SEND or WRITE as one frame
//                     whose payload the receiver pulls from the sender's
//                     memory (run_frame.h)
//   direct execution  a WRITE or READ executed by the initiator on the
//                     target's published QP and MR entries, with no packet
//                     and no target CPU (direct_execution.h)
//   placed SENDs      a one-packet SEND accepted by the initiator on the
//                     target's QP entry and pushed into its ring, with no
//                     ACK (placed_send.h)
//
// Each has its switch (SOFTVERBS_LOCAL_DELIVERY, SOFTVERBS_RUNS,
// SOFTVERBS_DIRECT, SOFTVERBS_PLACED_SENDS, =0 turns it off; placed SENDs
// also go with direct execution), and every one is off while a fault
// plan or a capture must see every packet. Which way one WQE of a QP takes
// is its SameHostRoute's choice (same_host_route.h); this object says what
// the host allows. It also tells a QP's local ACK timer whether the peer
// had its turn (fair_timeout.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "emulator/wire/same_host_peers.h"
#include "emulator/wire/wire.h"

namespace softverbs {

class DeferredSharing;
class TargetTable;
namespace fault {
class FaultInjector;
}

class SameHost {
 public:
  struct Settings {
    // Frames between QPs of this process skip the wire (unless
    // SOFTVERBS_LOCAL_DELIVERY=0).
    bool local_delivery = false;
    // Local ACK timeouts wait for a peer of this host that has not run
    // (fair_timeout.h; SOFTVERBS_TIMERS=wall: false).
    bool fair_timers = true;
  };
  // `peers`: the part of the wire that reaches this host's processes (null:
  // none, the runs and direct execution never happen); it must outlive this
  // object, as must `faults` (null: no fault injector).
  SameHost(SameHostPeers* peers, const fault::FaultInjector* faults, Settings settings);
  ~SameHost();
  SameHost(const SameHost&) = delete;
  SameHost& operator=(const SameHost&) = delete;

  // Local delivery: whether the QP at `dst` is in this process, told
  // without a lock by a bit per QPN, set and cleared with the engine's QP
  // table.
  bool delivers_locally(const WireAddress& dst) const;
  void mark_local_qpn(uint32_t device_index, uint32_t qpn, bool here);

  // Runs: whether one may go to `dst` now (accepted there, not refused
  // here, no fault plan in force). refuse_runs(): the kernel refused a
  // pull here, so peers stop sending them, for good.
  bool runs_allowed(const WireAddress& dst);
  void refuse_runs();

  // Direct execution: this process's target table; whether an initiator
  // of this process may execute at all; the target area of the process
  // serving `dst` (empty: packets). refuse_direct(): the kernel refused
  // cross-memory attach, for good.
  TargetTable& target_table() { return *target_table_; }
  // Large MRs' pages, shared once a peer reaches for them (deferred_sharing.h);
  // its thread ended, before the target area goes.
  DeferredSharing& deferred_sharing() { return *deferred_sharing_; }
  void stop_deferred_sharing();
  bool direct_possible() const;
  PeerTargetArea direct_target(const WireAddress& dst);
  // A QP was connected to `dst`: maps the shared memory of the process
  // serving it (its ring and target area) now, so the first WQE does not
  // pay for it. A first access to each page of a fresh mapping costs
  // microseconds where the hypervisor shadows page tables: milliseconds
  // for a ring, which `ib_write_bw` used to count in its run.
  void open_route_to(const WireAddress& dst);
  void refuse_direct() { direct_refused_.store(true, std::memory_order_relaxed); }

  // Placed SENDs (placed_send.h): whether an initiator of this process may
  // place them (SOFTVERBS_PLACED_SENDS=0: never; off with direct
  // execution), and the push of one into the ring beside `target`.
  // A target's own setting says whether its QPs take them (takes_placed_sends).
  bool placed_sends_possible() const;
  bool takes_placed_sends() const { return placed_sends_enabled_ && direct_enabled_; }
  PeerTargetArea placed_target(const WireAddress& dst);
  bool push_placed(const WireAddress& dst, const PeerTargetArea& target,
                   std::span<const uint8_t> frame) {
    return peers_ && peers_->push_now(dst, target, frame);
  }

  // Fair timers (fair_timeout.h): whether they are on; the backlog of the
  // process serving `dst` (nullopt: off, another host, no such live
  // process); the end of a pass of this process's intake.
  bool fair_timers() const { return fair_timers_; }
  std::optional<IntakeBacklog> intake_backlog(const WireAddress& dst);
  void intake_pass_ended() {
    if (peers_) peers_->intake_pass_ended();
  }
  // This process's ring: taken to its last claimed slot (the intake held);
  // frames lost to a broken ring so far.
  bool own_ring_drained() { return !peers_ || peers_->own_ring_drained(); }
  uint64_t ring_damage() const { return peers_ ? peers_->ring_damage() : 0; }

  // A fault plan or a capture came or went: what this process accepts from
  // peers follows.
  void fault_plan_changed();
  // The process ends: initiators stop executing here.
  void stop_accepting();

 private:
  bool faults_need_every_packet() const;

  SameHostPeers* peers_;
  const fault::FaultInjector* faults_;
  bool runs_enabled_ = true;                    // SOFTVERBS_RUNS
  std::atomic<bool> runs_refused_here_{false};  // a pull was refused: for good
  bool direct_enabled_ = true;                  // SOFTVERBS_DIRECT
  bool placed_sends_enabled_ = true;            // SOFTVERBS_PLACED_SENDS
  std::atomic<bool> direct_refused_{false};     // cross-memory attach refused: for good
  bool fair_timers_ = true;
  std::unique_ptr<TargetTable> target_table_;
  std::unique_ptr<DeferredSharing> deferred_sharing_;  // after the table: ends first
  // One bit per QPN below kQpnTableSize, per device (calloc'd: pages are
  // touched only where QPNs are); null when local delivery is off.
  struct FreeDeleter {
    void operator()(uint64_t* p) const;
  };
  std::unique_ptr<uint64_t[], FreeDeleter> local_qpns_;
};

}  // namespace softverbs
