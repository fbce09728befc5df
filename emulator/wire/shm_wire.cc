#include "emulator/wire/shm_wire.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <deque>
#include <new>
#include <string>

#include "emulator/wire/mailbox_slots.h"
#include "emulator/wire/shm_space.h"

namespace softverbs {
namespace {

// Millisecond-grained and served from the vDSO: cheap enough for every send.
uint64_t coarse_monotonic_ns() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

// Counters with one writer at a time (the send mutex, or the polling
// thread): a plain add, no locked instruction.
void bump(std::atomic<uint64_t>& counter, uint64_t by = 1) {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

// A process we send to: its mailbox, mapped once per generation, and the
// frames waiting for room in it.
struct ShmWire::Peer {
  ProcessRef process;
  // Null once the process is known dead. Shared: a peer's target area is
  // used outside the send lock.
  std::shared_ptr<ShmMailbox> mailbox;
  std::deque<std::vector<uint8_t>> deferred;
  // When the held frames last moved: the first was held, or one went in.
  uint64_t held_progress_ns = 0;
  uint64_t alive_checked_ns = 0;
};

ShmWire::ShmWire(ShmRegistry& registry, std::unique_ptr<ShmMailbox> inbox)
    : registry_(registry), inbox_(std::move(inbox)) {
  inbox_->count_violations_in(ring_protocol_violations_);
}

ShmWire::~ShmWire() = default;

std::unique_ptr<ShmWire> ShmWire::create(ShmRegistry& registry, Errno& err) {
  uint32_t slots = 0;
  std::string problem;
  if ((err = mailbox_slots_from_environment(slots, problem)) != 0) {
    std::fprintf(stderr, "softverbs: %s\n", problem.c_str());
    return nullptr;
  }
  std::unique_ptr<ShmWire> wire = create(registry, slots, err);
  if (!wire && err == ENOSPC) {
    report_shm_shortage("mailbox of this process", mailbox_segment_bytes(slots));
  }
  return wire;
}

std::unique_ptr<ShmWire> ShmWire::create(ShmRegistry& registry, uint32_t mailbox_slots,
                                         Errno& err) {
  const ProcessRef self = registry.self();
  if (self.generation == 0) {
    err = EINVAL;
    return nullptr;
  }
  try {
    std::unique_ptr<ShmMailbox> inbox =
        ShmMailbox::create(registry.mailbox_name_of(self), mailbox_slots, err);
    if (!inbox) return nullptr;
    std::unique_ptr<ShmWire> wire(new ShmWire(registry, std::move(inbox)));
    err = 0;
    return wire;
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
    return nullptr;
  }
}

void ShmWire::set_peer_unusable_deadline_ns(uint64_t deadline_ns) {
  std::lock_guard lock(send_mutex_);
  peer_unusable_deadline_ns_ = deadline_ns;
}

void ShmWire::count_unroutable(uint64_t frames) {
  if (frames != 0) frames_unroutable_.fetch_add(frames, std::memory_order_relaxed);
}

bool ShmWire::send(const WireAddress& dst, std::span<const uint8_t> frame) {
  if (frame.empty() || frame.size() > kShmMaxFrameBytes) return false;
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) {
    count_unroutable(1);
    return false;
  }
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  if (peer == nullptr) {
    count_unroutable(1);
    return false;
  }
  // Frames held for this process go first; then this one, if room is left.
  if (flush_deferred_locked(*peer) && peer->mailbox->try_push(frame) == ClaimResult::kClaimed) {
    bump(frames_sent_);
    return true;
  }
  return hold_locked(*peer, frame);
}

bool ShmWire::send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) {
  if (max_bytes == 0 || max_bytes > kShmMaxFrameBytes) return false;
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) {
    count_unroutable(1);
    return false;
  }
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  if (peer == nullptr) {
    count_unroutable(1);
    return false;
  }
  bool sent = false;
  if (flush_deferred_locked(*peer) && write_into_ring_locked(*peer, max_bytes, writer, sent)) {
    return sent;
  }
  return hold_written_locked(*peer, max_bytes, writer);
}

// Claims a slot of the peer's ring and has the writer fill it in place; a
// writer that writes nothing leaves an empty slot the consumer skips.
// false when the ring gave no slot (full or broken): nothing was written.
bool ShmWire::write_into_ring_locked(Peer& peer, size_t max_bytes, FrameWriter& writer,
                                     bool& sent) {
  ShmMailbox::Reservation reservation;
  if (peer.mailbox->reserve(reservation) != ClaimResult::kClaimed) return false;
  const size_t written = writer.write(ShmMailbox::room(reservation).first(max_bytes));
  sent = written != 0 && written <= max_bytes;
  peer.mailbox->publish(reservation, sent ? written : 0);
  if (sent) bump(frames_sent_);
  return true;
}

// The cached peer for the QPN's current owner, mapping its mailbox on first
// use. A new generation in the slot means the process we knew is gone: its
// held frames are dropped with it. nullptr when the owner is dead or has no
// mailbox.
ShmWire::Peer* ShmWire::peer_for_locked(const ProcessRef& owner) {
  std::unique_ptr<Peer>& cached = peers_[owner.slot];
  if (cached && cached->process.generation == owner.generation) {
    if (!cached->mailbox || !confirm_alive_locked(*cached, /*force=*/false)) return nullptr;
    return cached.get();
  }
  if (cached) forget_peer_locked(*cached);
  if (!cached) cached = std::make_unique<Peer>();
  cached->process = owner;
  cached->mailbox.reset();
  cached->alive_checked_ns = coarse_monotonic_ns();
  if (!registry_.is_alive(owner)) return nullptr;
  Errno err = 0;
  cached->mailbox = ShmMailbox::open(registry_.mailbox_name_of(owner), err);
  if (!cached->mailbox) {
    // Not created yet (EAGAIN/ENOENT): look again next time rather than
    // remembering the process as dead.
    cached->process.generation = 0;
    return nullptr;
  }
  cached->mailbox->count_violations_in(ring_protocol_violations_);
  return cached.get();
}

// Checks at most every kPeerLivenessIntervalNs (unless forced) that the peer
// still runs; forgets it when it does not.
bool ShmWire::confirm_alive_locked(Peer& peer, bool force) {
  const uint64_t now = coarse_monotonic_ns();
  if (!force && now - peer.alive_checked_ns < kPeerLivenessIntervalNs) return true;
  peer.alive_checked_ns = now;
  if (registry_.is_alive(peer.process)) return true;
  forget_peer_locked(peer);
  return false;
}

// Unmaps a dead or replaced peer's mailbox; its held frames have nowhere to
// go and count as unroutable. The entry stays, so later sends to the same
// dead generation fail without a syscall.
void ShmWire::forget_peer_locked(Peer& peer) {
  const uint64_t dropped = peer.deferred.size();
  peer.deferred.clear();
  peer.mailbox.reset();
  deferred_frames_.fetch_sub(dropped, std::memory_order_relaxed);
  count_unroutable(dropped);
}

// Held frames that made no progress for the deadline are dropped: the peer
// is alive (or we could not tell) but takes nothing, or its ring is broken.
bool ShmWire::drop_if_unusable_locked(Peer& peer) {
  if (peer.deferred.empty()) return false;
  const uint64_t now = coarse_monotonic_ns();
  if (now < peer.held_progress_ns + peer_unusable_deadline_ns_) return false;
  const uint64_t dropped = peer.deferred.size();
  peer.deferred.clear();
  deferred_frames_.fetch_sub(dropped, std::memory_order_relaxed);
  frames_dropped_peer_unusable_.fetch_add(dropped, std::memory_order_relaxed);
  return true;
}

// Holds a copy of `frame` behind the peer's other held frames.
bool ShmWire::hold_locked(Peer& peer, std::span<const uint8_t> frame) {
  std::vector<uint8_t> bytes;
  if (ready_to_hold_locked(peer)) {
    try {
      bytes.assign(frame.begin(), frame.end());
      if (defer_locked(peer, std::move(bytes))) return true;
    } catch (const std::bad_alloc&) {
    }
  }
  count_unroutable(1);
  return false;
}

// Has the writer write its frame into a new held frame.
bool ShmWire::hold_written_locked(Peer& peer, size_t max_bytes, FrameWriter& writer) {
  std::vector<uint8_t> bytes;
  if (ready_to_hold_locked(peer)) {
    try {
      bytes.resize(max_bytes);
    } catch (const std::bad_alloc&) {
      bytes.clear();
    }
    if (bytes.size() == max_bytes) {
      const size_t written = writer.write(bytes);
      if (written == 0 || written > max_bytes) return false;  // nothing to send
      bytes.resize(written);
      if (defer_locked(peer, std::move(bytes))) return true;
    }
  }
  count_unroutable(1);
  return false;
}

// Before holding a frame: a stale held queue is dropped, and a process that
// does not drain its mailbox is checked to be still there to drain it.
bool ShmWire::ready_to_hold_locked(Peer& peer) {
  drop_if_unusable_locked(peer);
  return !peer.deferred.empty() || confirm_alive_locked(peer, /*force=*/true);
}

bool ShmWire::defer_locked(Peer& peer, std::vector<uint8_t> frame) {
  try {
    if (peer.deferred.empty()) {
      if (std::find(slots_with_deferred_.begin(), slots_with_deferred_.end(),
                    peer.process.slot) == slots_with_deferred_.end()) {
        slots_with_deferred_.push_back(peer.process.slot);
      }
      peer.held_progress_ns = coarse_monotonic_ns();
    }
    peer.deferred.push_back(std::move(frame));
  } catch (const std::bad_alloc&) {
    return false;
  }
  deferred_frames_.fetch_add(1, std::memory_order_relaxed);
  bump(frames_deferred_);
  return true;
}

// Moves held frames into the peer's mailbox while it has room. True when
// none is left held.
bool ShmWire::flush_deferred_locked(Peer& peer) {
  bool moved = false;
  while (!peer.deferred.empty()) {
    if (peer.mailbox->try_push(peer.deferred.front()) != ClaimResult::kClaimed) break;
    peer.deferred.pop_front();
    deferred_frames_.fetch_sub(1, std::memory_order_relaxed);
    bump(frames_sent_);
    moved = true;
  }
  if (moved) peer.held_progress_ns = coarse_monotonic_ns();
  return peer.deferred.empty();
}

void ShmWire::push_deferred() {
  std::lock_guard lock(send_mutex_);
  auto still_waiting = [this](uint32_t slot) {
    Peer* peer = peers_[slot].get();
    if (peer == nullptr || peer->deferred.empty()) return false;
    // The slot may have a new owner since the frames were held; they were
    // for the old one (its mailbox is what we have mapped).
    if (!peer->mailbox || !confirm_alive_locked(*peer, /*force=*/false)) return false;
    if (flush_deferred_locked(*peer)) return false;
    return !drop_if_unusable_locked(*peer);
  };
  slots_with_deferred_.erase(
      std::remove_if(slots_with_deferred_.begin(), slots_with_deferred_.end(),
                     [&](uint32_t slot) { return !still_waiting(slot); }),
      slots_with_deferred_.end());
}

size_t ShmWire::poll(const std::function<void(std::span<const uint8_t>)>& deliver,
                     size_t budget) {
  if (deferred_frames_.load(std::memory_order_relaxed) != 0) push_deferred();
  size_t delivered = 0;
  std::span<const uint8_t> frame;
  while (delivered < budget && inbox_->peek(frame)) {
    deliver(frame);  // straight from the ring: no copy, no lock held
    inbox_->release_peeked();
    ++delivered;
  }
  if (delivered != 0) bump(frames_received_, delivered);
  return delivered;
}

void ShmWire::wait(uint64_t timeout_ns) {
  if (has_deferred() && timeout_ns > kDeferredRetryNs) timeout_ns = kDeferredRetryNs;
  inbox_->wait(timeout_ns);
}

void ShmWire::wake() { inbox_->wake(); }

void ShmWire::begin_application_poll() { inbox_->begin_poll(); }

bool ShmWire::end_application_poll() { return inbox_->end_poll(); }

void ShmWire::begin_standing_poll() { inbox_->begin_poll(ShmMailbox::Poll::kStanding); }

bool ShmWire::end_standing_poll() { return inbox_->end_poll(ShmMailbox::Poll::kStanding); }

bool ShmWire::application_polling() const { return inbox_->polling(); }

void ShmWire::pause_application_poll(bool paused) { inbox_->set_poll_paused(paused); }

void ShmWire::wait_while_application_polls(uint64_t timeout_ns) {
  // Held frames are pushed on by the pollers' polls.
  inbox_->wait_while_polled(timeout_ns);
}

bool ShmWire::accepts_runs(const WireAddress& dst) {
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) return false;
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  // A run behind held frames is held too, in order like any frame.
  return peer != nullptr && peer->mailbox->accepting_runs();
}

void ShmWire::set_accepting_runs(bool accepting) { inbox_->set_accepting_runs(accepting); }

PeerTargetArea ShmWire::peer_target_area(const WireAddress& dst, Attention attention) {
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) return {};
  const ProcessRef self = registry_.self();
  if (owner.slot == self.slot && owner.generation == self.generation) {
    // A QP of this process: the table is ours, and so is the memory.
    return PeerTargetArea{nullptr, inbox_->target_area(), false, true};
  }
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  if (peer == nullptr) return {};
  const ShmMailbox& mailbox = *peer->mailbox;
  return PeerTargetArea{
      peer->mailbox, mailbox.target_area(),
      attention == Attention::kAsk && (!mailbox.consumer_asleep() || mailbox.polling())};
}

bool ShmWire::push_now(const WireAddress& dst, const PeerTargetArea& target,
                       std::span<const uint8_t> frame) {
  if (frame.empty() || frame.size() > kShmMaxFrameBytes) return false;
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) return false;
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  // Only into the ring beside the area the caller holds, behind nothing held.
  if (peer == nullptr || static_cast<const void*>(peer->mailbox.get()) != target.keep.get() ||
      !flush_deferred_locked(*peer))
    return false;
  if (peer->mailbox->try_push(frame) != ClaimResult::kClaimed) return false;
  bump(frames_sent_);
  return true;
}

std::optional<IntakeBacklog> ShmWire::intake_backlog(const WireAddress& dst) {
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) return std::nullopt;
  const ProcessRef self = registry_.self();
  if (owner.slot == self.slot && owner.generation == self.generation) {
    const ShmMailbox::Backlog own = inbox_->own_backlog();
    return IntakeBacklog{own.claimed, own.served, inbox_->slot_count()};
  }
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  // Rare (a timer expired): worth asking the registry whether it still runs.
  if (peer == nullptr || !confirm_alive_locked(*peer, /*force=*/true)) return std::nullopt;
  const ShmMailbox::Backlog theirs = peer->mailbox->backlog();
  return IntakeBacklog{theirs.claimed, theirs.served, peer->mailbox->slot_count()};
}

bool ShmWire::may_have_input() const { return has_deferred() || inbox_->has_frame(); }

bool ShmWire::has_deferred() const {
  return deferred_frames_.load(std::memory_order_relaxed) != 0;
}

WireCounters ShmWire::counters() const {
  WireCounters counters;
  counters.frames_sent = frames_sent_.load(std::memory_order_relaxed);
  counters.frames_received = frames_received_.load(std::memory_order_relaxed);
  counters.frames_deferred = frames_deferred_.load(std::memory_order_relaxed);
  counters.frames_unroutable = frames_unroutable_.load(std::memory_order_relaxed);
  counters.frames_dropped_peer_unusable =
      frames_dropped_peer_unusable_.load(std::memory_order_relaxed);
  counters.ring_protocol_violations = ring_protocol_violations_.load(std::memory_order_relaxed);
  return counters;
}

}  // namespace softverbs
