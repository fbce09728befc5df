// The fault injector's view of the engine's QPs: which QP of this process
// sends or receives a frame, by its creation ordinal and where its PSNs
// started (emulator/fault/frame_identity.h).
#pragma once

#include <optional>

#include "emulator/engine/engine.h"
#include "emulator/fault/frame_identity.h"

namespace softverbs {

class Engine::FaultConversations final : public fault::ConversationDirectory {
 public:
  explicit FaultConversations(Engine& engine) : engine_(engine) {}
  std::optional<fault::Conversation> of_sender(const WireAddress& dst) override;
  std::optional<fault::Conversation> of_receiver(const packet::Headers& headers) override;
  // Whether the plan answers this SEND to `qp` with an RNR NAK.
  bool answers_with_rnr(const QpImpl& qp, const packet::Headers& headers);
  void fault_applied(fault::Direction direction, const WireAddress& dst,
                     const packet::Headers& headers, fault::Action action,
                     uint32_t attempt) override;

 private:
  static std::optional<fault::Conversation> of(const QpImpl* qp);
  QpImpl* receiver(const packet::Headers& headers);
  Engine& engine_;
};

}  // namespace softverbs
