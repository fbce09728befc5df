// The fault injector's view of the engine's QPs (emulator/fault/frame_identity.h).
#include "emulator/engine/fault_conversations.h"

#include "emulator/fault/fault_injector.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/trace/protocol_events.h"

namespace softverbs {

std::optional<fault::Conversation> Engine::FaultConversations::of(const QpImpl* qp) {
  if (!qp) return std::nullopt;
  return fault::Conversation{qp->ordinal, qp->first_sq_psn.load(std::memory_order_relaxed),
                             qp->first_rq_psn.load(std::memory_order_relaxed)};
}

std::optional<fault::Conversation> Engine::FaultConversations::of_sender(const WireAddress& dst) {
  // The sending thread holds the sender's lock: it stays, and its
  // requester's count is this thread's to read.
  std::optional<fault::Conversation> conversation = of(dst.sender);
  if (conversation) conversation->resend_rounds = dst.sender->requester.resend_rounds();
  return conversation;
}

QpImpl* Engine::FaultConversations::receiver(const packet::Headers& headers) {
  // In the intake, which keeps every QP it finds from being removed.
  const DeviceDescription* device = arrival_device(headers);
  return device ? engine_.find_qp(device->index, headers.bth.dest_qp) : nullptr;
}

std::optional<fault::Conversation> Engine::FaultConversations::of_receiver(
    const packet::Headers& headers) {
  const QpImpl* qp = receiver(headers);
  std::optional<fault::Conversation> conversation = of(qp);
  if (conversation) conversation->discarded_unseen = qp->responder.discards_unseen(headers.bth.psn);
  return conversation;
}

bool Engine::FaultConversations::answers_with_rnr(const QpImpl& qp,
                                                  const packet::Headers& headers) {
  return engine_.fault_injector()->answers_with_rnr(*of(&qp), headers);
}

void Engine::FaultConversations::fault_applied(fault::Direction direction, const WireAddress& dst,
                                               const packet::Headers& headers,
                                               fault::Action action, uint32_t attempt) {
  const QpImpl* qp = direction == fault::Direction::kTx ? dst.sender : receiver(headers);
  if (qp) trace::fault_applied(*qp, direction, headers, action, attempt);
}

}  // namespace softverbs
