#include "emulator/cm/cm_gsi_router.h"

#include <variant>

#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cma_ip_header.h"

namespace softverbs::cm {
namespace {

// The service ID of a connection request, or 0.
uint64_t requested_service(const CmMad& mad) {
  if (const auto* req = std::get_if<ReqMessage>(&mad.message)) return req->service_id;
  if (const auto* sidr = std::get_if<SidrReqMessage>(&mad.message)) return sidr->service_id;
  return 0;
}

}  // namespace

bool route_request_to_agent(std::span<const uint8_t> mad, const Gid& destination,
                            CmPortDirectory& ports, uint32_t& agent_qpn) {
  CmMad decoded;
  if (decode_cm_mad(mad, decoded) != DecodeError::kNone) return false;
  const uint64_t service_id = requested_service(decoded);
  if (service_id == 0) return false;
  RdmaIpService service;
  CmPortBinding listener;
  if (parse_rdma_ip_service_id(service_id, service) &&
      ports.find_listener(static_cast<uint16_t>(service.space), service.port, destination,
                          listener)) {
    agent_qpn = listener.agent_qpn;
    return true;
  }
  return ports.any_listening_agent(agent_qpn);
}

}  // namespace softverbs::cm
