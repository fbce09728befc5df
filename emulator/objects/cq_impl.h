// A completion queue: a bounded ring of completions plus the arming state
// for completion events (IBTA 11.4.2).
//
// Threads: the QP roles push under the QP's lock, then this CQ's lock (the
// lock order is QP, then CQ); a poller takes only this CQ's lock. head and
// tail are atomics so a poller can see an empty CQ without the lock.
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "emulator/objects/hca.h"

namespace softverbs {

struct Cq::Impl {
  ObjectQuota::Slot slot;  // its place in the device's CQ count
  Hca* hca = nullptr;
  Engine* engine = nullptr;
  CompletionEventSink* sink = nullptr;
  Cq* self = nullptr;

  std::mutex mutex;  // guards everything below; head/tail are written under it
  std::vector<Completion> ring;
  std::atomic<uint64_t> head{0};  // next to poll
  std::atomic<uint64_t> tail{0};  // next to fill
  enum class Arm : uint8_t { kNone, kNext, kSolicited } arm = Arm::kNone;
  std::atomic<bool> overflowed{false};  // written under the lock
  uint32_t stamps = 0;  // CqStamps; set at creation
  // Cq::set_moderation's values, kept for when events are moderated; until
  // then every armed CQ signals at its first completion, which a program
  // that polls after each event cannot tell from count = 1.
  uint16_t moderation_count = 0;
  uint16_t moderation_period_us = 0;
  // Calls of poll(), counted loosely (racing pollers may lose one): a
  // requester tells from it whether the application looks at completions
  // between its posts (requester.cc).
  alignas(64) std::atomic<uint64_t> polls{0};

  // Completions ready, read without the lock (may be stale by the time the
  // caller acts on it).
  size_t ready() const {
    return static_cast<size_t>(tail.load(std::memory_order_acquire) -
                               head.load(std::memory_order_relaxed));
  }

  // Adds a completion; on a full CQ marks it overflowed (CQ error) and raises
  // IBV_EVENT_CQ_ERR. Fires a completion event when armed for it. Takes the
  // CQ's lock.
  void push(const Completion& completion, bool solicited);
  // Records the times `stamps` asks for in a completion being pushed.
  void stamp(Completion& completion) const;
};

}  // namespace softverbs
