// The mailbox segment's layout: a header, then a power-of-two number of
// fixed-size frame slots. The slot count is chosen by the process that
// creates the mailbox (SOFTVERBS_MAILBOX_SLOTS), so producers read it from
// the header, bound it, and check it against the segment's size before
// they use it. The version changes whenever any of this does.
//
// Everything in the segment can be written by any process of the user, so
// nothing read from it is trusted: the consumer keeps its own copy of the
// geometry, and both sides bound every counter, index and length they read.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace softverbs {

// The largest frame the shared-memory wire carries: a 4096-byte payload with
// every header an IB packet can have, rounded up.
inline constexpr size_t kShmMaxFrameBytes = 4224;

// Slot counts a mailbox may have (powers of two). 512 slots take 2.1 MiB
// (2.2 MiB with the target area).
inline constexpr uint32_t kMinMailboxSlots = 64;
inline constexpr uint32_t kMaxMailboxSlots = 8192;
inline constexpr uint32_t kDefaultMailboxSlots = 512;

inline constexpr uint64_t kMailboxMagic = 0x78626d2d76667373ull;  // "ssfv-mbx"
// 4: slot count chosen per mailbox, memory reserved at creation, empty
// (length 0) frames published by a producer that wrote nothing.
// 5: the target area after the slots.
// 6: `pollers` counts polls begun; `consumer_sleeping` says whether the
// owner's application threads poll (producers then wait a moment for them).
// 7: `application_sleeping`, an application thread of the owner that
// serves the ring itself while it waits for completion events.
// 8: `served_position`, how far the owner has served its ring (fair timers).
// 9: `poll_paused`: the owner's standing poll announcement is between polls.
// 10: a target area of 108 KiB (receive counts for placed SENDs).
inline constexpr uint32_t kMailboxVersion = 10;

// After the slots: the owner's target area (emulator/same_host/target_table_layout.h),
// which peers map with the mailbox. The wire knows only its size.
inline constexpr size_t kMailboxTargetAreaBytes = 108 * 1024;

static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

constexpr bool is_valid_mailbox_slot_count(uint64_t slots) {
  return slots >= kMinMailboxSlots && slots <= kMaxMailboxSlots && (slots & (slots - 1)) == 0;
}
static_assert(is_valid_mailbox_slot_count(kDefaultMailboxSlots));

// The memory starts as zeros and zero is the right initial value of every
// field of a slot.
struct alignas(64) MailboxSlot {
  // The Vyukov sequence minus this slot's index: zero means "free for the
  // producer of lap 0", which is what a fresh segment holds. A plain integer
  // used through std::atomic_ref, so the zeros need no constructor run.
  uint64_t biased_sequence;
  // 0: published empty (a producer that took the slot and wrote nothing);
  // the consumer skips it. Anything above kShmMaxFrameBytes breaks the
  // protocol.
  uint32_t length;
  uint32_t reserved;
  uint8_t bytes[kShmMaxFrameBytes];
};

static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

inline std::atomic_ref<uint64_t> sequence_word(MailboxSlot& slot) {
  return std::atomic_ref<uint64_t>(slot.biased_sequence);
}

// The length is read once, through an atomic, so the value bounded is the
// value used even while a misbehaving producer rewrites it.
inline std::atomic_ref<uint32_t> length_word(MailboxSlot& slot) {
  return std::atomic_ref<uint32_t>(slot.length);
}

struct MailboxHeader {
  std::atomic<uint64_t> magic;  // published last, with release
  uint32_t version;
  uint32_t slot_count;
  uint32_t slot_bytes;
  uint32_t max_frame_bytes;
  uint64_t total_bytes;
  alignas(64) std::atomic<uint64_t> enqueue_position;  // producers' claim counter
  // The futex word: 0 awake, 1 asleep, 2 asleep while application threads
  // poll again and again (see ShmMailbox::ring_doorbell).
  alignas(64) std::atomic<uint32_t> consumer_sleeping;
  // The futex word of the owner's application thread that waits for
  // completion events and serves the ring itself meanwhile: 1 while it
  // sleeps, set to 0 by the producer that wakes it (rather than the
  // consumer). Beside `consumer_sleeping`: producers read both.
  std::atomic<uint32_t> application_sleeping;
  std::atomic<uint32_t> wake_requested;                // wake() before wait()
  std::atomic<uint64_t> abandoned_slots;               // given up, see ShmMailbox::peek
  // Application threads polling now (bits 0-14), a skipped-doorbell mark
  // (bit 15) and the polls begun, wrapping (bits 16-31). On a line of its
  // own: the owner writes it twice a poll, producers read it only when the
  // consumer sleeps.
  alignas(64) std::atomic<uint32_t> pollers;
  std::atomic<uint32_t> accepting_runs;  // the owner pulls runs' payloads (see run_frame.h)
  // 1 while the owner's standing poll announcement (emulator/engine/
  // standing_poll.h) is between polls: a poll returned completions and the
  // program has not polled since. Producers then treat it as no poller.
  // Written with plain stores, beside `pollers` so producers read both at once.
  std::atomic<uint32_t> poll_paused;
  // The consumer's position at the end of its last pass of intake: every
  // frame before it has been served and answered. Producers read it only
  // when a local ACK timeout expires (emulator/same_host/fair_timeout.h).
  alignas(64) std::atomic<uint64_t> served_position;
};

constexpr size_t mailbox_header_bytes() {
  return (sizeof(MailboxHeader) + alignof(MailboxSlot) - 1) / alignof(MailboxSlot) *
         alignof(MailboxSlot);
}

constexpr size_t mailbox_target_area_offset(uint32_t slot_count) {
  return mailbox_header_bytes() + sizeof(MailboxSlot) * static_cast<size_t>(slot_count);
}

constexpr size_t mailbox_segment_bytes(uint32_t slot_count) {
  return mailbox_target_area_offset(slot_count) + kMailboxTargetAreaBytes;
}

}  // namespace softverbs
