#include "emulator/wire/shm_mailbox.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

constexpr uint64_t kMailboxMagic = 0x78626d2d76667373ull;  // "ssfv-mbx"
constexpr uint32_t kMailboxVersion = 3;
constexpr uint64_t kSlotMask = kMailboxSlotCount - 1;
// MailboxHeader::pollers: how many application threads poll, and a mark
// that a producer skipped the doorbell because of them.
constexpr uint32_t kDoorbellSkipped = 1u << 31;
constexpr uint32_t kPollerCountMask = kDoorbellSkipped - 1;

constexpr size_t header_bytes() {
  return (sizeof(MailboxHeader) + alignof(MailboxSlot) - 1) / alignof(MailboxSlot) *
         alignof(MailboxSlot);
}

std::atomic_ref<uint64_t> sequence_word(MailboxSlot& slot) {
  return std::atomic_ref<uint64_t>(slot.biased_sequence);
}

uint64_t monotonic_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

size_t ShmMailbox::segment_bytes() {
  return header_bytes() + sizeof(MailboxSlot) * kMailboxSlotCount;
}

ShmMailbox::ShmMailbox(ShmSegment segment) : segment_(std::move(segment)) {
  auto* base = static_cast<uint8_t*>(segment_.address());
  header_ = reinterpret_cast<MailboxHeader*>(base);
  slots_ = reinterpret_cast<MailboxSlot*>(base + header_bytes());
}

ShmMailbox::~ShmMailbox() {
  if (!unlink_on_destroy_.empty() && getpid() == creator_pid_) unlink_segment(unlink_on_destroy_);
}

std::unique_ptr<ShmMailbox> ShmMailbox::create(const std::string& name, Errno& err) {
  ShmSegment segment;
  err = ShmSegment::create_exclusive(name, segment_bytes(), segment);
  if (err == EEXIST) {
    // Names carry a generation that is never reused while the registry
    // lives, so this is the leftover of a crash from an earlier registry.
    unlink_segment(name);
    err = ShmSegment::create_exclusive(name, segment_bytes(), segment);
  }
  if (err != 0) return nullptr;
  if ((err = segment.map(segment_bytes())) != 0) {
    unlink_segment(name);
    return nullptr;
  }
  segment.close_descriptor();

  // The segment is zeros; construct the header's atomics in place.
  auto* header = new (segment.address()) MailboxHeader{};
  header->version = kMailboxVersion;
  header->slot_count = kMailboxSlotCount;
  header->slot_bytes = sizeof(MailboxSlot);
  header->max_frame_bytes = kShmMaxFrameBytes;
  header->total_bytes = segment_bytes();
  header->magic.store(kMailboxMagic, std::memory_order_release);

  std::unique_ptr<ShmMailbox> mailbox(new (std::nothrow) ShmMailbox(std::move(segment)));
  if (!mailbox) {
    unlink_segment(name);
    err = ENOMEM;
    return nullptr;
  }
  mailbox->unlink_on_destroy_ = name;
  mailbox->creator_pid_ = getpid();
  err = 0;
  return mailbox;
}

std::unique_ptr<ShmMailbox> ShmMailbox::open(const std::string& name, Errno& err) {
  ShmSegment segment;
  if ((err = ShmSegment::open_existing(name, segment)) != 0) return nullptr;
  struct stat st;
  if ((err = segment.stat(st)) != 0) return nullptr;
  // The creator sizes the segment right after creating it.
  if (static_cast<size_t>(st.st_size) < sizeof(MailboxHeader)) {
    err = EAGAIN;
    return nullptr;
  }
  if (static_cast<size_t>(st.st_size) != segment_bytes()) {
    err = EPROTO;
    return nullptr;
  }
  if ((err = segment.map(segment_bytes())) != 0) return nullptr;
  segment.close_descriptor();
  const auto* header = static_cast<const MailboxHeader*>(segment.address());
  if (header->magic.load(std::memory_order_acquire) != kMailboxMagic) {
    err = EAGAIN;
    return nullptr;
  }
  if (header->version != kMailboxVersion || header->slot_count != kMailboxSlotCount ||
      header->slot_bytes != sizeof(MailboxSlot) || header->max_frame_bytes != kShmMaxFrameBytes ||
      header->total_bytes != segment_bytes()) {
    err = EPROTO;
    return nullptr;
  }
  std::unique_ptr<ShmMailbox> mailbox(new (std::nothrow) ShmMailbox(std::move(segment)));
  err = mailbox ? 0 : ENOMEM;
  return mailbox;
}

MailboxSlot& ShmMailbox::slot_at(uint64_t position) const { return slots_[position & kSlotMask]; }

uint64_t ShmMailbox::sequence_of(const MailboxSlot& slot, uint64_t position,
                                 std::memory_order order) const {
  return sequence_word(const_cast<MailboxSlot&>(slot)).load(order) + (position & kSlotMask);
}

// ---- Producer side.

bool ShmMailbox::reserve(Reservation& out) {
  uint64_t position = header().enqueue_position.load(std::memory_order_relaxed);
  for (;;) {
    MailboxSlot& slot = slot_at(position);
    const auto lag = static_cast<int64_t>(sequence_of(slot, position) - position);
    if (lag == 0) {
      // Free for this lap: claim it.
      if (header().enqueue_position.compare_exchange_weak(position, position + 1,
                                                          std::memory_order_relaxed)) {
        out = Reservation{position, &slot};
        return true;
      }
    } else if (lag < 0) {
      return false;  // the consumer has not freed it since the last lap: full
    } else {
      position = header().enqueue_position.load(std::memory_order_relaxed);
    }
  }
}

void ShmMailbox::commit(const Reservation& reservation, std::span<const uint8_t> frame) {
  MailboxSlot& slot = *reservation.slot;
  slot.length = static_cast<uint32_t>(frame.size());
  std::memcpy(slot.bytes, frame.data(), frame.size());
  const uint64_t index = reservation.position & kSlotMask;
  uint64_t expected = reservation.position - index;
  // A compare-exchange, not a store: if the consumer gave this slot up
  // because we stalled too long, the frame is lost and the slot, already
  // handed to the next lap, must not be touched. Being sequentially
  // consistent, it also orders the publication before the doorbell check
  // below (the consumer does the mirror image in wait()).
  sequence_word(slot).compare_exchange_strong(expected, reservation.position + 1 - index,
                                              std::memory_order_seq_cst);
  ring_doorbell();
}

bool ShmMailbox::try_push(std::span<const uint8_t> frame) {
  if (frame.empty() || frame.size() > kShmMaxFrameBytes) return false;
  Reservation reservation;
  if (!reserve(reservation)) return false;
  commit(reservation, frame);
  return true;
}

void ShmMailbox::ring_doorbell() {
  // A poller of the owning process serves the frame; the last poller to
  // leave learns from the mark that a doorbell was skipped (end_poll()).
  std::atomic<uint32_t>& pollers = header().pollers;
  if (header().consumer_sleeping.load(std::memory_order_seq_cst) == 0) return;
  if ((pollers.load(std::memory_order_seq_cst) & kPollerCountMask) != 0 &&
      (pollers.fetch_or(kDoorbellSkipped, std::memory_order_seq_cst) & kPollerCountMask) != 0)
    return;
  wake_sleeper();
}

void ShmMailbox::wake_sleeper() {
  std::atomic<uint32_t>& sleeping = header().consumer_sleeping;
  // Clearing the word before the wake makes a consumer that has not reached
  // FUTEX_WAIT yet return from it at once instead of missing the wake.
  if (sleeping.load(std::memory_order_seq_cst) != 0 && sleeping.exchange(0) != 0) {
    futex_wake_shared(sleeping, 1);
  }
}

void ShmMailbox::begin_poll() { header().pollers.fetch_add(1, std::memory_order_seq_cst); }

bool ShmMailbox::polling() const {
  return (header().pollers.load(std::memory_order_relaxed) & kPollerCountMask) != 0;
}

bool ShmMailbox::end_poll() {
  std::atomic<uint32_t>& pollers = header().pollers;
  const uint32_t before = pollers.fetch_sub(1, std::memory_order_seq_cst);
  if ((before & kPollerCountMask) != 1 || !(before & kDoorbellSkipped)) return false;
  // The last poller out, and a producer skipped the doorbell: if its frame
  // came after our last look, the waiter must be woken for it.
  pollers.fetch_and(~kDoorbellSkipped, std::memory_order_seq_cst);
  return has_ready_frame(std::memory_order_seq_cst);
}

// ---- Consumer side.

bool ShmMailbox::has_ready_frame(std::memory_order order) const {
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  return sequence_of(slot_at(position), position, order) == position + 1;
}

bool ShmMailbox::peek(std::span<const uint8_t>& frame) {
  for (;;) {
    const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
    MailboxSlot& slot = slot_at(position);
    if (sequence_of(slot, position) == position + 1) {
      // Read the length once and bound it: the producer is trusted to be of
      // this user, not to be bug-free.
      uint32_t length = slot.length;
      if (length > kShmMaxFrameBytes) length = kShmMaxFrameBytes;
      frame = std::span<const uint8_t>(slot.bytes, length);
      return true;
    }
    // Looking for a stalled producer reads the producers' claim counter,
    // whose cache line they write on every push: do it seldom while busy
    // polling, and whenever wait() saw a claimed slot.
    if ((++empty_peeks_ % kEmptyPeeksPerStallCheck) != 0 &&
        !stall_check_due_.load(std::memory_order_relaxed))
      return false;
    stall_check_due_.store(false, std::memory_order_relaxed);
    if (!skip_if_stalled()) return false;
  }
}

void ShmMailbox::release_peeked() {
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  MailboxSlot& slot = slot_at(position);
  // Free for the producer of the next lap.
  sequence_word(slot).store(position + kMailboxSlotCount - (position & kSlotMask),
                            std::memory_order_release);
  dequeue_position_.store(position + 1, std::memory_order_relaxed);
}

// The slot at the head is not published. If a producer claimed it (the claim
// counter is past it) and has not published it for the stall limit, it died
// or was stopped between the two steps; give the slot up so the frames
// behind it flow again. Returns true when it skipped the slot.
bool ShmMailbox::skip_if_stalled() {
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  if (header().enqueue_position.load(std::memory_order_acquire) <= position) return false;
  const uint64_t now = monotonic_ns();
  if (stalled_position_ != position) {
    stalled_position_ = position;
    stalled_since_ns_ = now;
    return false;
  }
  if (now - stalled_since_ns_ < stall_limit_ns_) return false;
  MailboxSlot& slot = slot_at(position);
  const uint64_t index = position & kSlotMask;
  uint64_t expected = position - index;
  if (!sequence_word(slot).compare_exchange_strong(expected,
                                                   position + kMailboxSlotCount - index)) {
    return true;  // published just now: peek will take it
  }
  header().abandoned_slots.fetch_add(1, std::memory_order_relaxed);
  dequeue_position_.store(position + 1, std::memory_order_relaxed);
  return true;
}

void ShmMailbox::wait(uint64_t timeout_ns) {
  if (timeout_ns == 0) return;
  std::atomic<uint32_t>& sleeping = header().consumer_sleeping;
  sleeping.store(1, std::memory_order_seq_cst);
  // Re-check after announcing the sleep: a producer that published before
  // seeing the announcement is caught here, one that published after it
  // rings the doorbell.
  // (Sequentially consistent on both sides, so the two cannot both miss.)
  if (header().wake_requested.exchange(0) != 0 ||
      has_ready_frame(std::memory_order_seq_cst)) {
    sleeping.store(0, std::memory_order_relaxed);
    return;
  }
  // A claimed slot will be published with a doorbell, unless its producer
  // died: then wake up in time to give it up.
  if (header().enqueue_position.load() != dequeue_position_.load(std::memory_order_relaxed)) {
    stall_check_due_.store(true, std::memory_order_relaxed);
    if (timeout_ns > stall_limit_ns_) timeout_ns = stall_limit_ns_;
  }
  futex_wait_shared(sleeping, 1, timeout_ns);
  sleeping.store(0, std::memory_order_relaxed);
  // The caller looks at all its work after wait() returns, so any wake()
  // that came in meanwhile has served its purpose. An exchange, so the
  // waker's writes before wake() are visible to the caller.
  header().wake_requested.exchange(0, std::memory_order_acq_rel);
}

void ShmMailbox::wake() {
  header().wake_requested.store(1, std::memory_order_seq_cst);
  wake_sleeper();
}

bool ShmMailbox::consumer_asleep() const {
  return header().consumer_sleeping.load(std::memory_order_acquire) != 0;
}

uint64_t ShmMailbox::abandoned_slots() const {
  return header().abandoned_slots.load(std::memory_order_relaxed);
}

}  // namespace softverbs
