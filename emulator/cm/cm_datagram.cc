// UD ids: service ID resolution (SIDR_REQ/SIDR_REP, IBTA 12.11) tells a
// client the QPN and Q_Key of the server's UD QP, and multicast joins give
// the address of a group. Neither has a connection: no RTU, no DREQ.
#include <algorithm>
#include <cerrno>

#include "emulator/cm/cm_agent.h"
#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_id.h"
#include "emulator/cm/cm_path.h"
#include "emulator/cm/cm_timing.h"
#include "emulator/cm/cma_ip_header.h"
#include "emulator/cm/connection_manager.h"

namespace softverbs::cm {
namespace {

constexpr size_t kSidrReqUserDataBytes = SidrReqMessage::kPrivateDataBytes - kCmaIpHeaderBytes;
// The kernel's SIDR timeout: 4.096 us * 2^20, about 4 s, 15 retries.
constexpr uint8_t kSidrTimeoutCode = 20;

}  // namespace

Errno ConnectionManager::connect_datagram(Id& id, const ConnectionParams& params) {
  if (params.private_data.size() > kSidrReqUserDataBytes) return EINVAL;
  begin_request(id, params.qpn);
  SidrReqMessage req;
  req.request_id = id.local_comm_id;
  req.pkey = id.path.pkey;
  req.service_id = id.path.service_id;
  write_request_private_data(id, params.private_data, req.private_data);
  id.timeout_ns = time_code_ns(kSidrTimeoutCode);
  start_request(id, CmMad{id.transaction_id, 0, req});
  return 0;
}

void ConnectionManager::on_sidr_req(const CmMad& mad, const SidrReqMessage& req,
                                    const AgentAddress& from) {
  if (find_by_remote(req.request_id, from)) return;  // a repeat: ours is on its way
  Id* listener = nullptr;
  IpEndpoint local, remote;
  if (!match_listener(req.service_id, req.private_data, listener, local, remote)) {
    SidrRepMessage rep;
    rep.request_id = req.request_id;
    rep.status = SidrStatus::kUnsupportedServiceId;
    rep.service_id = req.service_id;
    send_to(CmMad{mad.transaction_id, 0, rep}, from);
    return;
  }
  if (!listener || listener->backlog_left == 0) return;
  --listener->backlog_left;
  Id& id = new_passive_id(*listener, local, remote);
  id.remote_comm_id = req.request_id;
  id.remote_agent = from;
  id.transaction_id = mad.transaction_id;
  id.path.service_id = req.service_id;
  id.path.pkey = req.pkey;
  // The kernel gives a UD request no path: the SIDR_REQ carries none.
  id.has_path = false;

  Event event;
  event.type = EventType::kConnectRequest;
  event.listen_id = listener->handle;
  event.datagram = true;
  event.params.private_data =
      std::vector<uint8_t>(req.private_data.begin() + kCmaIpHeaderBytes, req.private_data.end());
  post(id, event);
}

void ConnectionManager::send_sidr_rep(Id& id, uint8_t status, uint32_t qpn, uint32_t qkey,
                                      std::span<const uint8_t> private_data) {
  SidrRepMessage rep;
  rep.request_id = id.remote_comm_id;
  rep.status = static_cast<SidrStatus>(status);
  rep.qpn = qpn & 0xffffff;
  rep.service_id = id.path.service_id;
  rep.qkey = qkey;
  std::copy_n(private_data.begin(), std::min(private_data.size(), rep.private_data.size()),
              rep.private_data.begin());
  send_to(CmMad{id.transaction_id, 0, rep}, id.remote_agent);
  // A SIDR exchange ends with its reply: nothing more comes for this id.
  id.cm = CmState::kIdle;
}

void ConnectionManager::on_sidr_rep(const SidrRepMessage& rep) {
  Id* id = find_by_comm_id(rep.request_id);
  if (!id || id->qp_type != QpType::kUd || id->cm != CmState::kReqSent) return;
  id->awaiting_reply = false;
  id->deadline_ns = 0;
  id->cm = CmState::kIdle;
  Event event;
  event.datagram = true;
  event.params.private_data.assign(rep.private_data.begin(), rep.private_data.end());
  if (rep.status == SidrStatus::kSuccess) {
    event.type = EventType::kEstablished;
    event.params.qpn = rep.qpn;
    event.params.qkey = rep.qkey;
    event.av = address_vector_for(id->device_index, id->path);
    event.av.is_global = true;  // the kernel's AH from a path always has a GRH
    event.av.dgid = id->path.dgid;
    event.av.sgid_index = gid_index_of(id->device_index, id->path.sgid);
  } else {
    event.type = EventType::kUnreachable;
    event.status = static_cast<int32_t>(rep.status);
  }
  post(*id, event);
}

Errno ConnectionManager::join_multicast(uint32_t handle, const IpEndpoint& group,
                                        uint64_t cookie) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if ((id->state != IdState::kAddrBound && id->state != IdState::kAddrResolved) ||
      !id->has_device || !is_multicast(group))
    return EINVAL;
  Event event;
  event.type = EventType::kMulticastJoin;
  event.datagram = true;
  event.multicast = cookie;
  event.params.qpn = kMulticastQpn;
  event.params.qkey = kRdmaUdpQkey;
  AddressVector& av = event.av;
  av.port_num = 1;
  av.is_global = true;
  av.dgid = multicast_gid_of(id->device_index, group);
  av.dlid = multicast_lid_of(id->device_index, av.dgid);
  av.sgid_index = gid_index_of(id->device_index, gid_of(id->device_index, id->source));
  av.hop_limit = device_at(id->device_index).link_layer == LinkLayer::kEthernet ? 1 : 0;
  post(*id, event);
  return 0;
}

}  // namespace softverbs::cm
