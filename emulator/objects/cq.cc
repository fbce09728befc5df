// Completion queues: the ring, arming, and polling (which drives progress).
#include <cerrno>

#include "emulator/engine/engine.h"
#include "emulator/objects/cq_impl.h"
#include "emulator/objects/hca_impl.h"
#include "emulator/transport/ack_batch.h"

namespace softverbs {

Cq::Cq(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }
Cq::~Cq() = default;

uint32_t Cq::capacity() const {
  std::lock_guard lock(impl_->mutex);  // resize() replaces the ring
  return static_cast<uint32_t>(impl_->ring.size());
}

// Under the CQ's lock, so timestamps never go back along the ring.
void Cq::Impl::stamp(Completion& completion) const {
  if (stamps & kStampTimestamp) completion.timestamp_ns = engine->clock().now_ns();
  if (stamps & kStampWallclock) completion.wallclock_ns = engine->clock().wallclock_ns();
}

void Cq::Impl::push(const Completion& completion, bool solicited) {
  bool event = false, overflow = false;
  {
    std::lock_guard lock(mutex);
    if (overflowed.load(std::memory_order_relaxed)) return;
    const uint64_t t = tail.load(std::memory_order_relaxed);
    if (t - head.load(std::memory_order_relaxed) >= ring.size()) {
      overflowed.store(true, std::memory_order_relaxed);
      overflow = true;
    } else {
      Completion& slot = ring[t % ring.size()];
      slot = completion;
      if (stamps) stamp(slot);
      tail.store(t + 1, std::memory_order_release);
      if (arm == Arm::kNext || (arm == Arm::kSolicited && solicited)) {
        arm = Arm::kNone;
        event = true;
      }
    }
  }
  // The sinks only record the event and signal an fd; called unlocked so a
  // poller is never held up by them.
  if (overflow) hca->impl().raise(AsyncEvent{AsyncEventType::kCqErr, nullptr, self, 0});
  if (event && sink) {
    // In a pass of intake, after the pass's ACKs (ack_batch.h).
    AckBatch* batch = AckBatch::current();
    if (!batch || !batch->defer_event(*sink, *self)) sink->on_completion_event(*self);
  }
}

int Cq::poll(std::span<Completion> out) {
  Impl& cq = *impl_;
  cq.polls.store(cq.polls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (cq.ready() < out.size()) cq.engine->poll_for_application();
  if (cq.ready() == 0 && !cq.overflowed.load(std::memory_order_relaxed)) {
    cq.engine->application_poll_found(false);
    return 0;
  }
  std::lock_guard lock(cq.mutex);
  if (cq.overflowed) return -1;
  uint64_t h = cq.head.load(std::memory_order_relaxed);
  const uint64_t t = cq.tail.load(std::memory_order_relaxed);
  size_t n = 0;
  while (n < out.size() && h != t) out[n++] = cq.ring[h++ % cq.ring.size()];
  cq.head.store(h, std::memory_order_release);
  cq.engine->application_poll_found(n != 0);
  return static_cast<int>(n);
}

Errno Cq::arm(bool solicited_only) {
  {
    std::lock_guard lock(impl_->mutex);
    // "Next" wins over "solicited" until the event fires (IBTA 11.4.2.2).
    if (impl_->arm != Impl::Arm::kNext)
      impl_->arm = solicited_only ? Impl::Arm::kSolicited : Impl::Arm::kNext;
  }
  // The program is about to wait for the event: peers must ring again.
  // After arming, so a completion served here raises the event.
  impl_->engine->application_arms();
  return 0;
}

Errno Cq::resize(uint32_t cqe) {
  Impl& cq = *impl_;
  if (cqe == 0 || cqe > cq.hca->attributes().max_cqe) return EINVAL;
  std::vector<Completion> ring(cqe);  // taken, and the old one freed, unlocked
  std::lock_guard lock(cq.mutex);
  const uint64_t h = cq.head.load(std::memory_order_relaxed);
  const uint64_t t = cq.tail.load(std::memory_order_relaxed);
  if (t - h > cqe) return EINVAL;  // ibv_resize_cq(3): pending ones must fit
  // Indices only grow; each pending completion moves to its slot in the new ring.
  for (uint64_t n = h; n != t; ++n) ring[n % cqe] = cq.ring[n % cq.ring.size()];
  cq.ring.swap(ring);
  return 0;
}

void Cq::discard_completions_of(uint32_t qp_num) {
  Impl& cq = *impl_;
  std::lock_guard lock(cq.mutex);
  const uint64_t h = cq.head.load(std::memory_order_relaxed);
  const uint64_t t = cq.tail.load(std::memory_order_relaxed);
  const size_t size = cq.ring.size();
  // Kept completions slide towards the tail, so head only moves forward
  // and a poller that read `ready()` without the lock sees at most fewer.
  uint64_t kept_from = t;
  for (uint64_t n = t; n != h; --n) {
    const Completion& c = cq.ring[(n - 1) % size];
    if (c.qp_num == qp_num) continue;
    --kept_from;
    if (kept_from != n - 1) cq.ring[kept_from % size] = c;
  }
  cq.head.store(kept_from, std::memory_order_release);
}

void Cq::set_moderation(uint16_t count, uint16_t period_us) {
  std::lock_guard lock(impl_->mutex);
  impl_->moderation_count = count;
  impl_->moderation_period_us = period_us;
}

}  // namespace softverbs
