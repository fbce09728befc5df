#include "emulator/wire/shm_mailbox.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "emulator/wire/cpu_relax.h"
#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

// MailboxHeader::pollers: how many application threads poll, a mark that
// a producer skipped the doorbell because of them, and how many polls
// began (wrapping).
constexpr uint32_t kPollerCountMask = (1u << 14) - 1;
// One of the pollers counted is the standing announcement.
constexpr uint32_t kStandingPoller = 1u << 14;
constexpr uint32_t kDoorbellSkipped = 1u << 15;
constexpr uint32_t kPollEpochShift = 16;

// MailboxHeader::consumer_sleeping.
constexpr uint32_t kAwake = 0;
constexpr uint32_t kAsleep = 1;
// Asleep, but application threads of the owner poll again and again: one
// is likely back within moments to take a frame itself.
constexpr uint32_t kAsleepBesidePollers = 2;
// How long a producer waits for such a poller before it wakes the
// sleeper. A wake costs the sender a system call and, where cores are few,
// takes one from a spinning application; a poll loop's gap between two
// polls is far shorter.
constexpr uint64_t kPollerReturnNs = 2'000;

// The header of a mapped segment, checked against the segment's size. The
// fields are read once each; the slot count returned is the one to use.
Errno check_header(const MailboxHeader& header, size_t segment_size, uint32_t& slot_count) {
  if (header.magic.load(std::memory_order_acquire) != kMailboxMagic) return EAGAIN;
  const uint32_t version = header.version;
  const uint32_t slots = header.slot_count;
  const uint32_t slot_bytes = header.slot_bytes;
  const uint32_t max_frame_bytes = header.max_frame_bytes;
  const uint64_t total_bytes = header.total_bytes;
  if (version != kMailboxVersion || !is_valid_mailbox_slot_count(slots) ||
      slot_bytes != sizeof(MailboxSlot) || max_frame_bytes != kShmMaxFrameBytes ||
      total_bytes != segment_size || total_bytes != mailbox_segment_bytes(slots)) {
    return EPROTO;
  }
  slot_count = slots;
  return 0;
}

}  // namespace

uint64_t ShmMailbox::monotonic_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

ShmMailbox::ShmMailbox(ShmSegment segment, uint32_t slot_count)
    : segment_(std::move(segment)), slot_count_(slot_count), slot_mask_(slot_count - 1u) {
  auto* base = static_cast<uint8_t*>(segment_.address());
  header_ = reinterpret_cast<MailboxHeader*>(base);
  slots_ = reinterpret_cast<MailboxSlot*>(base + mailbox_header_bytes());
}

ShmMailbox::~ShmMailbox() {
  if (!unlink_on_destroy_.empty() && getpid() == creator_pid_) unlink_segment(unlink_on_destroy_);
}

std::unique_ptr<ShmMailbox> ShmMailbox::create(const std::string& name, uint32_t slot_count,
                                               Errno& err) {
  if (!is_valid_mailbox_slot_count(slot_count)) {
    err = EINVAL;
    return nullptr;
  }
  const size_t bytes = mailbox_segment_bytes(slot_count);
  ShmSegment segment;
  err = ShmSegment::create_exclusive(name, bytes, segment);
  if (err == EEXIST) {
    // Names carry a generation that is never reused while the registry
    // lives, so this is the leftover of a crash from an earlier registry.
    unlink_segment(name);
    err = ShmSegment::create_exclusive(name, bytes, segment);
  }
  if (err != 0) return nullptr;
  if ((err = segment.map(bytes, /*populate=*/true)) != 0) {
    unlink_segment(name);
    return nullptr;
  }
  segment.close_descriptor();

  // The segment is zeros; construct the header's atomics in place.
  auto* header = new (segment.address()) MailboxHeader{};
  header->version = kMailboxVersion;
  header->slot_count = slot_count;
  header->slot_bytes = sizeof(MailboxSlot);
  header->max_frame_bytes = kShmMaxFrameBytes;
  header->total_bytes = bytes;
  header->magic.store(kMailboxMagic, std::memory_order_release);

  std::unique_ptr<ShmMailbox> mailbox(new (std::nothrow)
                                          ShmMailbox(std::move(segment), slot_count));
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
  // The size shows once the creator has reserved the memory.
  const auto size = static_cast<size_t>(st.st_size);
  if (size < mailbox_header_bytes()) {
    err = EAGAIN;
    return nullptr;
  }
  if (size < mailbox_segment_bytes(kMinMailboxSlots) ||
      size > mailbox_segment_bytes(kMaxMailboxSlots)) {
    err = EPROTO;
    return nullptr;
  }
  if ((err = segment.map(size, /*populate=*/true)) != 0) return nullptr;
  segment.close_descriptor();
  uint32_t slot_count = 0;
  err = check_header(*static_cast<const MailboxHeader*>(segment.address()), size, slot_count);
  if (err != 0) return nullptr;
  std::unique_ptr<ShmMailbox> mailbox(new (std::nothrow)
                                          ShmMailbox(std::move(segment), slot_count));
  err = mailbox ? 0 : ENOMEM;
  return mailbox;
}

uint64_t ShmMailbox::sequence_of(const MailboxSlot& slot, uint64_t position,
                                 std::memory_order order) const {
  return sequence_word(const_cast<MailboxSlot&>(slot)).load(order) + (position & slot_mask_);
}

// ---- Producer side.

ClaimResult ShmMailbox::reserve(Reservation& out) {
  // Enough attempts to step over a lap of positions set back, and far more
  // than producers racing for one slot ever need.
  const uint64_t max_attempts = 2 * uint64_t{slot_count_} + 64;
  const auto lap = static_cast<int64_t>(slot_count_);
  bool broken = false;
  ClaimResult result = ClaimResult::kFull;
  // Acquire on every read of the counter keeps the slot's sequence from
  // being read before it (a stale sequence would look like a violation).
  uint64_t position = header().enqueue_position.load(std::memory_order_acquire);
  for (uint64_t attempt = 0; attempt < max_attempts; ++attempt) {
    MailboxSlot& slot = slot_at(position);
    const auto lag = static_cast<int64_t>(sequence_of(slot, position) - position);
    if (lag == 0) {
      // Free for this lap: claim it (a failed exchange reloads `position`).
      if (header().enqueue_position.compare_exchange_weak(position, position + 1,
                                                          std::memory_order_acquire)) {
        out = Reservation{position, &slot};
        result = ClaimResult::kClaimed;
        break;
      }
    } else if (lag < 0) {
      // Full: the slot still holds the last lap's frame (lag 1 - N) or
      // claim (lag -N). Any other lag behind is a scribbled counter.
      if (lag != -lap && lag != 1 - lap) broken = true;
      break;
    } else if (help_past_set_back_claim(position)) {
      broken = true;
    }
  }
  if (!broken) return result;
  note_violation();
  return result == ClaimResult::kClaimed ? result : ClaimResult::kBroken;
}

void ShmMailbox::publish(const Reservation& reservation, size_t length) {
  MailboxSlot& slot = *reservation.slot;
  length_word(slot).store(static_cast<uint32_t>(std::min(length, kShmMaxFrameBytes)),
                          std::memory_order_relaxed);
  uint64_t expected = biased(reservation.position, reservation.position);
  // A compare-exchange, not a store: if the consumer gave this slot up
  // because we stalled too long, the frame is lost and the slot, already
  // handed to the next lap, must not be touched. Being sequentially
  // consistent, it also orders the publication before the doorbell check
  // below (the consumer does the mirror image in wait()).
  sequence_word(slot).compare_exchange_strong(
      expected, biased(reservation.position + 1, reservation.position), std::memory_order_seq_cst);
  // Even for an empty slot: frames published behind it wait for it.
  ring_doorbell();
}

void ShmMailbox::commit(const Reservation& reservation, std::span<const uint8_t> frame) {
  const size_t length = std::min(frame.size(), kShmMaxFrameBytes);
  std::memcpy(reservation.slot->bytes, frame.data(), length);
  publish(reservation, length);
}

ClaimResult ShmMailbox::try_push(std::span<const uint8_t> frame) {
  if (frame.empty() || frame.size() > kShmMaxFrameBytes) return ClaimResult::kFull;
  Reservation reservation;
  const ClaimResult result = reserve(reservation);
  if (result == ClaimResult::kClaimed) commit(reservation, frame);
  return result;
}

void ShmMailbox::ring_doorbell() {
  const uint32_t sleeping = header().consumer_sleeping.load(std::memory_order_seq_cst);
  const uint32_t application = header().application_sleeping.load(std::memory_order_seq_cst);
  if ((sleeping == kAwake && application == 0) || leave_to_poller(sleeping, application != 0))
    return;
  if (application != 0 && wake_application_sleeper()) return;
  if (sleeping == kAwake) return;
  if (sleeping == kAsleepBesidePollers) {
    // Bounded by the clock, looked at every 64 rounds (a pause lasts from
    // a few to a hundred cycles, depending on the CPU).
    const uint64_t give_up_ns = monotonic_ns() + kPollerReturnNs;
    for (uint32_t round = 1;; ++round) {
      cpu_relax();
      if (header().consumer_sleeping.load(std::memory_order_seq_cst) == kAwake) return;
      if (leave_to_poller(kAsleepBesidePollers, false)) return;
      if (round % 64 == 0 && monotonic_ns() >= give_up_ns) break;
    }
  }
  wake_sleeper();
}

uint32_t ShmMailbox::pollers_counted(uint32_t pollers, uint32_t sleeping,
                                     bool application_sleeps, std::memory_order order) const {
  const uint32_t count = pollers & kPollerCountMask;
  // A standing announcement counts while the consumer sleeps beside pollers
  // (it looks now and then whether the polls went on) and it is not paused,
  // and not while an application thread sleeps for completion events: the
  // program waits for events, and that thread serves the frame at once.
  const bool standing_counts =
      (pollers & kStandingPoller) == 0 ||
      (sleeping != kAsleep && !application_sleeps && header().poll_paused.load(order) == 0);
  return standing_counts || count == 0 ? count : count - 1;
}

bool ShmMailbox::leave_to_poller(uint32_t sleeping, bool application_sleeps) {
  // A poller of the owning process serves the frame; the last poller to
  // leave learns from the mark that a doorbell was skipped (end_poll()).
  std::atomic<uint32_t>& pollers = header().pollers;
  constexpr std::memory_order kOrder = std::memory_order_seq_cst;
  return pollers_counted(pollers.load(kOrder), sleeping, application_sleeps, kOrder) != 0 &&
         pollers_counted(pollers.fetch_or(kDoorbellSkipped, kOrder), sleeping, application_sleeps,
                         kOrder) != 0;
}

void ShmMailbox::wake_sleeper() {
  std::atomic<uint32_t>& sleeping = header().consumer_sleeping;
  // Clearing the word before the wake makes a consumer that has not reached
  // FUTEX_WAIT yet return from it at once instead of missing the wake.
  if (sleeping.load(std::memory_order_seq_cst) != 0 && sleeping.exchange(0) != 0) {
    futex_wake_shared(sleeping, 1);
  }
}

bool ShmMailbox::wake_application_sleeper() {
  // Whoever turns the word from 1 to 0 owns the wake: the sleeper then
  // serves the frame (end_application_sleep() tells it so). One that left
  // its sleep first turned it itself, and the waiter is rung instead.
  std::atomic<uint32_t>& word = header().application_sleeping;
  if (word.exchange(0, std::memory_order_seq_cst) == 0) return false;
  futex_wake_shared(word, 1);
  return true;
}

std::atomic<uint32_t>* ShmMailbox::begin_application_sleep() {
  if (application_sleep_taken_.exchange(true, std::memory_order_acquire)) return nullptr;
  std::atomic<uint32_t>& word = header().application_sleeping;
  word.store(1, std::memory_order_seq_cst);
  // A producer that published before seeing the announcement did not ring
  // for it: look once more (both sides sequentially consistent).
  if (has_ready_frame(std::memory_order_seq_cst)) word.store(0, std::memory_order_relaxed);
  return &word;
}

bool ShmMailbox::end_application_sleep() {
  const bool rung = header().application_sleeping.exchange(0, std::memory_order_seq_cst) != 1;
  application_sleep_taken_.store(false, std::memory_order_release);
  return rung;
}

void ShmMailbox::begin_poll(Poll poll) {
  constexpr uint32_t kOnePoll = 1 + (1u << kPollEpochShift);
  std::atomic<uint32_t>& pollers = header().pollers;
  if (poll == Poll::kThisCall) {
    pollers.fetch_add(kOnePoll, std::memory_order_seq_cst);
    return;
  }
  // At most one standing announcement: a second is a no-op, so threads
  // racing to announce need no lock.
  uint32_t now = pollers.load(std::memory_order_relaxed);
  while ((now & kStandingPoller) == 0 &&
         !pollers.compare_exchange_weak(now, now + kOnePoll + kStandingPoller,
                                        std::memory_order_seq_cst)) {
  }
}

bool ShmMailbox::polling() const {
  constexpr std::memory_order kOrder = std::memory_order_relaxed;
  return pollers_counted(header().pollers.load(kOrder), kAsleepBesidePollers, false, kOrder) != 0;
}

void ShmMailbox::set_poll_paused(bool paused) {
  header().poll_paused.store(paused ? 1 : 0, std::memory_order_release);
}

bool ShmMailbox::end_poll(Poll poll) {
  std::atomic<uint32_t>& pollers = header().pollers;
  uint32_t before = 0;
  if (poll == Poll::kThisCall) {
    before = pollers.fetch_sub(1, std::memory_order_seq_cst);
  } else {
    // Withdrawn once, whoever asks.
    before = pollers.load(std::memory_order_relaxed);
    do {
      if ((before & kStandingPoller) == 0) return false;
    } while (!pollers.compare_exchange_weak(before, before - 1 - kStandingPoller,
                                            std::memory_order_seq_cst));
  }
  if ((before & kPollerCountMask) != 1) return false;
  // The last poller out. A producer skipped the doorbell, or the waiter
  // sleeps in wait_while_polled() (it left the frames to us): a frame that
  // came after our last look must not be left to sit. The waiter announced
  // its sleep before looking at `pollers`, and we look at its announcement
  // after leaving, so one of us sees the other.
  if (before & kDoorbellSkipped) {
    pollers.fetch_and(~kDoorbellSkipped, std::memory_order_seq_cst);
  } else if (header().consumer_sleeping.load(std::memory_order_seq_cst) == kAwake) {
    return false;
  }
  return has_ready_frame(std::memory_order_seq_cst);
}

// ---- Consumer side.

bool ShmMailbox::has_ready_frame(std::memory_order order) const {
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  return sequence_of(slot_at(position), position, order) == position + 1;
}

bool ShmMailbox::peek(std::span<const uint8_t>& frame) {
  bool looking_for_stalls = false;
  for (uint32_t looked = 0; looked < slot_count_; ++looked) {
    const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
    const uint64_t sequence = sequence_of(slot_at(position), position);
    if (sequence == position + 1) {
      if (take_published(position, frame)) return true;
      continue;  // empty, or a length out of bounds: released
    }
    // At the consumer's position a slot is free or claimed for this lap
    // (`position`) or published in it; anything else is scribbled.
    if (sequence != position) {
      discard_scribbled(position, sequence);
      continue;
    }
    // Looking for a stalled producer reads the producers' claim counter,
    // whose cache line they write on every push: do it seldom while busy
    // polling, whenever wait() saw a claimed slot, and, once a slot was
    // given up, for the slots right behind it.
    if (!looking_for_stalls && (++empty_peeks_ % kEmptyPeeksPerStallCheck) != 0 &&
        !stall_check_due_.load(std::memory_order_relaxed))
      return false;
    stall_check_due_.store(false, std::memory_order_relaxed);
    if (!look_for_stall()) return false;
    looking_for_stalls = true;
  }
  return false;
}

// The slot at `position` is published. true with its frame; false when
// there is nothing to deliver (published empty, or with a length out of
// bounds), and then the slot is released.
bool ShmMailbox::take_published(uint64_t position, std::span<const uint8_t>& frame) {
  MailboxSlot& slot = slot_at(position);
  const uint32_t length = length_word(slot).load(std::memory_order_relaxed);
  if (length != 0 && length <= kShmMaxFrameBytes) {
    frame = std::span<const uint8_t>(slot.bytes, length);
    return true;
  }
  if (length != 0) note_violation();
  release_peeked();
  return false;
}

void ShmMailbox::release_peeked() {
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  // Free for the producer of the next lap.
  sequence_word(slot_at(position))
      .store(biased(position + slot_count_, position), std::memory_order_release);
  dequeue_position_.store(position + 1, std::memory_order_relaxed);
}

void ShmMailbox::wait(uint64_t timeout_ns) {
  if (timeout_ns == 0) return;
  std::atomic<uint32_t>& sleeping = header().consumer_sleeping;
  const uint32_t how = announce_sleep(/*pollers_now=*/false);
  // Re-check after announcing the sleep: a producer that published before
  // seeing the announcement is caught here, one that published after it
  // rings the doorbell.
  // (Sequentially consistent on both sides, so the two cannot both miss.)
  if (header().wake_requested.exchange(0) != 0 ||
      has_ready_frame(std::memory_order_seq_cst)) {
    sleeping.store(kAwake, std::memory_order_relaxed);
    return;
  }
  // A claimed slot will be published with a doorbell, unless its producer
  // died (or the counter was scribbled): then wake up in time to see to it.
  if (header().enqueue_position.load() != dequeue_position_.load(std::memory_order_relaxed)) {
    stall_check_due_.store(true, std::memory_order_relaxed);
    if (timeout_ns > stall_limit_ns_) timeout_ns = stall_limit_ns_;
  }
  futex_wait_shared(sleeping, how, timeout_ns);
  sleeping.store(kAwake, std::memory_order_relaxed);
  // The caller looks at all its work after wait() returns, so any wake()
  // that came in meanwhile has served its purpose. An exchange, so the
  // waker's writes before wake() are visible to the caller.
  header().wake_requested.exchange(0, std::memory_order_acq_rel);
}

void ShmMailbox::wait_while_polled(uint64_t timeout_ns) {
  if (timeout_ns == 0) return;
  std::atomic<uint32_t>& sleeping = header().consumer_sleeping;
  const uint32_t how = announce_sleep(/*pollers_now=*/true);
  // As wait(), except that a frame is left to a poller: one that comes
  // while it polls is its to take, and the last poller out wakes us for
  // one it leaves behind (end_poll()).
  if (header().wake_requested.exchange(0) != 0 ||
      (has_ready_frame(std::memory_order_seq_cst) && !polling_seq_cst())) {
    sleeping.store(kAwake, std::memory_order_relaxed);
    return;
  }
  futex_wait_shared(sleeping, how, timeout_ns);
  sleeping.store(kAwake, std::memory_order_relaxed);
  header().wake_requested.exchange(0, std::memory_order_acq_rel);
}

uint32_t ShmMailbox::announce_sleep(bool pollers_now) {
  // Polls began since the last sleep: the application polls in a loop, and
  // producers may give it a moment before waking us (ring_doorbell()).
  const uint32_t epoch = header().pollers.load(std::memory_order_relaxed) >> kPollEpochShift;
  const bool polls_seen = pollers_now || epoch != poll_epoch_at_last_sleep_;
  poll_epoch_at_last_sleep_ = epoch;
  const uint32_t how = polls_seen ? kAsleepBesidePollers : kAsleep;
  repair_application_sleeping();
  header().consumer_sleeping.store(how, std::memory_order_seq_cst);
  return how;
}

bool ShmMailbox::polling_seq_cst() const {
  constexpr std::memory_order kOrder = std::memory_order_seq_cst;
  return pollers_counted(header().pollers.load(kOrder), kAsleepBesidePollers, false, kOrder) != 0;
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

void ShmMailbox::publish_served() {
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  if (position == served_published_) return;
  served_published_ = position;
  header().served_position.store(position, std::memory_order_release);
}

ShmMailbox::Backlog ShmMailbox::backlog() const {
  const uint64_t served = header().served_position.load(std::memory_order_acquire);
  return Backlog{header().enqueue_position.load(std::memory_order_acquire), served};
}

ShmMailbox::Backlog ShmMailbox::own_backlog() const {
  const uint64_t served = dequeue_position_.load(std::memory_order_relaxed);
  return Backlog{header().enqueue_position.load(std::memory_order_acquire), served};
}

}  // namespace softverbs
