#include "emulator/cm/cm_messages.h"

namespace softverbs::cm {

const char* message_name(AttributeId id) {
  switch (id) {
    case AttributeId::kReq: return "REQ";
    case AttributeId::kMra: return "MRA";
    case AttributeId::kRej: return "REJ";
    case AttributeId::kRep: return "REP";
    case AttributeId::kRtu: return "RTU";
    case AttributeId::kDreq: return "DREQ";
    case AttributeId::kDrep: return "DREP";
    case AttributeId::kSidrReq: return "SIDR_REQ";
    case AttributeId::kSidrRep: return "SIDR_REP";
  }
  return "unknown";
}

AttributeId attribute_id(const CmMessage& message) {
  return std::visit([](const auto& m) { return m.kAttributeId; }, message);
}

}  // namespace softverbs::cm
