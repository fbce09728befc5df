// Packet intake: frames from the wire are decoded, checked against the port,
// demultiplexed by destination QPN, and handed to the QP, which gives
// requests to its responder and responses to its completer. Due timers are
// served in the same pass. One thread at a time (the intake lock).
#include <cstring>
#include <shared_mutex>

#include "emulator/engine/engine.h"
#include "emulator/host/device_config.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/same_host/run_frame.h"
#include "emulator/transport/ack_batch.h"
#include "emulator/wire/cpu_relax.h"
#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

// The port of `device` a packet arrives at: the one its DLID names, or on
// RoCE its DGID.
uint8_t arrival_port(const DeviceDescription& device, const packet::Headers& h) {
  if (uint8_t port = device.port_of_lid(h.lrh.dlid)) return port;
  if (h.has_grh)
    if (uint8_t port = device.port_of_gid(h.grh.dgid)) return port;
  return 1;
}

}  // namespace

size_t Engine::progress(size_t budget) {
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;  // another thread is serving
  return serve_intake_locked(budget);
}

size_t Engine::serve_intake_locked(size_t budget) {
  size_t served = 0;
  deferred_receive_flushes_.pass_begins();
  {
    AckBatch acks;  // sent at the end of this block, before the intake lock goes
    served = wire_->poll([this](std::span<const uint8_t> f) { deliver(f); }, budget);
    run_due_timers();
    if (deferred_receive_flushes_.any()) end_deferred_receive_flushes();
    audit_placed_sends();
  }
  // Everything taken is answered: peers' timers may count from here on
  // (fair_timeout.h).
  same_host_.intake_pass_ended();
  return served;
}

size_t Engine::progress_on_progress_thread(size_t budget) {
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return kIntakeBusy;  // an application thread is serving
  intake_on_progress_thread_.store(true, std::memory_order_relaxed);
  const size_t served = serve_intake_locked(budget);
  intake_on_progress_thread_.store(false, std::memory_order_relaxed);
  return served;
}

bool Engine::timers_worth_a_look() {
  // A busy poller that finds nothing takes no lock; timers are looked at on
  // every 16th such poll (a clock read each time would cost more than the
  // rest of the poll).
  return (++application_polls_ & 15) == 0 && timers_.next_deadline_ns() != UINT64_MAX;
}

size_t Engine::progress_for_application(size_t budget, IntakeBusy when_busy) {
  size_t served = 0;
  const bool timers_due_check = timers_worth_a_look();
  for (int round = 0;; ++round) {
    // Said around the whole poll, including an empty one: while it lasts,
    // peers skip the doorbell (see ShmMailbox::begin_poll).
    doorbell_.begin_application_poll();
    if (wire_->may_have_input() || (round == 0 && timers_due_check))
      served += serve_for_application(budget, when_busy);
    if (!doorbell_.end_application_poll()) return served;
    // A peer skipped the doorbell for a frame this poll did not take: take
    // it now, being here anyway, rather than wake the progress thread (a
    // wake costs tens of microseconds and then competes with this thread).
    if (round == kUnseenFrameRounds) {
      doorbell_.wake();
      return served;
    }
  }
}

size_t Engine::poll_for_application(size_t budget) {
  // A thread that armed a CQ since its last two empty polls waits for
  // events (it polls to drain, arms, polls once more, then sleeps): an
  // announcement left standing by it would only hold frames back from
  // the thread the sender would wake. Its polls announce themselves.
  if (empty_polls_since_arming_ < kEmptyPollsToStand)
    return progress_for_application(budget);
  standing_poll_.poll();
  const bool timers_due_check = timers_worth_a_look();
  if (!wire_->may_have_input() && !timers_due_check) return 0;
  return serve_for_application(budget, IntakeBusy::kGoOn);
}

void Engine::application_poll_found(bool completions) {
  if (completions) {
    standing_poll_.returned_completions();
  } else if (empty_polls_since_arming_ < kEmptyPollsToStand) {
    ++empty_polls_since_arming_;
  }
}

void Engine::application_arms() {
  empty_polls_since_arming_ = 0;
  withdraw_standing_poll();
}

void Engine::withdraw_standing_poll() {
  // A frame that came unrung: serve it here, being here anyway.
  if (standing_poll_.withdraw()) progress_for_application();
}

size_t Engine::serve_for_application(size_t budget, IntakeBusy when_busy) {
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    // Another application thread serves: go on, unless told to wait (then
    // asleep: on a busy machine a spin here takes the CPU from threads
    // with work). The progress thread serves for a few microseconds at
    // most, unless it was preempted (an application spinning here on a
    // busy core would keep it off the CPU): look again briefly, then wait
    // for it asleep.
    const bool progress_thread_serves = intake_on_progress_thread_.load(std::memory_order_relaxed);
    if (!progress_thread_serves && when_busy == IntakeBusy::kGoOn) return 0;
    for (int spin = 0; progress_thread_serves && spin < kIntakeSpins && !lock.try_lock(); ++spin)
      cpu_relax();
    if (!lock.owns_lock()) lock.lock();
  }
  return serve_intake_locked(budget);
}

Errno Engine::wait_serving_intake(std::atomic<uint32_t>& word, uint32_t expected) {
  if (!futex_wait_either_available()) return ENOSYS;
  // Senders leave frames to a standing poll rather than ring this thread.
  withdraw_standing_poll();
  std::atomic<uint32_t>* doorbell = doorbell_.begin_application_sleep();
  if (!doorbell) return ENOSYS;
  const int err = futex_wait_either(word, expected, *doorbell, 1);
  if (doorbell_.end_application_sleep()) {
    counters_.intake_by_event_waiter.fetch_add(1, std::memory_order_relaxed);
    // Another thread may be serving the very frame that rang. Wait for it
    // rather than go on: the frame would still be in the ring, the next
    // sleep would end at once, and this thread would spin on the ring
    // (taking a core from the thread serving it) until the frame is gone.
    progress_for_application(kEventWaiterBudget, IntakeBusy::kWait);
  }
  return err == EINTR ? EINTR : 0;
}

void Engine::deliver(std::span<const uint8_t> shared_frame) {
  counters_.frames_received.add();
  // The frame may sit in memory another process can still write (a mailbox
  // slot): copy it first, so what is checked below is exactly what is used.
  if (shared_frame.size() > intake_frame_.size()) {
    counters_.frames_dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::memcpy(intake_frame_.data(), shared_frame.data(), shared_frame.size());
  deliver_private(std::span<const uint8_t>(intake_frame_.data(), shared_frame.size()),
                  packet::Icrc::kComputed);
}

void Engine::deliver_kept(std::span<const uint8_t> frame) {
  std::shared_lock table(qp_table_mutex_);
  counters_.frames_received.add();
  deliver_private(frame, packet::Icrc::kOmitted);
}

void Engine::deliver_private(std::span<const uint8_t> frame, packet::Icrc icrc) {
  if (is_run_frame(frame)) return deliver_run(frame);
  if (is_placed_send_frame(frame)) return deliver_placed_send(frame);
  packet::DecodedPacket pkt;
  if (packet::DecodeError e = packet::decode_ib(frame, pkt, icrc); e != packet::DecodeError::kNone) {
    counters_.frames_dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    if (e == packet::DecodeError::kBadIcrc)
      counters_.frames_dropped_bad_icrc.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (pkt.headers.bth.dest_qp == kMulticastQpn) return deliver_multicast(pkt);
  QpImpl* qp = intake_destination(pkt.headers);
  if (!qp) return;
  std::lock_guard qp_lock(qp->mutex);
  qp->receive(pkt);
}

const DeviceDescription* Engine::arrival_device(const packet::Headers& h) {
  // A DGID names its device on either link layer, a DLID only on
  // InfiniBand: a RoCE packet's DLID is whatever its sender's address
  // handle held, which may be an InfiniBand device's LID on a mixed host.
  const DeviceDescription* device = h.has_grh ? find_device_by_gid(h.grh.dgid) : nullptr;
  return device ? device : find_device_by_lid(h.lrh.dlid);
}

QpImpl* Engine::intake_destination(const packet::Headers& h) {
  const DeviceDescription* device = arrival_device(h);
  if (device && !port_up(device->index, arrival_port(*device, h))) {
    counters_.frames_dropped_port_down.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  QpImpl* qp = device ? find_qp(device->index, h.bth.dest_qp) : nullptr;
  if (!qp) counters_.frames_dropped_no_qp.fetch_add(1, std::memory_order_relaxed);
  return qp;
}

void Engine::deliver_run(std::span<const uint8_t> frame) {
  RunFrame run;
  if (!decode_run(frame, run)) {
    counters_.frames_dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  QpImpl* qp = intake_destination(run.first);
  if (!qp) return;
  std::lock_guard qp_lock(qp->mutex);
  qp->receive_run(run);
}

void Engine::deliver_placed_send(std::span<const uint8_t> frame) {
  std::span<const uint8_t> bytes;
  PlacedSendPrefix prefix;
  packet::DecodedPacket pkt;
  if (!read_placed_send_frame(frame, bytes, prefix)) {
    // Spoilt in the ring, as a bad ICRC would say of a packet.
    counters_.frames_dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    counters_.frames_dropped_bad_icrc.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Its checksum, checked above, stands in for the ICRC.
  if (packet::decode_ib(bytes, pkt, packet::Icrc::kOmitted) != packet::DecodeError::kNone) {
    counters_.frames_dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Accepted before the port could go down since: no port check.
  const DeviceDescription* device = arrival_device(pkt.headers);
  QpImpl* qp = device ? find_qp(device->index, pkt.headers.bth.dest_qp) : nullptr;
  if (!qp) {
    counters_.frames_dropped_no_qp.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard qp_lock(qp->mutex);
  qp->receive_placed_send(pkt, prefix);
}

void Engine::defer_receive_flush(const QpImpl& qp) {
  deferred_receive_flushes_.add(qp.timer_key());
}

void Engine::end_deferred_receive_flushes() {
  // Only a ring found empty has given up every SEND placed before.
  if (!same_host_.own_ring_drained()) return;
  for (uint64_t key : deferred_receive_flushes_.take_due()) {
    QpImpl* qp = find_qp(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key));
    if (!qp) continue;  // destroyed since
    std::lock_guard qp_lock(qp->mutex);
    qp->end_deferred_receive_flush();
  }
}

void Engine::audit_placed_sends() {
  const uint64_t damage = counters_.frames_dropped_malformed.load(std::memory_order_relaxed) +
                          same_host_.ring_damage();
  if (damage == placed_damage_audited_ || !same_host_.own_ring_drained()) return;
  for (const auto& [key, qp] : qps_) {
    if (!qp->target_entry) continue;
    std::lock_guard qp_lock(qp->mutex);
    TargetEntryScope scope(*qp);  // no SEND is placed on it meanwhile
    if (!same_host_.own_ring_drained()) return;  // more came: the next pass looks again
    if (qp->placed_sends_missing()) qp->lose_placed_sends();
  }
  placed_damage_audited_ = damage;
}

void Engine::run_due_timers() {
  if (timers_.next_deadline_ns() == UINT64_MAX) return;
  const uint64_t now = clock_->now_ns();
  due_timers_.clear();
  timers_.take_due(now, due_timers_);
  for (TimerQueue::Key key : due_timers_) {
    // Held frames due: this pass's poll of the wire released them.
    if (key == kWireReleaseTimer) continue;
    QpImpl* qp = find_qp(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key));
    if (!qp) continue;  // destroyed since: the entry is stale
    std::lock_guard qp_lock(qp->mutex);
    qp->completer.on_timer(now);
  }
}

}  // namespace softverbs
