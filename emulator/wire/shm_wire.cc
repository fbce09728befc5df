#include "emulator/wire/shm_wire.h"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <new>

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
  std::unique_ptr<ShmMailbox> mailbox;  // null once the process is known dead
  std::deque<std::vector<uint8_t>> deferred;
  uint64_t alive_checked_ns = 0;
};

ShmWire::ShmWire(ShmRegistry& registry, std::unique_ptr<ShmMailbox> inbox)
    : registry_(registry), inbox_(std::move(inbox)) {}

ShmWire::~ShmWire() = default;

std::unique_ptr<ShmWire> ShmWire::create(ShmRegistry& registry, Errno& err) {
  const ProcessRef self = registry.self();
  if (self.generation == 0) {
    err = EINVAL;
    return nullptr;
  }
  try {
    std::unique_ptr<ShmMailbox> inbox = ShmMailbox::create(registry.mailbox_name_of(self), err);
    if (!inbox) return nullptr;
    std::unique_ptr<ShmWire> wire(new ShmWire(registry, std::move(inbox)));
    err = 0;
    return wire;
  } catch (const std::bad_alloc&) {
    err = ENOMEM;
    return nullptr;
  }
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
  if (flush_deferred_locked(*peer) && peer->mailbox->try_push(frame)) {
    bump(frames_sent_);
    return true;
  }
  // Before holding frames for a process that does not drain its mailbox,
  // make sure it is still there to drain it.
  if (peer->deferred.empty() && !confirm_alive_locked(*peer, /*force=*/true)) {
    count_unroutable(1);
    return false;
  }
  if (!defer_locked(*peer, frame)) {
    count_unroutable(1);
    return false;
  }
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

bool ShmWire::defer_locked(Peer& peer, std::span<const uint8_t> frame) {
  try {
    if (peer.deferred.empty() &&
        std::find(slots_with_deferred_.begin(), slots_with_deferred_.end(), peer.process.slot) ==
            slots_with_deferred_.end()) {
      slots_with_deferred_.push_back(peer.process.slot);
    }
    peer.deferred.emplace_back(frame.begin(), frame.end());
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
  while (!peer.deferred.empty()) {
    if (!peer.mailbox->try_push(peer.deferred.front())) return false;
    peer.deferred.pop_front();
    deferred_frames_.fetch_sub(1, std::memory_order_relaxed);
    bump(frames_sent_);
  }
  return true;
}

void ShmWire::push_deferred() {
  std::lock_guard lock(send_mutex_);
  auto still_waiting = [this](uint32_t slot) {
    Peer* peer = peers_[slot].get();
    if (peer == nullptr || peer->deferred.empty()) return false;
    // The slot may have a new owner since the frames were held; they were
    // for the old one (its mailbox is what we have mapped).
    if (!peer->mailbox || !confirm_alive_locked(*peer, /*force=*/false)) return false;
    return !flush_deferred_locked(*peer);
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

bool ShmWire::application_polling() const { return inbox_->polling(); }

bool ShmWire::accepts_runs(const WireAddress& dst) {
  ProcessRef owner;
  if (!registry_.find_qpn_owner(dst.device_index, dst.qpn, owner)) return false;
  std::lock_guard lock(send_mutex_);
  Peer* peer = peer_for_locked(owner);
  // A run behind held frames is held too, in order like any frame.
  return peer != nullptr && peer->mailbox->accepting_runs();
}

void ShmWire::set_accepting_runs(bool accepting) { inbox_->set_accepting_runs(accepting); }

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
  return counters;
}

}  // namespace softverbs
