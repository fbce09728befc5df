// ShmMailbox's repairs: what the mailbox does about a peer that broke the
// protocol. A producer may die between claiming a slot and publishing it;
// any process with the segment mapped may scribble on the header, the
// claim counter, a sequence word or the application sleeper's word. Each
// repair is counted as a violation, and none lets the consumer or a
// producer hang.
#include "emulator/wire/shm_mailbox.h"

namespace softverbs {

// The slot at `position` is already past this lap: normally another
// producer claimed it and moved the counter on. If the counter still reads
// `position`, it was set back (nothing in the protocol moves it backwards),
// so step it forward. Returns true on such a violation.
bool ShmMailbox::help_past_set_back_claim(uint64_t& position) {
  const uint64_t current = header().enqueue_position.load(std::memory_order_acquire);
  if (current != position) {
    position = current;
    return false;
  }
  if (header().enqueue_position.compare_exchange_strong(position, position + 1,
                                                        std::memory_order_acquire)) {
    ++position;
  }
  return true;
}

void ShmMailbox::repair_application_sleeping() {
  // With no application thread of ours asleep on it (and none able to
  // start while we hold its part), a value in the word is another
  // process's scribble: producers would ring no one for good.
  if (application_sleep_taken_.exchange(true, std::memory_order_acquire)) return;
  if (header().application_sleeping.load(std::memory_order_relaxed) != 0) {
    header().application_sleeping.store(0, std::memory_order_relaxed);
    note_violation();
  }
  application_sleep_taken_.store(false, std::memory_order_release);
}

// A sequence word no producer of this protocol writes: free the slot for
// the next lap, as releasing it would, and move on.
void ShmMailbox::discard_scribbled(uint64_t position, uint64_t sequence) {
  note_violation();
  uint64_t expected = biased(sequence, position);
  if (sequence_word(slot_at(position))
          .compare_exchange_strong(expected, biased(position + slot_count_, position))) {
    dequeue_position_.store(position + 1, std::memory_order_relaxed);
  }
  // Otherwise it changed meanwhile: the caller looks again.
}

// The slot at the head is not published. If a producer claimed it (the claim
// counter is past it) and has not published it for the stall limit, it died
// or was stopped between the two steps; give the slot up so the frames
// behind it flow again. Slots claimed before the stall was first seen are
// as old, and are given up without a new wait. A claim counter that no
// producer could have left is repaired. Returns true when it skipped the
// slot (or the slot changed): look at the head again.
bool ShmMailbox::look_for_stall() {
  restore_header();
  const uint64_t position = dequeue_position_.load(std::memory_order_relaxed);
  const uint64_t claimed = header().enqueue_position.load(std::memory_order_acquire);
  // Producers never claim behind the consumer nor more than a lap ahead
  // of it, and the counter never goes back: anything else was scribbled.
  if (claimed - position > slot_count_ || (stall_watched_ && claimed < stall_end_)) {
    return repair_claim_counter();
  }
  if (claimed == position) return false;  // nothing claimed: just empty
  const uint64_t now = monotonic_ns();
  if (!stall_watched_ || position < stall_begin_ || position >= stall_end_) {
    stall_watched_ = true;
    stall_begin_ = position;
    stall_end_ = claimed;
    stalled_since_ns_ = now;
    return false;
  }
  if (now - stalled_since_ns_ < stall_limit_ns_) return false;
  uint64_t expected = biased(position, position);
  if (!sequence_word(slot_at(position))
           .compare_exchange_strong(expected, biased(position + slot_count_, position))) {
    return true;  // published (or scribbled) just now: peek looks again
  }
  header().abandoned_slots.fetch_add(1, std::memory_order_relaxed);
  dequeue_position_.store(position + 1, std::memory_order_relaxed);
  return true;
}

// The header's geometry, rewritten if anyone changed it, so producers that
// open the mailbox later are not refused. Seldom (with the stall checks):
// it reads a few words nobody writes.
void ShmMailbox::restore_header() {
  MailboxHeader& h = header();
  if (h.magic.load(std::memory_order_relaxed) == kMailboxMagic && h.version == kMailboxVersion &&
      h.slot_count == slot_count_ && h.slot_bytes == sizeof(MailboxSlot) &&
      h.max_frame_bytes == kShmMaxFrameBytes && h.total_bytes == segment_bytes()) {
    return;
  }
  note_violation();
  h.version = kMailboxVersion;
  h.slot_count = slot_count_;
  h.slot_bytes = sizeof(MailboxSlot);
  h.max_frame_bytes = kShmMaxFrameBytes;
  h.total_bytes = segment_bytes();
  h.magic.store(kMailboxMagic, std::memory_order_release);
}

// Points the claim counter back between the consumer and one lap ahead: at
// the first slot after the consumer that is not published, so producers
// claim what is free. A store, not a compare-exchange: producers stepping
// over what they take for set-back claims may move the counter all the
// time, and would otherwise keep the repair from ever landing. Frames being
// written into slots claimed meanwhile, or before the counter was
// scribbled, may be overwritten: lost or spoiled, never a hang.
bool ShmMailbox::repair_claim_counter() {
  note_violation();
  stall_watched_ = false;
  uint64_t next = dequeue_position_.load(std::memory_order_relaxed);
  for (uint32_t looked = 0; looked < slot_count_; ++looked, ++next) {
    if (sequence_of(slot_at(next), next) != next + 1) break;
  }
  header().enqueue_position.store(next, std::memory_order_release);
  return false;
}

}  // namespace softverbs
