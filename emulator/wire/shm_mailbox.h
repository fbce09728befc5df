// A process's mailbox on the shared-memory wire: a bounded ring of fixed-size
// frame slots in a shared-memory segment, which any thread of any process of
// this user may push into and one thread of the owning process pops from.
//
// The ring is Dmitry Vyukov's bounded queue: every slot carries a sequence
// number that says whose turn it is (a producer of lap L, or the consumer
// after that producer), so producers only contend on one counter and the
// consumer never writes a shared counter at all. Only C++ atomics are used, and
// they are lock-free, so they work across processes.
//
// The doorbell: a consumer about to sleep sets `consumer_sleeping`, looks at
// the ring once more, and futex-waits on that word. A producer reads the word
// after publishing a frame and only makes a syscall when it is set, so two
// busy-polling processes never enter the kernel. Application threads that
// poll the ring themselves say so (`pollers`): while one does, producers
// skip the doorbell even though the process's own waiter sleeps, because
// the poller serves the frame; a poller leaving looks at the ring once more
// and wakes the waiter if a frame came meanwhile.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "emulator/types.h"
#include "emulator/wire/shm_segment.h"

namespace softverbs {

// The largest frame the shared-memory wire carries: a 4096-byte payload with
// every header an IB packet can have, rounded up.
inline constexpr size_t kShmMaxFrameBytes = 4224;
inline constexpr uint32_t kMailboxSlotCount = 2048;  // a power of two
// A slot claimed by a producer that has not published it for this long is
// given up (the producer died or is stopped): see ShmMailbox::peek.
inline constexpr uint64_t kDefaultStallLimitNs = 2'000'000'000;
// A busy-polling consumer looks for such a slot once per this many empty
// peeks (and after every wait()).
inline constexpr uint64_t kEmptyPeeksPerStallCheck = 1024;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
static_assert((kMailboxSlotCount & (kMailboxSlotCount - 1)) == 0);

// The segment's layout. The memory starts as zeros (ftruncate) and the
// fields are such that zero is the right initial value, so pages are only
// touched once the ring reaches them.
struct alignas(64) MailboxSlot {
  // The Vyukov sequence minus this slot's index: zero means "free for the
  // producer of lap 0", which is what a fresh segment holds. A plain integer
  // used through std::atomic_ref, so the zeros need no constructor run.
  uint64_t biased_sequence;
  uint32_t length;
  uint32_t reserved;
  uint8_t bytes[kShmMaxFrameBytes];
};

struct MailboxHeader {
  std::atomic<uint64_t> magic;  // published last, with release
  uint32_t version;
  uint32_t slot_count;
  uint32_t slot_bytes;
  uint32_t max_frame_bytes;
  uint64_t total_bytes;
  alignas(64) std::atomic<uint64_t> enqueue_position;  // producers' claim counter
  alignas(64) std::atomic<uint32_t> consumer_sleeping;  // the futex word
  std::atomic<uint32_t> wake_requested;                // wake() before wait()
  std::atomic<uint64_t> abandoned_slots;               // given up, see peek()
  // Application threads polling now, and a skipped-doorbell mark. On a line
  // of its own: the owner writes it twice a poll, producers read it only
  // when the consumer sleeps.
  alignas(64) std::atomic<uint32_t> pollers;
  std::atomic<uint32_t> accepting_runs;  // the owner pulls runs' payloads (see run_frame.h)
};

class ShmMailbox {
 public:
  // Creates segment `name` and becomes its consumer; the destructor unlinks
  // it. nullptr + err (EACCES, ENOMEM, EEXIST, ...).
  static std::unique_ptr<ShmMailbox> create(const std::string& name, Errno& err);
  // Maps an existing mailbox to push into it. ENOENT when there is none,
  // EAGAIN while its creator is still initializing it, EPROTO on a layout
  // from another version.
  static std::unique_ptr<ShmMailbox> open(const std::string& name, Errno& err);
  ~ShmMailbox();

  ShmMailbox(const ShmMailbox&) = delete;
  ShmMailbox& operator=(const ShmMailbox&) = delete;

  // ---- Producer side: any thread of any process.

  // Copies `frame` (1..kShmMaxFrameBytes bytes) into the ring and rings the
  // doorbell if the consumer sleeps. false when the ring is full or the frame
  // too large.
  bool try_push(std::span<const uint8_t> frame);

  // try_push in two steps, so a test can play a producer that stops between
  // claiming a slot and publishing it.
  struct Reservation {
    uint64_t position = 0;
    MailboxSlot* slot = nullptr;
  };
  bool reserve(Reservation& out);
  void commit(const Reservation& reservation, std::span<const uint8_t> frame);

  // ---- Consumer side: one thread at a time, in the creating process.

  // Shows the oldest frame without removing it; false when none is ready.
  // The span stays valid until release_peeked(). A slot claimed but not
  // published for the stall limit is given up and skipped (its producer died
  // mid-copy; otherwise the ring would be stuck for good). A producer that
  // was merely stopped that long (a debugger) loses its frame; should a whole
  // lap of frames pass before it resumes copying, it may also spoil the
  // frame that reused the slot: RC retransmits the one and the ICRC check
  // rejects the other.
  bool peek(std::span<const uint8_t>& frame);
  void release_peeked();

  // Sleeps until a frame is published, wake() is called, or `timeout_ns`
  // passes (0: return at once). May return early.
  void wait(uint64_t timeout_ns);

  void set_stall_limit_ns(uint64_t limit_ns) { stall_limit_ns_ = limit_ns; }

  // An application thread of the owning process starts or ends a poll of the
  // ring. end_poll() returns true when a frame is waiting that the poll may
  // not have seen: the caller must wake() the waiter.
  void begin_poll();
  bool end_poll();
  bool polling() const;

  // ---- Anyone.

  // Makes the current or the next wait() return.
  void wake();

  // Whether the owner takes runs (frames naming payload in the sender's
  // memory). Set by the owner, read by producers.
  void set_accepting_runs(bool accepting) {
    header().accepting_runs.store(accepting ? 1 : 0, std::memory_order_relaxed);
  }
  bool accepting_runs() const {
    return header().accepting_runs.load(std::memory_order_relaxed) != 0;
  }

  // A frame is ready to be peeked (the consumer's view; any thread).
  bool has_frame() const { return has_ready_frame(std::memory_order_acquire); }

  // True while the consumer has announced it is going to sleep.
  bool consumer_asleep() const;
  uint64_t abandoned_slots() const;

  static size_t segment_bytes();

 private:
  explicit ShmMailbox(ShmSegment segment);
  MailboxHeader& header() const { return *header_; }
  MailboxSlot& slot_at(uint64_t position) const;
  uint64_t sequence_of(const MailboxSlot& slot, uint64_t position,
                       std::memory_order order = std::memory_order_acquire) const;
  bool has_ready_frame(std::memory_order order = std::memory_order_acquire) const;
  bool skip_if_stalled();
  void ring_doorbell();
  void wake_sleeper();

  ShmSegment segment_;
  MailboxHeader* header_ = nullptr;
  MailboxSlot* slots_ = nullptr;
  std::string unlink_on_destroy_;  // set for the consumer only
  int creator_pid_ = 0;            // a forked copy must not unlink it

  // Consumer-only state, private to this process.
  // Read by end_poll() on an application thread while the consumer may be
  // another thread: atomic, written by the consumer only.
  std::atomic<uint64_t> dequeue_position_{0};
  uint64_t stall_limit_ns_ = kDefaultStallLimitNs;
  uint64_t stalled_position_ = UINT64_MAX;
  uint64_t stalled_since_ns_ = 0;
  uint64_t empty_peeks_ = 0;
  // Set by wait() on the waiting thread, read by peek() on the consumer.
  std::atomic<bool> stall_check_due_{false};
};

}  // namespace softverbs
