// A queue pair: its identity, attributes, queues, and the three roles that
// own its transport state:
//   Requester (requester.cc)  send WQEs -> request packets
//   Responder (responder.cc)  request packets -> execution, ACK/NAK, READ
//                             responses, receive completions
//   Completer (completer.cc)  responses -> send completions; timers
// qp.cc holds Modify QP, posting and the state transitions' side effects.
//
// Threads: everything here is guarded by `mutex`. Application threads take
// it in post/modify/query; the progress step takes it to hand the QP a
// packet or a due timer. Lock order: engine intake, then QP, then CQ (and
// the leaf locks: timer queue, MR table, wire). A thread letting go of the
// last QP lock it holds delivers the frames it sent to QPs of this process
// meanwhile (qp_mutex.h, local_delivery.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>

#include "emulator/objects/cq_impl.h"
#include "emulator/objects/hca_impl.h"
#include "emulator/packet/codec.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/same_host/run_frame.h"
#include "emulator/same_host/target_table_layout.h"
#include "emulator/sync/qp_mutex.h"
#include "emulator/trace/qp_trace.h"
#include "emulator/transport/completer.h"
#include "emulator/transport/path_migration.h"
#include "emulator/transport/qp_counters.h"
#include "emulator/transport/receive_wqe.h"
#include "emulator/transport/recv_queue.h"
#include "emulator/transport/requester.h"
#include "emulator/transport/responder.h"
#include "emulator/transport/send_queue.h"

namespace softverbs {

struct QpImpl;

// Holds a QP's target entry (with the QP's lock held) for a step that may
// move its responder or change its state: on entry the responder adopts
// what initiators executed directly meanwhile; on exit the entry shows
// where the responder stands and whether it may be executed on now (RTS,
// nothing half done). Scopes nest; only the outermost one locks.
// (qp_target_entry.cc)
class TargetEntryScope {
 public:
  explicit TargetEntryScope(QpImpl& qp);
  ~TargetEntryScope();
  TargetEntryScope(const TargetEntryScope&) = delete;
  TargetEntryScope& operator=(const TargetEntryScope&) = delete;

 private:
  QpImpl* qp_ = nullptr;  // null: nothing to do
};

// The IBTA's RNR NAK timer field (IBTA 9.7.5.2.8): code -> microseconds.
uint32_t rnr_timer_us(uint8_t code);

struct QpImpl {
  ObjectQuota::Slot slot;  // its place in the device's QP count
  QpMutex mutex;

  // Identity and wiring: set at creation, read-only afterwards.
  Hca* hca = nullptr;
  Engine* engine = nullptr;
  Pd* pd = nullptr;
  Qp* self = nullptr;
  QpType type = QpType::kRc;
  uint32_t device_index = 0;
  uint32_t qpn = 0;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Srq* srq = nullptr;  // receives come from here instead of rq
  // XRC target: its domain. Its pd, srq and recv_cq are those of the XRC
  // SRQ of the message in progress (responder_xrc.cc), else null.
  Xrcd* xrcd = nullptr;
  bool sq_sig_all = false;
  QpCapabilities cap;

  QpAttributes attr;  // attr.state is the current state
  // Where the peer lives (resolved at RTR from the address vector), and
  // where it lives on the alternate path (path_migration.h).
  uint32_t peer_device_index = 0;
  uint32_t alt_peer_device_index = 0;
  bool sq_drained_notify = false;
  // Type 2 memory windows bound to this QP; guarded by the MR table lock.
  uint32_t bound_windows = 0;

  // RC: its entry in the process's target table (target_table.h), where
  // initiators of this host execute WRITEs and READs on it directly; null
  // without one. Held by a TargetEntryScope (below) while set.
  TargetQpEntry* target_entry = nullptr;
  bool target_entry_held = false;
  uint32_t target_executed_seen = 0;  // the entry's `executed` last folded in
  // The counters with what initiators executed directly since the entry
  // was last held (qp_target_entry.cc).
  QpCounters current_counters() const;

  // SENDs initiators place on this QP (placed_send.h), as their target
  // keeps them (qp_placed_sends.cc): its receive counts beside the entry,
  // this life's generation, the shortest receive posted since the reset,
  // and the placed SENDs taken since then.
  TargetQpReceives* target_receives = nullptr;
  uint32_t placed_generation = 0;
  uint32_t placed_send_max = 0;
  uint32_t placed_sends_taken = 0;
  uint32_t posted_published = 0;  // TargetQpReceives' counts as last stored
  uint32_t taken_published = 0;
  // A receive posted since the reset named memory it may not be written
  // through (or no longer may, its MR changed): SENDs travel as packets,
  // whose responder reports it as an HCA does.
  bool placement_refused = false;
  // The L_Key the receives posted since the reset name, while they all
  // name one (0: none yet), so an MR change passes most QPs by.
  uint32_t receives_lkey = 0;
  bool receives_mixed_lkeys = false;
  // The MR a posted receive last checked out against in full (0: none),
  // so the next receive within it needs no look into the MR table.
  struct CheckedReceiveMemory {
    uint32_t lkey = 0;
    uint64_t iova = 0;
    uint64_t length = 0;
  } checked_receive_memory;
  // ERR came while placed SENDs were on their way: the receive queue is
  // flushed once the intake has taken the SENDs placed before it
  // (sends_placed_at_error), or found none left (Engine::defer_receive_flush).
  bool receive_flush_deferred = false;
  uint32_t sends_placed_at_error = 0;
  bool placed_sends_stopped = false;
  // A fresh life for placed SENDs: at creation and at each reset.
  void start_placed_sends();
  // Stores the receive count placed SENDs see, when it changed.
  void publish_receives();
  // The receive WQE at `index` was posted.
  void note_receive_posted(uint64_t index);
  // The MR of L_Key `lkey` was deregistered or changed: the receives that
  // name it still check out, or SENDs stop being placed.
  void recheck_receives(uint32_t lkey);
  // A placed SEND the intake found for this QP.
  void receive_placed_send(const packet::DecodedPacket& pkt, const PlacedSendPrefix& prefix);
  // Placed SENDs the initiator counted and this QP never took: lost in the
  // ring. The QP stops taking them (below).
  void lose_placed_sends();
  // The QP takes no placed SEND any more (one was lost, or failed here:
  // the initiator was told it arrived) and fails, unless in ERR already.
  void stop_placed_sends();
  // Whether the entry counts more placed SENDs than were taken (its lock
  // held): missing if the ring holds no more.
  bool placed_sends_missing();
  // The same when a request for `psn` comes (the entry's lock held): a new
  // one, the PSN expected, was sent after every SEND its initiator placed
  // and queued behind them; a duplicate may have been sent before.
  bool placed_sends_missing_before(uint32_t psn) {
    return psn == responder.expected_psn() && placed_sends_missing();
  }
  // ERR: the receive queue flushed now, or once placed SENDs are taken.
  void flush_receives_or_defer();
  void end_deferred_receive_flush();

  SendQueue sq;
  RecvQueue rq;
  Requester requester{*this};
  Responder responder{*this};
  Completer completer{*this};
  QpCounters counters;

  uint32_t mtu() const { return mtu_bytes(attr.path_mtu); }
  bool can_send() const {
    return attr.state == QpState::kRts || attr.state == QpState::kSqd;
  }
  bool can_receive() const {
    return attr.state == QpState::kRtr || attr.state == QpState::kRts ||
           attr.state == QpState::kSqd || attr.state == QpState::kSqe;
  }
  uint64_t timer_key() const { return (uint64_t(device_index) << 32) | qpn; }
  // Whether the port of the QP's path is up, as this process sees it.
  bool port_up() const { return engine->port_up(device_index, attr.port_num); }
  // Where a connected QP's packets go.
  WireAddress destination() const { return WireAddress{peer_device_index, attr.dest_qp_num}; }
  // This QP's own address on the wire.
  WireAddress own_address() const { return WireAddress{device_index, qpn}; }
  // `dst` as a frame this QP sends there.
  WireAddress sent_from_here(WireAddress dst) const {
    dst.sender = this;
    return dst;
  }
  // For fault decisions (emulator/fault/frame_identity.h): the QP's
  // creation ordinal in this process, set by Engine::add_qp; and where its
  // PSNs started at RTR and RTS, read by the intake without the QP's lock.
  uint32_t ordinal = 0;
  std::atomic<uint32_t> first_rq_psn{0};
  std::atomic<uint32_t> first_sq_psn{0};
  // Its protocol trace (emulator/trace/), set by Engine::add_qp when the
  // process traces; null otherwise.
  std::shared_ptr<trace::QpTrace> trace;

  // ---- the QP's operations (qp.cc)
  Errno modify(const QpAttributes& a, uint32_t mask);
  Errno post_send(const SendRequest& wr);
  Errno post_send_batch(std::span<const SendRequest> wrs, size_t& refused);
  Errno post_recv(const RecvRequest& wr);
  // UD: checks a WR's address handle and copies where it goes.
  Errno resolve_datagram(const SendRequest& wr, DatagramDestination& out) const;
  void enter_error();             // to ERR: flush both queues
  void enter_send_queue_error();  // to SQE (UC): flush the send queue only
  void reset();                   // to RESET: forget everything
  void raise(AsyncEventType type);
  // The send queue drained while in SQD: tell whoever asked.
  void note_send_queue_drained();

  // ---- posting a send WR (qp.cc): the checks, then the queueing
  // `length` is the message's size. EINVAL as Qp::post_send says.
  Errno check_send(const SendRequest& wr, uint64_t& length) const;
  // Queues a checked WR on an SQ with room (flushed at once in ERR/SQE).
  void enqueue_send(const SendRequest& wr, uint64_t length);

  // ---- memory windows (memory_window.cc)
  // Executes a bind WR: kMwBindErr when a rule of memory_window.h forbids it.
  WcStatus bind_window(const SendWqe& w);
  // Frees the type 2 window `rkey` names: false when it names none this QP
  // may invalidate (locally: of its PD; remotely: bound to it).
  bool invalidate_window(uint32_t rkey, bool remote);
  // The QP is going: windows bound to it lose their binding.
  void release_windows();

  // ---- path migration (path_migration.cc)
  MigrationState migration_state() const;
  // An alternate path is loaded or a migration is under way: then the
  // MigReq bits of packets carry state, and nothing is executed directly.
  bool migration_in_use() const {
    return attr.alt_port_num != 0 || migration_state() != MigrationState::kMigrated;
  }
  // The BTH MigReq bit of the QP's packets.
  bool migration_request_bit() const;
  // The alternate path of a Modify QP: EINVAL unless it is an InfiniBand
  // port of this device (the same in alt_port_num and its address vector)
  // and a unicast LID.
  Errno check_alternate_path(const QpAttributes& a) const;
  // Loads the alternate path into the primary one, enters Migrated and
  // raises PATH_MIG.
  void migrate(MigrationCause cause);
  // A failure of the primary path: an armed QP migrates (true) if its
  // alternate port is up, else raises PATH_MIG_ERR.
  bool migrate_instead_of_failing(MigrationCause cause);
  // A packet of the connection: rearmed peers arm, migrated ones migrate us.
  void note_peer_migration_state(const packet::Headers& h);
  bool arrived_over_alternate_path(const packet::Headers& h) const;
  // Port `port` of this device went down.
  void on_port_down(uint8_t port);

  // ---- packets in and out (qp.cc)
  // A frame for this QP, decoded by the engine's intake.
  void receive(const packet::DecodedPacket& pkt);
  // A run of request packets (run_frame.h), checked by the engine's intake.
  void receive_run(const RunFrame& run);
  packet::Headers make_headers(packet::Opcode opcode, uint32_t psn) const;
  // The headers of a UD SEND to `to` (LRH, GRH when global, BTH, DETH).
  packet::Headers make_datagram_headers(const SendWqe& w, uint32_t psn) const;
  void transmit(const packet::Headers& h, std::span<const uint8_t> payload) {
    transmit_to(destination(), h, payload);
  }
  void transmit_to(const WireAddress& dst, const packet::Headers& h,
                   std::span<const uint8_t> payload);
  // Transmits a packet whose payload is gathered from this QP's send SGEs
  // straight into the frame. Returns kSuccess or the local error status.
  WcStatus transmit_gathered(const packet::Headers& h, const Sge* sges, uint32_t num_sge,
                             uint64_t offset, uint32_t length) {
    return transmit_gathered_to(destination(), h, sges, num_sge, offset, length);
  }
  WcStatus transmit_gathered_to(const WireAddress& dst, const packet::Headers& h,
                                const Sge* sges, uint32_t num_sge, uint64_t offset,
                                uint32_t length);
  // Sends a run; its pieces were filled by describe().
  void transmit_run(const RunFrame& run);

  // ---- memory access (memory_access.cc)
  // Copies between local SGEs and a flat buffer at `offset` into the SGE
  // list. Checks lkeys, PD, bounds and local write access. Returns
  // kSuccess or the local error status.
  WcStatus gather(const Sge* sges, uint32_t n, uint64_t offset, std::span<uint8_t> out) const;
  WcStatus scatter(const Sge* sges, uint32_t n, uint64_t offset,
                   std::span<const uint8_t> in) const;
  // scatter() for a payload that may be a run to pull. A failed pull
  // returns kSuccess with `pull_error` set (the run is resent; nothing is
  // reported complete).
  WcStatus scatter_payload(const Sge* sges, uint32_t n, uint64_t offset, const Payload& in,
                           int& pull_error) const;
  // Checks [offset, offset+length) of local SGEs as gather() would, and
  // names the memory instead of copying it (a run's pieces).
  WcStatus describe(const Sge* sges, uint32_t n, uint64_t offset, uint64_t length,
                    RunFrame& run) const;
  // The same for memory bytes will be written into (as scatter() checks).
  WcStatus describe_destination(const Sge* sges, uint32_t n, uint64_t offset, uint64_t length,
                                RunFrame& run) const;
  // A remote access through an rkey: the MR exists (and has an rkey), is in
  // the QP's PD, grants `access`, the QP allows it, and [va, va+len) lies
  // inside it; or the rkey is a memory window's that lets this QP in
  // (memory_window.h). Then runs fn(host address of va) with the MR table
  // locked (shared), so the MR cannot be deregistered while its memory is in use;
  // fn returns false when that memory faulted (app_memory.h). Returns false
  // when the access is refused or faulted.
  template <typename Fn>
  bool access_remote(uint32_t rkey, uint64_t va, uint64_t len, uint32_t access, Fn&& fn) const {
    if ((attr.access_flags & access) != access) return false;
    if (len == 0) return true;  // zero-length accesses touch no memory (IBTA 9.4.4)
    const Hca::Impl& h = hca->impl();
    std::shared_lock lock(h.mr_mutex);
    uint64_t host = 0;
    return resolve_remote_locked(rkey, va, len, access, host) &&
           fn(reinterpret_cast<uint8_t*>(host));
  }
  bool remote_access_ok(uint32_t rkey, uint64_t va, uint64_t len, uint32_t access) const {
    return access_remote(rkey, va, len, access, [](uint8_t*) { return true; });
  }
  // Places a payload at [va, va+size) through `rkey`: false when the access
  // is refused or the memory faults; a failed pull of the sender's memory
  // sets `pull_error` instead.
  bool place_remote(uint32_t rkey, uint64_t va, const Payload& in, int& pull_error) const;
  // Sends a READ response packet with `length` bytes at `va` through `rkey`:
  // false (nothing sent) when the access is refused or the memory faults.
  bool transmit_remote(const packet::Headers& h, uint32_t rkey, uint64_t va, uint32_t length);
  // An atomic on the word at `va` through `rkey`; `original` is what it
  // held. false when refused or faulted (nothing changed).
  bool atomic_remote(uint32_t rkey, uint64_t va, bool compare_swap, uint64_t compare_add,
                     uint64_t swap, uint64_t& original) const;
  // An ATOMIC WRITE of `data` to the word at `va`, with remote write rights.
  bool atomic_write_remote(uint32_t rkey, uint64_t va, uint64_t data) const;
  // Whether a FLUSH with `access` (kAccessFlush*) may act through `rkey` on
  // [va, va+len), or on the key's whole MR: both the QP and the MR must
  // allow it, and the key must be valid even when the range is empty.
  bool flush_allowed(uint32_t rkey, uint64_t va, uint64_t len, bool whole_mr,
                     uint32_t access) const;

 private:
  // Whether `mr` lets a peer of this QP in with `access` (its PD, its
  // rights; a null MR never), wherever in it.
  bool mr_grants(const Mr& mr, uint32_t access) const;
  // Where [va, va+len) through `rkey` lies in host memory, with the MR
  // table locked; false when refused.
  bool resolve_remote_locked(uint32_t rkey, uint64_t va, uint64_t len, uint32_t access,
                             uint64_t& host) const;
};

}  // namespace softverbs
