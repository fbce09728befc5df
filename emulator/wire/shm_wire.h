// The shared-memory wire: carries frames between the softverbs processes of
// one user on one host, losslessly and in order per destination.
//
// Each process owns one mailbox (ShmMailbox) named after its registry slot
// and generation. send() looks up which process owns the destination QPN in
// the registry and copies the frame into that process's mailbox; poll()
// hands the frames of our own mailbox to the engine. A frame for a QPN of
// this process goes through our own mailbox like any other.
//
// When a destination mailbox is full, or its shared counters break the ring
// protocol, the frame is held in a local FIFO for that process and every
// later frame for it queues behind, so order holds; poll() pushes held
// frames on first. Sending never waits on a peer: if a destination takes
// none of its held frames for the unusable-peer deadline, they are dropped
// and counted (frames_dropped_peer_unusable), and RC's retransmission or an
// error status takes it from there. A frame whose destination has no live
// owner is dropped and counted (frames_unroutable).
//
// Our own mailbox has SOFTVERBS_MAILBOX_SLOTS slots (mailbox_slots.h); a
// peer's may have another count, read from its header.
//
// The mailbox is also the process's doorbell (doorbell.h), and the wire its
// same-host face (same_host_peers.h): the engine is given both beside the
// wire it sends through, which wrappers (the fault injector, the routed
// wire) may hide.
//
// Threads: send(), send_with(), wake(), has_deferred() and counters() from
// any thread; poll() and wait() from one thread at a time (the progress
// engine).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "emulator/types.h"
#include "emulator/wire/doorbell.h"
#include "emulator/wire/same_host_peers.h"
#include "emulator/wire/shm_mailbox.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/wire.h"

namespace softverbs {

class ShmWire final : public Wire, public SameHostPeers, public Doorbell {
 public:
  // Creates this process's mailbox (named after its slot in `registry`, with
  // the slot count SOFTVERBS_MAILBOX_SLOTS asks for, its memory reserved)
  // and returns the wire. `registry` must outlive the wire. Create the wire
  // before allocating QPNs: frames for a QPN whose owner has no mailbox yet
  // are unroutable. nullptr + err: EINVAL (a bad SOFTVERBS_MAILBOX_SLOTS),
  // ENOSPC (no room in /dev/shm), EACCES, ENOMEM...; for the first two, a
  // message on stderr says what is wrong and how to fix it.
  static std::unique_ptr<ShmWire> create(ShmRegistry& registry, Errno& err);
  // The same with an explicit slot count, and no message.
  static std::unique_ptr<ShmWire> create(ShmRegistry& registry, uint32_t mailbox_slots,
                                         Errno& err);
  ~ShmWire() override;

  ShmWire(const ShmWire&) = delete;
  ShmWire& operator=(const ShmWire&) = delete;

  // Frames of 1..kShmMaxFrameBytes bytes; anything else is refused (false).
  bool send(const WireAddress& dst, std::span<const uint8_t> frame) override;
  // Writes straight into a slot of the destination's ring when nothing is
  // held for it and it has room; otherwise into a held frame, behind the
  // others. `max_bytes` must be 1..kShmMaxFrameBytes. The writer runs with
  // the send lock held (and, in a slot, with the slot claimed: keep it short).
  bool send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) override;
  // Pushes held frames on, then delivers up to `budget` frames from our
  // mailbox. `deliver` runs with no lock held and may call send().
  size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
              size_t budget) override;
  bool has_deferred() const override;
  bool may_have_input() const override;
  bool accepts_runs(const WireAddress& dst) override;
  void set_accepting_runs(bool accepting) override;
  std::span<uint8_t> own_target_area() override { return inbox_->target_area(); }
  PeerTargetArea peer_target_area(const WireAddress& dst, Attention attention) override;
  bool push_now(const WireAddress& dst, const PeerTargetArea& target,
                std::span<const uint8_t> frame) override;
  std::optional<IntakeBacklog> intake_backlog(const WireAddress& dst) override;
  void intake_pass_ended() override { inbox_->publish_served(); }
  bool own_ring_drained() override {
    const ShmMailbox::Backlog backlog = inbox_->own_backlog();
    return backlog.claimed <= backlog.served;
  }
  uint64_t ring_damage() const override {
    return ring_protocol_violations_.load(std::memory_order_relaxed);
  }
  WireCounters counters() const override;

  // Doorbell. While frames are held, wait() sleeps at most
  // kDeferredRetryNs: the peer that frees room in its mailbox does not tell
  // us.
  void wait(uint64_t timeout_ns) override;
  void wake() override;
  void begin_application_poll() override;
  bool end_application_poll() override;
  void begin_standing_poll() override;
  bool end_standing_poll() override;
  bool application_polling() const override;
  void pause_application_poll(bool paused) override;
  void wait_while_application_polls(uint64_t timeout_ns) override;
  std::atomic<uint32_t>* begin_application_sleep() override {
    return inbox_->begin_application_sleep();
  }
  bool end_application_sleep() override { return inbox_->end_application_sleep(); }

  // Tests: how long a claimed slot of our mailbox may stay unpublished, and
  // how long a peer may take none of our held frames.
  void set_stall_limit_ns(uint64_t limit_ns) { inbox_->set_stall_limit_ns(limit_ns); }
  void set_peer_unusable_deadline_ns(uint64_t deadline_ns);
  uint32_t mailbox_slots() const { return inbox_->slot_count(); }
  const ShmMailbox& inbox() const { return *inbox_; }

  static constexpr uint64_t kDeferredRetryNs = 100'000;
  // How often a peer we send to is checked for being still alive.
  static constexpr uint64_t kPeerLivenessIntervalNs = 50'000'000;
  // Held frames of a peer that took none of them for this long are dropped.
  // Longer than a consumer's stall limit, so a peer that is waiting out a
  // producer stopped mid-write loses nothing.
  static constexpr uint64_t kDefaultPeerUnusableDeadlineNs = 5'000'000'000;

 private:
  struct Peer;
  ShmWire(ShmRegistry& registry, std::unique_ptr<ShmMailbox> inbox);

  Peer* peer_for_locked(const ProcessRef& owner);
  bool confirm_alive_locked(Peer& peer, bool force);
  void forget_peer_locked(Peer& peer);
  bool hold_locked(Peer& peer, std::span<const uint8_t> frame);
  bool hold_written_locked(Peer& peer, size_t max_bytes, FrameWriter& writer);
  bool ready_to_hold_locked(Peer& peer);
  bool defer_locked(Peer& peer, std::vector<uint8_t> frame);
  bool write_into_ring_locked(Peer& peer, size_t max_bytes, FrameWriter& writer,
                              bool& sent);
  bool flush_deferred_locked(Peer& peer);
  bool drop_if_unusable_locked(Peer& peer);
  void push_deferred();
  void count_unroutable(uint64_t frames);

  ShmRegistry& registry_;
  std::unique_ptr<ShmMailbox> inbox_;

  std::mutex send_mutex_;  // guards everything below but the atomics
  std::array<std::unique_ptr<Peer>, ShmRegistry::kMaxProcesses> peers_;  // by slot
  std::vector<uint32_t> slots_with_deferred_;
  uint64_t peer_unusable_deadline_ns_ = kDefaultPeerUnusableDeadlineNs;

  std::atomic<uint64_t> deferred_frames_{0};  // held right now
  std::atomic<uint64_t> frames_sent_{0};
  std::atomic<uint64_t> frames_received_{0};
  std::atomic<uint64_t> frames_deferred_{0};
  std::atomic<uint64_t> frames_unroutable_{0};
  std::atomic<uint64_t> frames_dropped_peer_unusable_{0};
  // Every mailbox we map counts the protocol violations it sees here.
  std::atomic<uint64_t> ring_protocol_violations_{0};
};

}  // namespace softverbs
