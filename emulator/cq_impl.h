// A completion queue: a bounded ring of completions plus the arming state
// for completion events (IBTA 11.4.2). Guarded by the engine lock.
#pragma once

#include <vector>

#include "emulator/hca.h"

namespace softverbs {

struct Cq::Impl {
  Hca* hca = nullptr;
  Engine* engine = nullptr;
  CompletionEventSink* sink = nullptr;
  Cq* self = nullptr;
  std::vector<Completion> ring;
  uint64_t head = 0;  // next to poll
  uint64_t tail = 0;  // next to fill
  enum class Arm : uint8_t { kNone, kNext, kSolicited } arm = Arm::kNone;
  bool overflowed = false;

  size_t size() const { return static_cast<size_t>(tail - head); }

  // Adds a completion; on a full CQ marks it overflowed (CQ error) and raises
  // IBV_EVENT_CQ_ERR. Fires a completion event when armed for it.
  void push(const Completion& completion, bool solicited);
};

}  // namespace softverbs
