// Packet intake: frames from the wire are decoded, checked against the port,
// demultiplexed by destination QPN, and handed to the QP, which gives
// requests to its responder and responses to its completer. Due timers are
// served in the same pass. One thread at a time (the intake lock).
#include "emulator/device_config.h"
#include "emulator/engine.h"
#include "emulator/qp_impl.h"

namespace softverbs {

size_t Engine::progress(size_t budget) {
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;  // another thread is serving
  const size_t served = wire_->poll([this](std::span<const uint8_t> f) { deliver(f); }, budget);
  run_due_timers();
  return served;
}

size_t Engine::progress_on_progress_thread(size_t budget) {
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return kIntakeBusy;  // an application thread is serving
  intake_on_progress_thread_.store(true, std::memory_order_relaxed);
  const size_t served = wire_->poll([this](std::span<const uint8_t> f) { deliver(f); }, budget);
  run_due_timers();
  intake_on_progress_thread_.store(false, std::memory_order_relaxed);
  return served;
}

size_t Engine::progress_for_application(size_t budget) {
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    // Another application thread serves: go on. The progress thread, though,
    // may have been preempted while serving (an application spinning here
    // on a busy core would keep it off the CPU): wait for it instead.
    if (!intake_on_progress_thread_.load(std::memory_order_relaxed)) return 0;
    lock.lock();
  }
  wire_->begin_application_poll();
  const size_t served = wire_->poll([this](std::span<const uint8_t> f) { deliver(f); }, budget);
  const bool unseen = wire_->end_application_poll();
  run_due_timers();
  lock.unlock();
  if (unseen) wire_->wake();  // a frame came that this poll did not take
  return served;
}

void Engine::deliver(std::span<const uint8_t> frame) {
  counters_.frames_received.fetch_add(1, std::memory_order_relaxed);
  packet::DecodedPacket pkt;
  if (packet::DecodeError e = packet::decode_ib(frame, pkt); e != packet::DecodeError::kNone) {
    counters_.frames_dropped_malformed.fetch_add(1, std::memory_order_relaxed);
    if (e == packet::DecodeError::kBadIcrc)
      counters_.frames_dropped_bad_icrc.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const DeviceDescription* device = find_device_by_lid(pkt.headers.lrh.dlid);
  if (!device && pkt.headers.has_grh) device = find_device_by_gid(pkt.headers.grh.dgid);
  if (device && !port_up(device->index)) {
    counters_.frames_dropped_port_down.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  QpImpl* qp = device ? find_qp(device->index, pkt.headers.bth.dest_qp) : nullptr;
  if (!qp) {
    counters_.frames_dropped_no_qp.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard qp_lock(qp->mutex);
  qp->receive(pkt);
}

void Engine::run_due_timers() {
  if (timers_.next_deadline_ns() == UINT64_MAX) return;
  const uint64_t now = clock_->now_ns();
  due_timers_.clear();
  timers_.take_due(now, due_timers_);
  for (TimerQueue::Key key : due_timers_) {
    QpImpl* qp = find_qp(static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key));
    if (!qp) continue;  // destroyed since: the entry is stale
    std::lock_guard qp_lock(qp->mutex);
    qp->completer.on_timer(now);
  }
}

}  // namespace softverbs
