// The engine of one process: the wire, the clock, the table of local QPs,
// the timer queue, packet intake and the progress thread.
//
// Threads and locks (docs/architecture.md has the full table):
//  - Transport state lives in QPs and CQs, each with its own lock, so
//    threads using different QPs and CQs do not serialize.
//  - Intake (this engine's `intake_mutex_`) serves what the wire received
//    and the timers that are due, one thread at a time: whoever calls
//    progress() first; others find it taken and go on (try-lock). It also
//    guards the QP table, so a QP removed under it is reached by no packet
//    or timer afterwards.
//  - Lock order: intake -> QP table -> QP -> CQ; the timer queue, the MR table, the
//    wire's own locks and the event sinks are taken last and hold nothing.
//  - A busy-polling application drives progress itself (Cq::poll calls
//    progress()), so no thread hop sits in its fast path. The progress thread
//    serves what arrives while the application is not calling in (one-sided
//    operations on a target that polls memory, ACKs, timers): after activity
//    it spins for a short while (on machines with cores to spare), then
//    sleeps on the wire's doorbell. An application thread that polls says so
//    on the wire, and peers skip the doorbell meanwhile: the progress thread
//    of a process whose application polls stays asleep.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "emulator/engine/clock.h"
#include "emulator/engine/multicast_directory.h"
#include "emulator/engine/standing_poll.h"
#include "emulator/engine/timer_queue.h"
#include "emulator/host/cm_port_directory.h"
#include "emulator/host/device_config.h"
#include "emulator/objects/object_quota.h"
#include "emulator/packet/codec.h"
#include "emulator/same_host/deferred_receive_flushes.h"
#include "emulator/same_host/same_host.h"
#include "emulator/sync/reader_sharded_mutex.h"
#include "emulator/sync/sharded_counter.h"
#include "emulator/types.h"
#include "emulator/wire/doorbell.h"
#include "emulator/wire/shm_registry_layout.h"
#include "emulator/wire/wire.h"

namespace softverbs {

struct QpImpl;
struct RunFrame;
class Hca;
class RoutedWire;
namespace fault {
class FaultInjector;
}
namespace trace {
class TraceDirectory;
}
namespace control {
class ControlServer;
}

// Hands out QPNs unique across every process using a device.
class QpnSource {
 public:
  virtual ~QpnSource() = default;
  virtual Errno allocate(uint32_t device_index, uint32_t& qpn) = 0;
  virtual void release(uint32_t device_index, uint32_t qpn) = 0;
  // Whether the process that holds the QPN still runs (a dead process's
  // QPNs stay held until its slot is reclaimed). Without processes: yes.
  virtual bool holder_alive(uint32_t /*device_index*/, uint32_t /*qpn*/) { return true; }
};

struct EngineCounters {
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
  uint64_t frames_dropped_malformed = 0;  // decode failed (ICRC, lengths, ...)
  uint64_t frames_dropped_no_qp = 0;      // no such local QP
  uint64_t frames_dropped_unroutable = 0; // the wire had no route
  uint64_t frames_dropped_bad_icrc = 0;   // of the malformed: ICRC mismatch
  uint64_t frames_dropped_port_down = 0;  // in or out while the port was down
  // Times a frame woke an application thread blocked for completion events,
  // which then served the intake itself (wait_serving_intake).
  uint64_t intake_by_event_waiter = 0;
};

// Fills a packet's payload straight into the frame being built.
class PayloadGatherer {
 public:
  virtual WcStatus gather(std::span<uint8_t> into) = 0;

 protected:
  ~PayloadGatherer() = default;
};

class Engine {
 public:
  struct Config {
    std::unique_ptr<Wire> wire;
    std::unique_ptr<QpnSource> qpns;
    // Multicast group members; null: this process's only.
    std::unique_ptr<MulticastDirectory> multicast;
    // The connection manager's port bindings; null: this process's only.
    std::unique_ptr<CmPortDirectory> cm_ports;
    const Clock* clock = nullptr;
    bool progress_thread = true;
    // Kept alive as long as the engine (e.g. the shm registry behind qpns).
    std::shared_ptr<void> keepalive;
    // The packet capture observing the fault injector (capture/), if any:
    // it outlives the wire.
    std::shared_ptr<void> capture;
    // Set when `wire` is (or wraps) a fault injector.
    fault::FaultInjector* fault_injector = nullptr;
    // The part of the wire that reaches this host's processes, for the
    // same-host shortcuts (same_host.h); it lives inside `wire`. Null:
    // there are no runs and no direct execution.
    SameHostPeers* same_host_peers = nullptr;
    // How the intake sleeps and is woken (emulator/wire/doorbell.h): the
    // local wire's, which lives inside `wire`. Required.
    Doorbell* doorbell = nullptr;
    // Frames between QPs of this engine skip the wire (local_delivery.h).
    // The process engine's do (unless SOFTVERBS_LOCAL_DELIVERY=0); a test that must
    // see every frame on its wire leaves it off.
    bool local_delivery = false;
    // Local ACK timeouts wait for a peer of this host that has not run
    // (emulator/same_host/fair_timeout.h); SOFTVERBS_TIMERS=wall: false.
    bool fair_timers = true;
    // Where each QP's protocol trace goes (emulator/trace/); null: nowhere.
    std::shared_ptr<trace::TraceDirectory> trace;
  };

  explicit Engine(Config config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // fork(): the process's progress thread is held at a safe point while
  // another thread forks, so the child inherits no lock it held (the
  // allocator's included: some have no fork handler of their own).
  // Bounded: a progress thread that does not park in time is not waited for.
  void hold_progress_for_fork();
  void release_progress_after_fork();
  bool progress_parked_for_fork() const {
    return progress_parked_.load(std::memory_order_acquire) != 0;
  }

  // The engine of this process on the shared-memory wire, created on first
  // use. nullptr + err when the shared registry or mailbox can't be set up.
  static Engine* process(Errno& err);

  const Clock& clock() const { return *clock_; }
  // Whether RoCE devices reach other hosts (a UDP wire runs).
  bool reaches_other_hosts() const { return reaches_other_hosts_; }
  Wire& wire() { return *wire_; }

  // QP table. add_qp allocates the QPN and sets qp->qpn. After remove_qp
  // returns, intake hands the QP nothing more.
  Errno add_qp(uint32_t device_index, QpImpl* qp, uint32_t& qpn);
  void remove_qp(uint32_t device_index, uint32_t qpn);

  // Encodes and sends one frame. Any thread (under the sending QP's lock).
  void transmit(const WireAddress& dst, const packet::Headers& headers,
                std::span<const uint8_t> payload);
  // The same with a payload of `length` bytes that `gatherer` writes
  // straight into the frame. When the gatherer fails, nothing is sent and
  // its status is returned. With port_down, the frame is built (so errors
  // show) but not sent.
  WcStatus transmit_gathered(const WireAddress& dst, const packet::Headers& headers,
                             uint32_t length, bool port_up, PayloadGatherer& gatherer);

  // Sends a run (run_frame.h) that same_host().runs_allowed(dst) let go.
  void transmit_run(const WireAddress& dst, const RunFrame& run);

  // The door to the same-host shortcuts: local delivery, runs, direct
  // execution, and what the host allows of them (same_host.h).
  SameHost& same_host() { return same_host_; }

  // QP `qp` (its lock held) entered ERR with placed SENDs on their way:
  // the intake ends its deferred flush (deferred_receive_flushes.h).
  void defer_receive_flush(const QpImpl& qp);

  // Asks for on_timer() of the QP with `key` once `deadline_ns` has come.
  // Wakes the progress thread if it sleeps past it.
  void schedule_timer(TimerQueue::Key key, uint64_t deadline_ns);

  // Serves up to `budget` arrived frames and the timers that are due,
  // unless another thread is doing so already. Returns the frames served.
  size_t progress(size_t budget = 64);
  // The same for an application thread (the event waiter; Cq::poll of a
  // thread that arms its CQs): while it polls, peers need not ring this
  // process's doorbell. When another application thread is serving, it
  // goes on at once, unless told to wait for the intake.
  enum class IntakeBusy { kGoOn, kWait };
  size_t progress_for_application(size_t budget = 64, IntakeBusy when_busy = IntakeBusy::kGoOn);
  // Cq::poll: for a thread that polls again and again without arming a
  // CQ, the announcement stands between its polls (standing_poll.h).
  size_t poll_for_application(size_t budget = 64);
  // What such a poll handed the program: completions or none
  // (standing_poll.h).
  void application_poll_found(bool completions);
  // An application thread armed a CQ (Cq::arm): it is about to wait for
  // events, so peers must ring this process's doorbell again.
  void application_arms();
  // Sleeps on `word` (a futex private to this process) while it holds
  // `expected`, as an application thread blocked for completion events
  // does, and serves the intake meanwhile: a frame that arrives wakes this
  // thread rather than the progress thread, and it delivers the frame
  // itself (whose completion may be the very event awaited). One wake-up
  // per frame instead of two. Returns 0 after a wake (spurious ones too),
  // EINTR after a signal whose handler lacks SA_RESTART, ENOSYS when it
  // cannot (no such doorbell on this wire, another thread sleeps so
  // already, no futex_waitv): the caller then waits by itself.
  Errno wait_serving_intake(std::atomic<uint32_t>& word, uint32_t expected);

  EngineCounters counters() const;

  // A frame a thread of this process sent to a QP of this engine and kept
  // (local_delivery.h), delivered by that thread holding no QP lock.
  void deliver_kept(std::span<const uint8_t> frame);

  // Multicast (multicast.cc). Called without the QP's lock (the engine's
  // intake lock comes first). attach is idempotent; detach EINVAL when not
  // attached; a QP being destroyed leaves all its groups.
  static constexpr uint32_t kMulticastQpn = 0xffffff;
  Errno attach_multicast(QpImpl& qp, const Gid& gid, uint16_t lid);
  Errno detach_multicast(QpImpl& qp, const Gid& gid, uint16_t lid);
  void detach_all_multicast(QpImpl& qp);
  // Where the copies of a datagram to a group go (one per member process).
  void multicast_routes(const Gid* gid, uint16_t lid, std::vector<MulticastRoute>& out);

  // Runs `hook` first thing when the engine is destroyed (the process
  // engine: at exit), last added first: for a user of the engine that runs
  // a thread of its own on it. Not thread-safe: call at set-up.
  void add_teardown_hook(std::function<void()> hook) { teardown_hooks_.push_back(std::move(hook)); }
  // Runs `hook` when the process leaves at exit (leave_at_exit), after the
  // engine's own threads stopped: for what other processes must see of
  // this one's end. Not thread-safe: call at set-up.
  void add_exit_hook(std::function<void()> hook) { exit_hooks_.push_back(std::move(hook)); }

  // The process engine at exit (exit(3), a return from main), in place of
  // its destruction. Other threads of the program may still be in verbs
  // calls (a worker polling its CQ, a thread waiting for an event): with a
  // kernel provider the objects stay until the process is gone, so nothing
  // is freed here. The engine's own threads stop (teardown hooks first),
  // initiators stop executing on this process, and the exit hooks run.
  void leave_at_exit();

  // Whether the process holding QPN `qpn` of a device still runs.
  bool qpn_holder_alive(uint32_t device_index, uint32_t qpn) {
    return qpns_->holder_alive(device_index, qpn);
  }

  // Who holds which connection-manager port, host-wide (cm_port_directory.h).
  CmPortDirectory& cm_ports() { return *cm_ports_; }

  // What each device holds in this process, against its object limits.
  ObjectQuota& object_quota(uint32_t device_index) {
    return quotas_[device_index % quotas_.size()];
  }

  // The HCAs open in this process (for stats and port events).
  void add_hca(Hca* hca);
  void remove_hca(Hca* hca);
  // Calls fn(Hca&) for each, with the HCA set locked.
  template <typename Fn>
  void for_each_hca(Fn&& fn) {
    std::lock_guard lock(objects_mutex_);
    for (Hca* hca : hcas_) fn(*hca);
  }

  // Port state of a device as this process sees it: a downed port drops
  // every frame in and out and raises PORT_ERR; up again, PORT_ACTIVE.
  // Taking a port down also migrates the armed QPs that use it to their
  // alternate path (path_migration.h).
  bool port_up(uint32_t device_index, uint8_t port) const {
    return !(ports_down_.load(std::memory_order_relaxed) & port_bit(device_index, port));
  }
  void set_port_up(uint32_t device_index, uint8_t port, bool up);

  // Forced RNR: the responder answers every SEND with an RNR NAK, as if no
  // receive WQE were posted. 0: off; kAllQps: every QP; else one QPN.
  static constexpr uint32_t kAllQps = 0xffffffff;
  uint32_t forced_rnr_qpn() const { return forced_rnr_qpn_.load(std::memory_order_relaxed); }
  // Also stops initiators placing SENDs (placed_send.h): each must meet
  // the responder's forced RNR.
  void set_forced_rnr_qpn(uint32_t qpn);

  // The fault injector between the engine and the wire, if there is one.
  fault::FaultInjector* fault_injector() const { return fault_injector_; }
  // While a fault plan has rules, every reliable request asks for an ACK
  // and the responder sends each at once, uncoalesced: which packets are
  // acknowledged then depends on the plan and the program only, not on how
  // many arrived together, and a seed replays the same conversation
  // (docs/faults.md, Reproducibility).
  bool acknowledges_each_packet() const;
  // A fault plan's rnr rule answers this SEND, arrived in sequence at
  // `qp`, with an RNR NAK (docs/faults.md).
  bool fault_plan_answers_rnr(const QpImpl& qp, const packet::Headers& headers);

  // Starts answering `softverbs stats/fault/port` on this process's control
  // socket (the process engine does; unit-test engines don't).
  void start_control_server();

 private:
  // process(): what arrives over the routed wire's UDP side is served by
  // this engine's intake, until teardown.
  void serve_other_hosts(RoutedWire& routed);
  struct Counters {
    // Moved by every frame, by whichever thread sends or delivers it.
    ShardedCounter frames_sent;
    ShardedCounter frames_received;
    std::atomic<uint64_t> frames_dropped_malformed{0};
    std::atomic<uint64_t> frames_dropped_no_qp{0};
    std::atomic<uint64_t> frames_dropped_unroutable{0};
    std::atomic<uint64_t> frames_dropped_bad_icrc{0};
    std::atomic<uint64_t> frames_dropped_port_down{0};
    std::atomic<uint64_t> intake_by_event_waiter{0};
  };

  // What destruction and leave_at_exit both do first: initiators stop
  // executing here, the teardown hooks run, the control and progress
  // threads stop.
  void stop_own_threads();

  // packet_intake.cc
  void deliver_run(std::span<const uint8_t> frame);
  void deliver_placed_send(std::span<const uint8_t> frame);
  // progress() for the progress thread; kIntakeBusy when an application
  // thread was serving.
  static constexpr size_t kIntakeBusy = SIZE_MAX;
  // The timer that ends the intake's sleep when a frame the fault injector
  // holds comes due; no QP has this key (no device has index 2^32-1).
  static constexpr TimerQueue::Key kWireReleaseTimer = UINT64_MAX;
  size_t progress_on_progress_thread(size_t budget);
  size_t serve_for_application(size_t budget, IntakeBusy when_busy);
  // An application thread is about to wait for completion events (Cq::arm,
  // the event waiter): withdraws the standing poll announcement and serves
  // what came unrung meanwhile.
  void withdraw_standing_poll();
  // Whether an application poll that finds no frame should serve anyway
  // for the timers (every 16th poll, when any is armed).
  bool timers_worth_a_look();
  // What a thread woken from wait_serving_intake() serves.
  static constexpr size_t kEventWaiterBudget = 64;
  // How often a poller serves again for frames that came unseen before it
  // leaves that to the progress thread, and how long it looks for the
  // intake the progress thread holds before it waits asleep (pauses).
  static constexpr int kUnseenFrameRounds = 3;
  static constexpr int kIntakeSpins = 2000;
  // With intake_mutex_ held: a frame from the wire, copied out of memory
  // other processes may write before anything is checked.
  void deliver(std::span<const uint8_t> frame);
  // A frame in this thread's own memory, with intake_mutex_ or
  // qp_table_mutex_ held (either keeps the QP it reaches from being removed).
  void deliver_private(std::span<const uint8_t> frame, packet::Icrc icrc);
  // One pass of intake with intake_mutex_ held: the frames that arrived
  // (up to `budget`), then the due timers; the pass's held ACKs leave at
  // its end. Returns how many frames it served.
  size_t serve_intake_locked(size_t budget);
  // The QP a packet with headers `h` is for: the device its DGID (or, with
  // no GRH or no such GID, its DLID) names, at a port that is up. nullptr,
  // counted as a drop, otherwise.
  QpImpl* intake_destination(const packet::Headers& h);
  // The device a packet with headers `h` arrives at: its DGID's, or with
  // no GRH or no such GID, its DLID's. nullptr: none of this host.
  static const DeviceDescription* arrival_device(const packet::Headers& h);
  void run_due_timers();
  // At a pass's end: the deferred receive flushes that are due.
  void end_deferred_receive_flushes();
  // At a pass's end, once frames were lost to a damaged ring since the last
  // look: QPs whose placed SENDs never came fail (qp_placed_sends.cc), as
  // no later one will show the gap.
  void audit_placed_sends();
  QpImpl* find_qp(uint32_t device_index, uint32_t qpn) const;
  // A datagram to a multicast group: a copy to each member QP here.
  void deliver_multicast(const packet::DecodedPacket& pkt);
  // progress_thread.cc
  void progress_thread_main();
  // Due timers while an application thread polls; false when that thread
  // holds the intake (it serves them).
  bool serve_due_timers_beside_poller();
  // Asleep beside an application poll that stands (paused or not) until it
  // lapses, then withdrawn (progress_thread.cc).
  void sleep_beside_standing_poll();
  void park_for_fork();
  // Sleeps on the doorbell until a frame (or, while an application
  // thread polls, until the last poller leaves one behind), a wake() or the
  // next timer.
  enum class SleepUntil { kFrameArrives, kNoOnePolls };
  void sleep_until_woken(SleepUntil until);
  // To the wire, or kept for this thread to deliver when `local`
  // (same_host_.delivers_locally(dst), asked once per frame).
  void send_frame(const WireAddress& dst, std::span<const uint8_t> frame, bool local);

  std::unique_ptr<Wire> wire_;
  Doorbell& doorbell_;
  StandingPoll standing_poll_{doorbell_};
  std::unique_ptr<QpnSource> qpns_;
  const Clock* clock_;
  std::shared_ptr<void> keepalive_;
  std::shared_ptr<void> capture_;  // destroyed after the wire (reset in ~Engine)
  std::shared_ptr<trace::TraceDirectory> trace_;
  bool reaches_other_hosts_ = false;
  fault::FaultInjector* fault_injector_ = nullptr;
  SameHost same_host_;
  std::unique_ptr<control::ControlServer> control_server_;
  // The fault injector's view of the QPs (fault_conversations.cc).
  class FaultConversations;
  std::unique_ptr<FaultConversations> fault_conversations_;
  std::atomic<uint32_t> qp_ordinals_{0};  // QPs created so far

  std::mutex intake_mutex_;  // guards qps_ and the intake itself
  // Also guards qps_: changed with both held, read with either (local
  // deliveries read it under this one, shared, and take no intake).
  ReaderShardedMutex qp_table_mutex_;
  std::unordered_map<uint64_t, QpImpl*> qps_;
  struct LocalAttachment {
    Gid gid;
    uint16_t lid;
    QpImpl* qp;
  };
  std::vector<LocalAttachment> local_multicast_;  // under intake_mutex_
  std::unique_ptr<MulticastDirectory> multicast_;
  std::unique_ptr<CmPortDirectory> cm_ports_;
  std::vector<std::function<void()>> teardown_hooks_;
  std::vector<std::function<void()>> exit_hooks_;
  std::vector<TimerQueue::Key> due_timers_;  // scratch of run_due_timers
  std::array<uint8_t, packet::kMaxFrameBytes> intake_frame_{};  // the frame being served
  TimerQueue timers_;
  DeferredReceiveFlushes deferred_receive_flushes_;
  uint64_t placed_damage_audited_ = 0;  // frames lost to the ring at the last audit

  std::mutex objects_mutex_;  // guards hcas_
  std::unordered_set<Hca*> hcas_;
  std::array<ObjectQuota, kMaxRegistryDevices> quotas_;

  static uint64_t port_bit(uint32_t device_index, uint8_t port) {
    return uint64_t{1} << (device_index * kMaxPorts + (port - 1u) % kMaxPorts);
  }
  std::atomic<uint64_t> ports_down_{0};  // port_bit() per downed port
  std::atomic<uint32_t> forced_rnr_qpn_{0};
  Counters counters_;
  std::atomic<bool> intake_on_progress_thread_{false};
  // Polls by application threads; a racy count is fine (it spaces timer checks).
  thread_local static inline uint32_t application_polls_ = 0;
  // Empty polls by this thread since it last armed a CQ, up to
  // kEmptyPollsToStand: from then on its polls stand (poll_for_application).
  static constexpr uint32_t kEmptyPollsToStand = 2;
  thread_local static inline uint32_t empty_polls_since_arming_ = kEmptyPollsToStand;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> progress_sleeps_until_ns_{0};  // 0: not asleep
  std::atomic<uint32_t> fork_gate_{0};        // 1: the progress thread must park
  std::atomic<uint32_t> progress_parked_{0};  // 1: it has
  // Set once the progress thread holds the liveness page (the constructor
  // waits for it).
  std::atomic<uint32_t> progress_thread_alive_{0};
  std::thread progress_thread_;
};

}  // namespace softverbs
