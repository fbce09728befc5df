// The soft HCA as one process sees it: the face the provider calls.
//
// Ownership: the provider owns every object it creates (unique_ptr) and
// destroys children before parents, as verbs requires; the HCA checks that
// and refuses with EBUSY otherwise.
//
// Threads: every method may be called from any thread; each object has its
// own lock, taken by its methods (see engine.h for the order). Callbacks
// (CompletionEventSink, AsyncEventSink) may run on any thread, with a QP's
// lock held, and must only record the event and signal an fd.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "emulator/attributes.h"
#include "emulator/objects/memory_window.h"
#include "emulator/objects/mr.h"
#include "emulator/objects/object_quota.h"
#include "emulator/transport/qp_counters.h"
#include "emulator/types.h"

namespace softverbs {

class Engine;
class Hca;
class Pd;
class Mr;
class DeviceMemory;
class Cq;
class Qp;
class Ah;
class Srq;
class Xrcd;
struct QpImpl;

// Told when an armed CQ gets a completion (the IBTA's Completion Event).
class CompletionEventSink {
 public:
  virtual ~CompletionEventSink() = default;
  virtual void on_completion_event(Cq& cq) = 0;
};

struct AsyncEvent {
  AsyncEventType type;
  Qp* qp = nullptr;
  Cq* cq = nullptr;
  uint8_t port = 0;
  Srq* srq = nullptr;
};

class AsyncEventSink {
 public:
  virtual ~AsyncEventSink() = default;
  virtual void on_async_event(const AsyncEvent& event) = 0;
};

// What ibv_query_device reports for the device.
DeviceAttributes device_attributes_of(const DeviceDescription& device);

// What port `port` of a freshly opened device reports.
PortAttributes port_attributes_of(const DeviceDescription& device, uint8_t port = 1);

class Hca {
 public:
  // Opens device `index` of configured_devices(). Returns nullptr and sets
  // `err` (ENODEV, ENOMEM, or EACCES when the shared registry can't be used).
  static std::unique_ptr<Hca> open(uint32_t index, Errno& err);
  // The same on a given engine (unit tests: in-memory wire, manual clock).
  static std::unique_ptr<Hca> open_on(Engine& engine, uint32_t index, Errno& err);
  ~Hca();

  const DeviceDescription& description() const;
  const DeviceAttributes& attributes() const;
  Errno query_port(uint8_t port, PortAttributes& out) const;   // EINVAL on bad port
  Errno query_gid(uint8_t port, uint32_t index, Gid& out) const;  // EINVAL
  Errno query_pkey(uint8_t port, uint32_t index, uint16_t& out) const;  // EINVAL

  void set_async_event_sink(AsyncEventSink* sink);
  // Protocol counters summed over every QP this HCA has had.
  QpCounters counters() const;

  // Every create below fails with ENOMEM past its object limit (max_pd,
  // max_mr, max_cq, max_qp, max_ah, max_srq, max_mw; object_quota.h).
  std::unique_ptr<Pd> alloc_pd(Errno& err);
  // Registers memory (mr.h): EINVAL on a bad access combination (remote
  // write/atomic without local write) or a zero length at a page boundary
  // (the kernel would pin no page); EFAULT when part of
  // the range is not mapped, or not writable while a write access is asked
  // for (unless on demand); ENOMEM past max_mr.
  std::unique_ptr<Mr> register_mr(Pd& pd, const MrInit& init, Errno& err);
  // The same, addressed by its own virtual addresses (iova == addr).
  std::unique_ptr<Mr> register_mr(Pd& pd, uint64_t addr, uint64_t length,
                                  uint32_t access, Errno& err);
  // A null MR (ibv_alloc_null_mr(3)): an lkey for any address, whose reads
  // give zeros and whose writes are dropped; no rkey.
  std::unique_ptr<Mr> register_null_mr(Pd& pd, Errno& err);
  // An MR over [offset, offset+length) of device memory, zero-based.
  // EINVAL outside the DM or for a bad access combination; a zero length
  // is an MR that covers no byte.
  std::unique_ptr<Mr> register_device_memory_mr(Pd& pd, DeviceMemory& dm, uint64_t offset,
                                                uint64_t length, uint32_t access, Errno& err);
  // Re-registration (mr.h: MrChange), all of it or nothing: EINVAL for an
  // MR that is not of memory, a PD of another HCA or a bad access
  // combination; EFAULT as register_mr. The keys stay.
  Errno reregister_mr(Mr& mr, const MrChange& change);
  // A memory window of `type` (memory_window.h), unbound; EINVAL for an
  // unknown type, ENOMEM past max_mw.
  std::unique_ptr<Mw> alloc_mw(Pd& pd, MwType type, Errno& err);
  // Prefetch of on-demand MRs (ibv_advise_mr(3)): see mr.h.
  Errno prefetch_mr(Pd& pd, std::span<const Sge> sges, Prefetch advice, bool wait);
  // Device memory of `length` bytes aligned to 2^log_align: EINVAL for a
  // zero length, more than max_dm_size or an alignment above a page;
  // ENOMEM when this HCA's device memory is used up.
  std::unique_ptr<DeviceMemory> alloc_device_memory(uint64_t length, uint32_t log_align,
                                                    Errno& err);
  // EINVAL when cqe is 0 or above max_cqe. The CQ holds at least `cqe`.
  // `stamps` (CqStamps) says which times each completion records.
  std::unique_ptr<Cq> create_cq(uint32_t cqe, CompletionEventSink* sink,
                                Errno& err, uint32_t stamps = 0);
  struct QpInit {
    QpType type = QpType::kRc;
    Cq* send_cq = nullptr;
    Cq* recv_cq = nullptr;
    // Receives come from this SRQ instead of the QP's own receive queue
    // (whose capabilities are then ignored and reported as 0).
    Srq* srq = nullptr;
    QpCapabilities cap;  // updated with what was granted
    bool sq_sig_all = false;
  };
  // EINVAL on caps above the device limits or missing CQs.
  std::unique_ptr<Qp> create_qp(Pd& pd, QpInit& init, Errno& err);

  // An address handle: where a UD send goes. EINVAL for a port other than 1
  // or a source GID index outside the table. An address no soft device owns
  // is legal; datagrams to it are dropped and counted, as on a fabric.
  std::unique_ptr<Ah> create_ah(Pd& pd, const AddressVector& av, Errno& err);

  struct SrqInit {
    uint32_t max_wr = 0;   // updated with what was granted
    uint32_t max_sge = 0;  // updated with what was granted
    uint32_t limit = 0;    // ignored (ibv_create_srq(3)); reported as 0
    // An XRC SRQ: in this domain, its receive completions on `cq`.
    Xrcd* xrcd = nullptr;
    Cq* cq = nullptr;
  };
  // EINVAL for max_wr or max_sge above the device limits, or an XRC SRQ
  // without its CQ; ENOMEM.
  std::unique_ptr<Srq> create_srq(Pd& pd, SrqInit& init, Errno& err);

  // XRC domains (IBTA 11.2.4). `file` names a domain that every open of the
  // same file shares (the kernel keys it by inode); nullopt opens a private
  // one. Errors as the kernel's: EAGAIN for a file without a domain and no
  // `create`, EINVAL for one with a domain and `exclusive`.
  struct FileIdentity {
    uint64_t device = 0;
    uint64_t inode = 0;
    auto operator<=>(const FileIdentity&) const = default;
  };
  std::shared_ptr<Xrcd> open_xrcd(const FileIdentity* file, bool create, bool exclusive,
                                  Errno& err);
  // An XRC target QP: no PD, no CQs, no queues of its own; each message
  // goes to the XRC SRQ of `xrcd` that its packets name.
  std::unique_ptr<Qp> create_xrc_target_qp(Xrcd& xrcd, Errno& err);

  Engine& engine() const;
  // An application thread blocked for completion events, sleeping on
  // `word` (a futex of this process) while it holds `expected`, serves the
  // device's intake meanwhile (Engine::wait_serving_intake). 0 after a
  // wake-up, EINTR, or ENOSYS: the caller must wait by itself.
  Errno wait_serving_intake(std::atomic<uint32_t>& word, uint32_t expected);
  // The clock completion timestamps are taken on (Completion::timestamp_ns):
  // nanoseconds, so a 1 GHz HCA clock. And the wall clock they record.
  uint64_t clock_ns() const;
  uint64_t wallclock_ns() const;

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  explicit Hca(std::unique_ptr<Impl> impl);
  // Gives `qp` its place in the QP count and its QPN and makes it
  // reachable; false with `err` set.
  bool add_qp(QpImpl& qp, Errno& err);
  // A place in this process's count of `kind` for this device; an empty
  // slot and ENOMEM past the device's limit.
  ObjectQuota::Slot take_slot(ObjectKind kind, Errno& err);
  std::unique_ptr<Impl> impl_;
};

class Pd {
 public:
  ~Pd();
  Hca& hca() const { return hca_; }
  uint32_t handle() const { return handle_; }
  // Objects still using this PD; destroy refuses (EBUSY) while non-zero.
  std::atomic<uint32_t> users{0};

 private:
  friend class Hca;
  Pd(Hca& hca, uint32_t handle, ObjectQuota::Slot slot)
      : hca_(hca), handle_(handle), slot_(std::move(slot)) {}
  Hca& hca_;
  uint32_t handle_;
  ObjectQuota::Slot slot_;
};

class Cq {
 public:
  ~Cq();
  uint32_t capacity() const;
  // Drives progress, then moves up to `max` completions into `out`.
  // Returns how many, or -1 (the CQ overflowed: CQ error).
  int poll(std::span<Completion> out);
  // Requests a completion event for the next (solicited) completion.
  Errno arm(bool solicited_only);
  // Gives the CQ room for at least `cqe` completions, keeping those pending
  // in order. EINVAL when cqe is 0, above max_cqe or below the number
  // pending.
  Errno resize(uint32_t cqe);
  // Event moderation (count completions or period_us, whichever first).
  // Stored only: completion events are not held back (see cq_impl.h).
  void set_moderation(uint16_t count, uint16_t period_us);
  // Removes the completions of QP `qp_num` not yet polled, keeping the
  // others in order: a QP taken to RESET leaves none behind (mlx4/mlx5
  // clean their CQs so; a restarted QP's first poll is its new work).
  void discard_completions_of(uint32_t qp_num);
  // Objects (QPs) still using this CQ.
  std::atomic<uint32_t> users{0};

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  friend class Hca;
  explicit Cq(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// An address vector made into an object (IBTA 11.2.2): UD WRs name one.
class Ah {
 public:
  ~Ah();
  const AddressVector& av() const { return av_; }
  // The soft device that owns the destination, kNoDevice (none), or
  // WireAddress::kOffHost (a GID of another host).
  uint32_t device_index() const { return device_index_; }
  // Addressed to a multicast group (LID 0xC000-0xFFFE or GID ff00::/8).
  bool multicast() const { return multicast_; }
  Pd& pd() const { return pd_; }

  static constexpr uint32_t kNoDevice = UINT32_MAX;

 private:
  friend class Hca;
  Ah(Pd& pd, const AddressVector& av, uint32_t device_index, bool multicast,
     ObjectQuota::Slot slot)
      : pd_(pd), av_(av), device_index_(device_index), multicast_(multicast),
        slot_(std::move(slot)) {}
  Pd& pd_;
  AddressVector av_;
  uint32_t device_index_;
  bool multicast_;
  ObjectQuota::Slot slot_;
};

// An XRC domain: the scope in which XRC target QPs may deliver into XRC
// SRQs. Shared (shared_ptr) by every handle opened on the same file.
class Xrcd {
 public:
  ~Xrcd();
  Hca& hca() const { return hca_; }
  // XRC SRQs and target QPs in the domain: closing its last handle while
  // non-zero is refused (EBUSY).
  std::atomic<uint32_t> users{0};

 private:
  friend class Hca;
  explicit Xrcd(Hca& hca) : hca_(hca) {}
  Hca& hca_;
};

// A shared receive queue (IBTA 10.2.9): receive WQEs that any QP attached
// to it consumes, one message each, in the order they were posted.
class Srq {
 public:
  ~Srq();
  // The SRQ's number: what an XRC initiator names in its packets.
  uint32_t srqn() const;
  // ENOMEM when full; EINVAL with more SGEs than max_sge.
  Errno post_recv(const RecvRequest& wr);
  // Modify SRQ: a new max_wr (EINVAL below the WQEs posted now or above the
  // device limit), and/or the limit (EINVAL above max_wr; non-zero arms
  // the limit event once).
  Errno modify(const uint32_t* max_wr, const uint32_t* limit);
  struct State {
    uint32_t max_wr = 0;
    uint32_t max_sge = 0;
    uint32_t limit = 0;
  };
  State query() const;
  // QPs attached: the provider refuses to destroy it (EBUSY) while non-zero.
  std::atomic<uint32_t> users{0};

  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  friend class Hca;
  explicit Srq(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Qp {
 public:
  ~Qp();
  uint32_t qpn() const;
  QpType type() const;
  QpState state() const;
  // Checks the transition against the IBTA table of required and optional
  // attributes for the QP's type: EINVAL (nothing changed) when illegal.
  Errno modify(const QpAttributes& attr, uint32_t mask);
  Errno query(QpAttributes& out) const;
  QpCounters counters() const;
  // Posts one send WR. EINVAL for an opcode the QP type does not allow or a
  // bad SGE count / inline size, ENOMEM when the SQ is full, EINVAL when the
  // QP's state does not accept sends (RESET, INIT, RTR).
  Errno post_send(const SendRequest& wr);
  // Multicast (IBTA 10.5): a UD QP joins or leaves the group with GID `gid`
  // (ff00::/8) and, on an InfiniBand port, multicast LID `lid`. EINVAL for
  // another QP type, a unicast GID or LID, or (detach) a group not joined;
  // ENOMEM when the host's table of attachments is full.
  Errno attach_multicast(const Gid& gid, uint16_t lid);
  Errno detach_multicast(const Gid& gid, uint16_t lid);
  // Posts every WR of `wrs` or none: each is checked as post_send checks it,
  // and the SQ must have room for all. On refusal returns post_send's errno
  // for the first WR refused, whose index goes to `refused`.
  Errno post_send_batch(std::span<const SendRequest> wrs, size_t& refused);
  // Posts one receive WR. ENOMEM when the RQ is full, EINVAL in RESET or with
  // too many SGEs.
  Errno post_recv(const RecvRequest& wr);

  using Impl = QpImpl;
  Impl& impl() const { return *impl_; }

 private:
  friend class Hca;
  explicit Qp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace softverbs
