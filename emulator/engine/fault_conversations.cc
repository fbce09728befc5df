// The fault injector's view of the engine's QPs (emulator/fault/frame_identity.h).
#include "emulator/engine/fault_conversations.h"

#include "emulator/objects/qp_impl.h"

namespace softverbs {

std::optional<fault::Conversation> Engine::FaultConversations::of(const QpImpl* qp) {
  if (!qp) return std::nullopt;
  return fault::Conversation{qp->ordinal, qp->first_sq_psn.load(std::memory_order_relaxed),
                             qp->first_rq_psn.load(std::memory_order_relaxed)};
}

std::optional<fault::Conversation> Engine::FaultConversations::of_sender(const WireAddress& dst) {
  // The sending thread holds the sender's lock: it stays.
  return of(dst.sender);
}

std::optional<fault::Conversation> Engine::FaultConversations::of_receiver(
    const packet::Headers& headers) {
  // In the intake, which keeps every QP it finds from being removed.
  const DeviceDescription* device = arrival_device(headers);
  return of(device ? engine_.find_qp(device->index, headers.bth.dest_qp) : nullptr);
}

}  // namespace softverbs
