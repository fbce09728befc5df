#include "emulator/ack_batch.h"

#include <mutex>

#include "emulator/qp_impl.h"

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
  current_ = nullptr;
}

}  // namespace softverbs
