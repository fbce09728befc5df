// A process's mailbox on the shared-memory wire: a bounded ring of fixed-size
// frame slots in a shared-memory segment (layout in shm_mailbox_layout.h),
// which any thread of any process of this user may push into and one thread
// of the owning process pops from.
//
// The ring is Dmitry Vyukov's bounded queue: every slot carries a sequence
// number that says whose turn it is (a producer of lap L, or the consumer
// after that producer), so producers only contend on one counter and the
// consumer never writes a shared counter at all. Only C++ atomics are used, and
// they are lock-free, so they work across processes.
//
// A peer that breaks the protocol (a bug that scribbles on the claim counter,
// a sequence word or a length) is survived, never waited for: every loop on
// shared state is bounded, a producer that cannot claim a slot says the ring
// is full or broken and the caller holds its frame, and the consumer repairs
// what its own position tells it is impossible (a claim counter behind it or
// more than a ring ahead, a sequence word of neither this lap's producer nor
// this lap's frame) and skips it. What such a peer can still do is spoil or
// replay frame bytes: the ICRC check upstream drops those. Every such event
// is counted (protocol_violations()).
//
// The doorbell: a consumer about to sleep sets `consumer_sleeping`, looks at
// the ring once more, and futex-waits on that word. A producer reads the word
// after publishing a frame and only makes a syscall when it is set, so two
// busy-polling processes never enter the kernel. Application threads that
// poll the ring themselves say so (`pollers`): while one does, producers
// skip the doorbell even though the process's own waiter sleeps, because
// the poller serves the frame; a poller leaving looks at the ring once more
// and wakes the waiter if a frame came meanwhile. A waiter that sleeps while
// its application polls in a loop says so too, and a producer that finds
// the loop between two polls waits a moment for the next one before it
// rings (ring_doorbell()). An application thread blocked for completion
// events may take the waiter's part for frames (begin_application_sleep()):
// producers then wake it, and it serves them itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "emulator/types.h"
#include "emulator/wire/shm_mailbox_layout.h"
#include "emulator/wire/shm_segment.h"

namespace softverbs {

// A slot claimed by a producer that has not published it for this long is
// given up (the producer died or is stopped): see ShmMailbox::peek.
inline constexpr uint64_t kDefaultStallLimitNs = 2'000'000'000;
// A busy-polling consumer looks for such a slot once per this many empty
// peeks (and after every wait()).
inline constexpr uint64_t kEmptyPeeksPerStallCheck = 1024;

// What a producer's attempt to take a slot came to.
enum class ClaimResult {
  kClaimed,
  kFull,    // every slot holds a frame the consumer has not taken yet
  kBroken,  // the shared counters break the protocol: treat as full, and
            // count it; the consumer repairs them
};

class ShmMailbox {
 public:
  // Creates segment `name` with `slot_count` slots (is_valid_mailbox_slot_count)
  // and its memory reserved, and becomes its consumer; the destructor
  // unlinks it. nullptr + err: EINVAL (bad slot count), ENOSPC (no room in
  // /dev/shm), EACCES, ENOMEM, EEXIST...
  static std::unique_ptr<ShmMailbox> create(const std::string& name, uint32_t slot_count,
                                            Errno& err);
  // Maps an existing mailbox to push into it, whatever its slot count.
  // ENOENT when there is none, EAGAIN while its creator is still
  // initializing it, EPROTO on a layout from another version or a header
  // that does not match the segment's size.
  static std::unique_ptr<ShmMailbox> open(const std::string& name, Errno& err);
  ~ShmMailbox();

  ShmMailbox(const ShmMailbox&) = delete;
  ShmMailbox& operator=(const ShmMailbox&) = delete;

  // ---- Producer side: any thread of any process.

  // Copies `frame` (1..kShmMaxFrameBytes bytes) into the ring and rings the
  // doorbell if the consumer sleeps. kFull also for a frame of a bad size.
  ClaimResult try_push(std::span<const uint8_t> frame);

  // try_push in steps: claim a slot, write the frame into it in place, then
  // publish it. Never waits: the claim is bounded in attempts.
  struct Reservation {
    uint64_t position = 0;
    MailboxSlot* slot = nullptr;
  };
  ClaimResult reserve(Reservation& out);
  // Where the frame goes: kShmMaxFrameBytes bytes of the claimed slot.
  static std::span<uint8_t> room(const Reservation& reservation) {
    return std::span<uint8_t>(reservation.slot->bytes, kShmMaxFrameBytes);
  }
  // Publishes the first `length` bytes of the room (clamped to it); 0
  // publishes an empty slot, which the consumer skips silently.
  void publish(const Reservation& reservation, size_t length);
  // Copies `frame` into the room and publishes it.
  void commit(const Reservation& reservation, std::span<const uint8_t> frame);

  // ---- Consumer side: one thread at a time, in the creating process.

  // Shows the oldest frame without removing it; false when none is ready.
  // The span points into shared memory, which a misbehaving producer can
  // still change: copy before checking. It stays valid until
  // release_peeked(). Bounded: looks at no more than one lap of slots.
  //
  // A slot claimed but not published for the stall limit is given up and
  // skipped (its producer died mid-copy; otherwise the ring would be stuck
  // for good), and so are slots claimed before it that are still not
  // published. A producer that was merely stopped that long (a debugger)
  // loses its frame; should a whole lap of frames pass before it resumes
  // copying, it may also spoil the frame that reused the slot: RC
  // retransmits the one and the ICRC check rejects the other.
  bool peek(std::span<const uint8_t>& frame);
  void release_peeked();

  // Sleeps until a frame is published, wake() is called, or `timeout_ns`
  // passes (0: return at once). May return early.
  void wait(uint64_t timeout_ns);
  // As wait(), but a frame that comes while an application thread polls is
  // left to that thread: the sleep lasts until a frame comes with no one
  // polling, the last poller leaves one behind (its end_poll() returns true
  // and the caller wakes), wake(), or `timeout_ns`. May return early.
  void wait_while_polled(uint64_t timeout_ns);

  void set_stall_limit_ns(uint64_t limit_ns) { stall_limit_ns_ = limit_ns; }

  // An application thread of the owning process starts or ends a poll of the
  // ring. end_poll() returns true when a frame is waiting that the poll may
  // not have seen and the waiter sleeps or a doorbell was skipped: the
  // caller must serve it or wake() the waiter.
  // kStanding: the announcement stands between polls (at most one per
  // process, emulator/engine/standing_poll.h); producers count it only
  // while the consumer sleeps beside pollers and it is not paused.
  enum class Poll { kThisCall, kStanding };
  void begin_poll(Poll poll = Poll::kThisCall);
  bool end_poll(Poll poll = Poll::kThisCall);
  // Whether an application thread polls, and its announcement not paused.
  bool polling() const;
  // A standing announcement (emulator/engine/standing_poll.h) is between
  // polls, or polled again: while paused, producers treat it as no poller.
  void set_poll_paused(bool paused);

  // An application thread of the owning process that is about to block for
  // completion events sleeps on the returned word (holding 1) beside its
  // own, and producers wake it instead of the waiter: it serves the frame
  // itself, one wake-up instead of two (the waiter's, then its own). null
  // when another thread of this process sleeps so already. A frame already
  // waiting rings at once (the word then holds 0).
  std::atomic<uint32_t>* begin_application_sleep();
  // After the sleep, whatever ended it: true when a producer rang (or a
  // frame may wait unseen): the caller must then serve the ring, or wake().
  bool end_application_sleep();

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

  // Protocol violations this process saw on this ring, as its producer or
  // its consumer. Kept in this process, not in the segment. The wire points
  // every mailbox it maps at one counter of its own.
  uint64_t protocol_violations() const {
    return violations_->load(std::memory_order_relaxed);
  }
  void count_violations_in(std::atomic<uint64_t>& counter) { violations_ = &counter; }

  uint32_t slot_count() const { return slot_count_; }
  // The owner's target area (kMailboxTargetAreaBytes), for the engine to
  // lay out; as untrusted as the rest of the segment.
  std::span<uint8_t> target_area() const {
    return std::span<uint8_t>(
        static_cast<uint8_t*>(segment_.address()) + mailbox_target_area_offset(slot_count_),
        kMailboxTargetAreaBytes);
  }
  // The consumer's position: how many slots it has taken or skipped.
  uint64_t consumer_position() const { return dequeue_position_.load(std::memory_order_relaxed); }

  // ---- Fair timers (emulator/same_host/fair_timeout.h).
  // Consumer: every frame taken so far has been served and answered (a
  // pass of intake ended). Writes the shared line only when it moved.
  void publish_served();
  // How far the ring is claimed by producers and served by its owner, as
  // the header says (untrusted), and, for the consumer's own view,
  // own_backlog() with its private position.
  struct Backlog {
    uint64_t claimed = 0;
    uint64_t served = 0;
  };
  Backlog backlog() const;
  Backlog own_backlog() const;
  size_t segment_bytes() const { return mailbox_segment_bytes(slot_count_); }
  // The mapped segment, whole (tests check that peeked frames lie in it).
  std::span<const uint8_t> mapped_segment() const {
    return std::span<const uint8_t>(static_cast<const uint8_t*>(segment_.address()),
                                    segment_.mapped_size());
  }

 private:
  ShmMailbox(ShmSegment segment, uint32_t slot_count);
  MailboxHeader& header() const { return *header_; }
  MailboxSlot& slot_at(uint64_t position) const { return slots_[position & slot_mask_]; }
  uint64_t sequence_of(const MailboxSlot& slot, uint64_t position,
                       std::memory_order order = std::memory_order_acquire) const;
  uint64_t biased(uint64_t sequence, uint64_t position) const {
    return sequence - (position & slot_mask_);
  }
  bool has_ready_frame(std::memory_order order = std::memory_order_acquire) const;
  bool polling_seq_cst() const;
  // Producer: true when a polling application thread will take the frame
  // (the consumer sleeping as `sleeping` says, an application thread of its
  // asleep for completion events or not).
  bool leave_to_poller(uint32_t sleeping, bool application_sleeps);
  // How many of `pollers` (MailboxHeader::pollers) a producer counts.
  uint32_t pollers_counted(uint32_t pollers, uint32_t sleeping, bool application_sleeps,
                           std::memory_order order) const;
  // Consumer: publishes its sleep, and how (see ring_doorbell()).
  uint32_t announce_sleep(bool pollers_now);
  bool help_past_set_back_claim(uint64_t& position);
  bool take_published(uint64_t position, std::span<const uint8_t>& frame);
  void discard_scribbled(uint64_t position, uint64_t sequence);
  bool look_for_stall();
  bool repair_claim_counter();
  void restore_header();
  void ring_doorbell();
  void wake_sleeper();
  // Producer: wakes the owner's application sleeper; false when there was none.
  bool wake_application_sleeper();
  // Consumer: clears a word no application thread of ours sleeps on.
  void repair_application_sleeping();
  void note_violation() { violations_->fetch_add(1, std::memory_order_relaxed); }
  static uint64_t monotonic_ns();

  ShmSegment segment_;
  MailboxHeader* header_ = nullptr;
  MailboxSlot* slots_ = nullptr;
  // The geometry, checked once when mapping; the header's copy is never
  // read again.
  uint32_t slot_count_ = 0;
  uint64_t slot_mask_ = 0;
  std::string unlink_on_destroy_;  // set for the consumer only
  int creator_pid_ = 0;            // a forked copy must not unlink it
  std::atomic<uint64_t> own_violations_{0};
  std::atomic<uint64_t>* violations_ = &own_violations_;

  // Held by the one application thread in begin/end_application_sleep().
  std::atomic<bool> application_sleep_taken_{false};

  // Consumer-only state, private to this process.
  // Read by end_poll() on an application thread while the consumer may be
  // another thread: atomic, written by the consumer only.
  std::atomic<uint64_t> dequeue_position_{0};
  uint64_t stall_limit_ns_ = kDefaultStallLimitNs;
  // Positions [stall_begin_, stall_end_) were all claimed when the consumer
  // first found stall_begin_ claimed but unpublished, at stalled_since_ns_.
  bool stall_watched_ = false;
  uint64_t stall_begin_ = 0;
  uint64_t stall_end_ = 0;
  uint64_t stalled_since_ns_ = 0;
  uint64_t empty_peeks_ = 0;
  // Set by wait() on the waiting thread, read by peek() on the consumer.
  std::atomic<bool> stall_check_due_{false};
  uint32_t poll_epoch_at_last_sleep_ = 0;  // the consumer's
  uint64_t served_published_ = 0;          // the consumer's last publish_served()
};

}  // namespace softverbs
