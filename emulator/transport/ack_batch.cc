#include "emulator/transport/ack_batch.h"

#include <mutex>

#include "emulator/objects/hca.h"
#include "emulator/objects/qp_impl.h"

namespace softverbs {

AckBatch::~AckBatch() {
  if (current_ != this) return;
  // Sending one may deliver frames within the process (local_delivery.h)
  // whose responders hold more: served in this same loop.
  for (size_t i = 0; i < count_; ++i) {
    QpImpl& qp = *holders_[i];
    std::lock_guard lock(qp.mutex);
    qp.responder.send_held_ack();
  }
  // No QP lock held: the sinks only record the event and signal an fd.
  for (size_t i = 0; i < event_count_; ++i) events_[i].sink->on_completion_event(*events_[i].cq);
  current_ = nullptr;
}

}  // namespace softverbs
