// The IBTA CM handshake (IBTA 12.6, 12.9): REQ, REP and RTU set up a
// connection, REJ refuses one, DREQ and DREP end one, and timewait keeps
// its QPN out of use a while. Timeouts and retries are the kernel CM's:
// 15 retries of a REQ, REP or DREQ, each waiting twice the packet lifetime
// plus the peer's response time.
#include <algorithm>
#include <cerrno>

#include "emulator/cm/cm_agent.h"
#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_id.h"
#include "emulator/cm/cm_path.h"
#include "emulator/cm/cm_timing.h"
#include "emulator/cm/cma_ip_header.h"
#include "emulator/cm/connection_manager.h"
#include "emulator/host/device_config.h"
#include "emulator/host/gsi_routing.h"

namespace softverbs::cm {
namespace {

constexpr uint8_t kCaAckDelay = 15;  // what softverbs devices advertise
constexpr uint16_t kDefaultPkey = 0xffff;
constexpr size_t kReqUserDataBytes = ReqMessage::kPrivateDataBytes - kCmaIpHeaderBytes;

template <size_t N>
std::array<uint8_t, N> padded(std::span<const uint8_t> data) {
  std::array<uint8_t, N> out{};
  std::copy_n(data.begin(), std::min(data.size(), N), out.begin());
  return out;
}

std::vector<uint8_t> bytes_of(std::span<const uint8_t> data) {
  return std::vector<uint8_t>(data.begin(), data.end());
}

CmaAddress cma_address_of(const IpEndpoint& endpoint) {
  if (!endpoint.ipv4) return endpoint.address;
  const Gid& a = endpoint.address;
  return cma_ipv4_address({a[12], a[13], a[14], a[15]});
}

IpEndpoint endpoint_of(const CmaAddress& address, uint16_t port, uint8_t ip_version) {
  IpEndpoint endpoint{address, port, ip_version == 4};
  if (endpoint.ipv4) endpoint.address[10] = endpoint.address[11] = 0xff;
  return endpoint;
}

// The transport a REQ names (IBTA 12.6.5): an XRC initiator's is the
// extended type XRC.
void set_req_transport(QpType type, ReqMessage& req) {
  req.transport_service_type = TransportServiceType::kRc;
  if (type == QpType::kUc) req.transport_service_type = TransportServiceType::kUc;
  if (type == QpType::kXrcSend) {
    req.transport_service_type = TransportServiceType::kExtended;
    req.extended_transport_type = kExtendedTransportXrc;
  }
}

// The QP type of the passive end of a REQ: the initiator's, or an XRC
// target for an XRC initiator. Another (RD, an unknown extended type) is
// taken as RC, as nothing here serves it.
QpType passive_qp_type(const ReqMessage& req) {
  switch (req.transport_service_type) {
    case TransportServiceType::kUc: return QpType::kUc;
    case TransportServiceType::kExtended:
      return req.extended_transport_type == kExtendedTransportXrc ? QpType::kXrcRecv
                                                                  : QpType::kRc;
    default: return QpType::kRc;
  }
}

// A REQ's path as the passive side sees it: local and remote swapped.
PathRecord path_from_req(const ReqMessage& req) {
  PathRecord path;
  const CmPath& p = req.primary_path;
  path.service_id = req.service_id;
  path.sgid = p.remote_port_gid;
  path.dgid = p.local_port_gid;
  path.slid = p.remote_port_lid == 0xffff ? 0 : p.remote_port_lid;
  path.dlid = p.local_port_lid == 0xffff ? 0 : p.local_port_lid;
  path.flow_label = p.flow_label;
  path.hop_limit = p.hop_limit;
  path.traffic_class = p.traffic_class;
  path.sl = p.sl;
  path.pkey = req.pkey;
  path.mtu = static_cast<Mtu>(req.path_mtu);
  path.packet_life_time = p.local_ack_timeout > 0 ? p.local_ack_timeout - 1 : 0;
  return path;
}

CmPath cm_path_of(const PathRecord& path) {
  CmPath p;
  // Beyond the local subnet (a routed RoCE path) LIDs are permissive.
  const bool routed = path.hop_limit > 1;
  p.local_port_lid = routed ? 0xffff : path.slid;
  p.remote_port_lid = routed ? 0xffff : path.dlid;
  p.local_port_gid = path.sgid;
  p.remote_port_gid = path.dgid;
  p.flow_label = path.flow_label;
  p.packet_rate = path.rate;
  p.traffic_class = path.traffic_class;
  p.hop_limit = path.hop_limit;
  p.sl = path.sl;
  p.subnet_local = !routed;
  p.local_ack_timeout = ack_timeout_for(kCaAckDelay, path.packet_life_time);
  return p;
}

}  // namespace

void write_request_private_data(const Id& id, std::span<const uint8_t> consumer_data,
                                std::span<uint8_t> out) {
  CmaIpHeader header;
  header.ip_version = id.source.ipv4 ? 4 : 6;
  header.source_port = id.source.port;
  header.source = cma_address_of(id.source);
  header.destination = cma_address_of(id.destination);
  encode_cma_ip_header(header, out);
  std::copy(consumer_data.begin(), consumer_data.end(), out.begin() + kCmaIpHeaderBytes);
}

// ---- Sending

void ConnectionManager::send(Id& id, const CmMad& mad, bool await_reply) {
  if (!agent_) return;  // shut down
  if (!encode_cm_mad(mad, id.last_sent).ok()) return;  // our own values always fit
  id.has_last_sent = true;
  agent_->send(id.last_sent, id.remote_agent);
  id.awaiting_reply = await_reply;
  if (await_reply) {
    id.retries_left = kMaxCmRetries;
    id.timeout_ns = reply_timeout_ns(id.path.packet_life_time);
    id.deadline_ns = CmAgent::now_ns() + id.timeout_ns;
    agent_->wake();
  }
}

void ConnectionManager::resend_last(Id& id) {
  if (id.has_last_sent && agent_) agent_->send(id.last_sent, id.remote_agent);
}

void ConnectionManager::send_to(const CmMad& mad, const AgentAddress& to) {
  std::array<uint8_t, kMadBytes> bytes;
  if (agent_ && encode_cm_mad(mad, bytes).ok()) agent_->send(bytes, to);
}

void ConnectionManager::send_rej(const AgentAddress& to, uint32_t local_comm_id,
                                 uint32_t remote_comm_id, uint16_t reason,
                                 std::span<const uint8_t> private_data, uint8_t rejected) {
  if (to.qpn == 0) return;  // the request never left
  RejMessage rej;
  rej.local_comm_id = local_comm_id;
  rej.remote_comm_id = remote_comm_id;
  rej.message_rejected = static_cast<MessageRef>(rejected);
  rej.reason = static_cast<RejectReason>(reason);
  rej.private_data = padded<RejMessage::kPrivateDataBytes>(private_data);
  send_to(CmMad{0, 0, rej}, to);
}

// ---- Active side

Errno ConnectionManager::connect(uint32_t handle, const ConnectionParams& params) {
  std::lock_guard lock(mutex_);
  Id* found = find(handle);
  if (!found) return ENOENT;
  Id& id = *found;
  if (id.state != IdState::kRouteResolved) return EINVAL;
  if (id.qp_type == QpType::kUd) return connect_datagram(id, params);
  if (params.private_data.size() > kReqUserDataBytes) return EINVAL;

  begin_request(id, params.qpn);
  id.responder_resources = params.responder_resources;
  id.initiator_depth = params.initiator_depth;
  id.retry_count = std::min<uint8_t>(params.retry_count, 7);
  id.rnr_retry_count = std::min<uint8_t>(params.rnr_retry_count, 7);
  id.flow_control = params.flow_control;
  id.srq = params.srq;

  ReqMessage req;
  req.local_comm_id = id.local_comm_id;
  req.service_id = id.path.service_id;
  req.local_ca_guid = device_at(id.device_index).node_guid;
  req.local_qpn = id.local_qpn;
  req.responder_resources = id.responder_resources;
  req.initiator_depth = id.initiator_depth;
  req.remote_cm_response_timeout = kCmResponseTimeout;
  set_req_transport(id.qp_type, req);
  req.end_to_end_flow_control = id.flow_control;
  req.starting_psn = id.psn;
  req.local_cm_response_timeout = kCmResponseTimeout;
  req.retry_count = id.retry_count;
  req.pkey = kDefaultPkey;
  req.path_mtu = static_cast<uint8_t>(id.path.mtu);
  req.rnr_retry_count = id.rnr_retry_count;
  req.max_cm_retries = kMaxCmRetries;
  req.srq = id.srq;
  req.primary_path = cm_path_of(id.path);
  id.local_ack_timeout = req.primary_path.local_ack_timeout;
  write_request_private_data(id, params.private_data, req.private_data);

  id.timeout_ns = reply_timeout_ns(id.path.packet_life_time);
  start_request(id, CmMad{id.transaction_id, 0, req});
  return 0;
}

void ConnectionManager::begin_request(Id& id, uint32_t qpn) {
  id.local_comm_id = comm_id_base_ + id.handle;
  id.local_qpn = qpn & 0xffffff;
  id.path.service_id = rdma_ip_service_id(static_cast<RdmaPortSpace>(id.port_space),
                                          id.destination.port);
  id.state = IdState::kConnect;
  id.transaction_id = (uint64_t{id.local_comm_id} << 32) | id.psn;
}

void ConnectionManager::start_request(Id& id, const CmMad& mad) {
  if (!encode_cm_mad(mad, id.last_sent).ok()) return;  // our own values always fit
  id.has_last_sent = true;
  id.cm = CmState::kReqSent;
  id.remote_agent = AgentAddress{};
  id.listener_lookups_left = kListenerLookups;
  seek_listener(id);
}

void ConnectionManager::send_request(Id& id, const AgentAddress& to) {
  id.remote_agent = to;
  agent_->send(id.last_sent, id.remote_agent);
  id.awaiting_reply = true;
  id.retries_left = kMaxCmRetries;
  id.deadline_ns = CmAgent::now_ns() + id.timeout_ns;
  agent_->wake();
}

void ConnectionManager::seek_listener(Id& id) {
  if (agent_ && !find_device_by_address(id.destination.address)) {
    // Another host's address: its QP1 passes the request to its listener
    // (gsi_routing.h), whose agent answers from its own QP.
    return send_request(
        id, AgentAddress{kGsiQpn, true, id.destination.address, id.source.address});
  }
  CmPortBinding listener;
  if (agent_ && ports_.find_listener(id.port_space, id.destination.port,
                                     id.destination.address, listener))
    return send_request(id, AgentAddress{listener.agent_qpn});
  // A REQ to a port nobody listens on is refused when it arrives, a few
  // milliseconds on: a server that listens again meanwhile (perftest -R
  // does, between its two connections) takes it, as on a fabric.
  if (id.listener_lookups_left > 0 && agent_) {
    --id.listener_lookups_left;
    id.deadline_ns = CmAgent::now_ns() + kListenerLookupIntervalNs;
    agent_->wake();
    return;
  }
  // What the peer's CM answers: nobody serves that service ID.
  id.cm = CmState::kIdle;
  id.deadline_ns = 0;
  Event event;
  if (id.qp_type == QpType::kUd) {
    event.type = EventType::kUnreachable;
    event.status = static_cast<int32_t>(SidrStatus::kUnsupportedServiceId);
    event.datagram = true;
    event.params.private_data.assign(SidrRepMessage::kPrivateDataBytes, 0);
  } else {
    event.type = EventType::kRejected;
    event.status = static_cast<int32_t>(RejectReason::kInvalidServiceId);
    event.params.private_data.assign(RejMessage::kPrivateDataBytes, 0);
  }
  post(id, event);
}

Errno ConnectionManager::establish(uint32_t handle) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->cm != CmState::kRepRcvd) return EINVAL;
  RtuMessage rtu;
  rtu.local_comm_id = id->local_comm_id;
  rtu.remote_comm_id = id->remote_comm_id;
  id->cm = CmState::kEstablished;
  // Kept as the last message: a repeated REP (our RTU lost) gets it again.
  send(*id, CmMad{id->transaction_id, 0, rtu}, false);
  return 0;
}

void ConnectionManager::on_rep(const CmMad&, const RepMessage& rep, const AgentAddress& from) {
  Id* id = find_by_comm_id(rep.remote_comm_id);
  if (!id) return;
  if (id->cm == CmState::kEstablished) {
    resend_last(*id);
    return;
  }
  if (id->cm != CmState::kReqSent) return;
  // A request to another host went to its QP1; the listener's agent answers.
  id->remote_agent = from;
  id->remote_comm_id = rep.local_comm_id;
  id->remote_qpn = rep.local_qpn;
  id->remote_psn = rep.starting_psn;
  // The REP says what the peer serves and issues: ours are the reverse.
  id->responder_resources = rep.initiator_depth;
  id->initiator_depth = rep.responder_resources;
  id->rnr_retry_count = rep.rnr_retry_count;
  id->local_ack_timeout = ack_timeout_for(rep.target_ack_delay, id->path.packet_life_time);
  id->awaiting_reply = false;
  id->deadline_ns = 0;
  id->cm = CmState::kRepRcvd;
  Event event;
  event.type = EventType::kConnectResponse;
  event.params.qpn = rep.local_qpn;
  event.params.responder_resources = rep.initiator_depth;
  event.params.initiator_depth = rep.responder_resources;
  event.params.flow_control = rep.end_to_end_flow_control;
  event.params.rnr_retry_count = rep.rnr_retry_count;
  event.params.srq = rep.srq;
  event.params.private_data = bytes_of(rep.private_data);
  post(*id, event);
}

// ---- Passive side

Id* ConnectionManager::find_listener(uint16_t port_space, uint16_t port, const Gid& address) {
  Id* wildcard = nullptr;
  for (auto& [handle, id] : ids_) {
    if (id->state != IdState::kListen || id->port_space != port_space ||
        id->source.port != port)
      continue;
    if (id->source.address == address && !is_loopback(id->source)) return id.get();
    // A listener on the any address, or on loopback (which binds like it),
    // takes every address; an IPv6 one takes IPv4 too, unless told not to.
    const bool family_ok = id->source.ipv4 == is_ipv4_mapped(address) || !id->ipv6_only;
    if ((is_any(id->source) || is_loopback(id->source)) && family_ok) wildcard = id.get();
  }
  return wildcard;
}

Id* ConnectionManager::find_by_remote(uint32_t remote_comm_id, const AgentAddress& remote) {
  for (auto& [handle, id] : ids_)
    if (id->cm != CmState::kNone && id->remote_comm_id == remote_comm_id &&
        id->remote_agent == remote)
      return id.get();
  return nullptr;
}

void ConnectionManager::on_req(const CmMad& mad, const ReqMessage& req, const AgentAddress& from) {
  if (Id* existing = find_by_remote(req.local_comm_id, from)) {
    // A repeated REQ: our REP was lost, or the peer is early.
    if (existing->cm == CmState::kRepSent) resend_last(*existing);
    return;
  }
  Id* listener = nullptr;
  IpEndpoint local, remote;
  if (!match_listener(req.service_id, req.private_data, listener, local, remote)) {
    send_rej(from, 0, req.local_comm_id,
             static_cast<uint16_t>(RejectReason::kInvalidServiceId), {}, 0);
    return;
  }
  if (!listener) return;  // not an RDMA CM request: nothing of ours could take it
  // A full backlog drops the request; the peer's retry may find room.
  if (listener->backlog_left == 0) return;
  --listener->backlog_left;

  Id& id = new_passive_id(*listener, local, remote);
  id.qp_type = passive_qp_type(req);
  id.path = path_from_req(req);
  id.has_path = true;
  id.remote_comm_id = req.local_comm_id;
  id.remote_agent = from;
  id.transaction_id = mad.transaction_id;
  id.remote_qpn = req.local_qpn;
  id.remote_psn = req.starting_psn;
  id.responder_resources = req.initiator_depth;
  id.initiator_depth = req.responder_resources;
  id.retry_count = req.retry_count;
  id.rnr_retry_count = req.rnr_retry_count;
  id.local_ack_timeout = req.primary_path.local_ack_timeout;
  id.flow_control = req.end_to_end_flow_control;

  Event event;
  event.type = EventType::kConnectRequest;
  event.listen_id = listener->handle;
  event.qp_type = id.qp_type;
  event.params.qpn = req.local_qpn;
  event.params.responder_resources = req.initiator_depth;
  event.params.initiator_depth = req.responder_resources;
  event.params.flow_control = req.end_to_end_flow_control;
  event.params.retry_count = req.retry_count;
  event.params.rnr_retry_count = req.rnr_retry_count;
  event.params.srq = req.srq;
  event.params.private_data =
      bytes_of(std::span<const uint8_t>(req.private_data).subspan(kCmaIpHeaderBytes));
  post(id, event);
}

bool ConnectionManager::match_listener(uint64_t service_id, std::span<const uint8_t> private_data,
                                       Id*& listener, IpEndpoint& local, IpEndpoint& remote) {
  RdmaIpService service;
  CmaIpHeader header;
  listener = nullptr;
  if (!parse_rdma_ip_service_id(service_id, service) ||
      decode_cma_ip_header(private_data, header) != CmaHeaderError::kNone)
    return true;  // not addressed by IP: no listener here is asked
  local = endpoint_of(header.destination, service.port, header.ip_version);
  remote = endpoint_of(header.source, header.source_port, header.ip_version);
  listener = find_listener(static_cast<uint16_t>(service.space), service.port, local.address);
  return listener != nullptr;
}

Id& ConnectionManager::new_passive_id(const Id& listener, const IpEndpoint& local,
                                      const IpEndpoint& remote) {
  auto owned = std::make_unique<Id>();
  Id& id = *owned;
  id.handle = next_handle_++;
  id.sink = listener.sink;
  id.port_space = listener.port_space;
  id.qp_type = listener.qp_type;
  id.listen_id = listener.handle;
  const DeviceDescription* device = find_device_by_address(local.address);
  id.has_device = device != nullptr || listener.has_device;
  id.device_index = device ? device->index : listener.device_index;
  id.source = local;
  id.destination = remote;
  id.state = IdState::kConnect;
  id.cm = CmState::kReqRcvd;
  id.psn = random_psn();
  id.local_comm_id = comm_id_base_ + id.handle;
  ids_[id.handle] = std::move(owned);
  return id;
}

Errno ConnectionManager::accept(uint32_t handle, const ConnectionParams& params) {
  std::lock_guard lock(mutex_);
  Id* found = find(handle);
  if (!found) return ENOENT;
  Id& id = *found;
  if (id.state != IdState::kConnect || id.cm != CmState::kReqRcvd) return EINVAL;
  if (id.qp_type == QpType::kUd) {
    if (params.private_data.size() > SidrRepMessage::kPrivateDataBytes) return EINVAL;
    send_sidr_rep(id, static_cast<uint8_t>(SidrStatus::kSuccess), params.qpn,
                  params.qkey ? params.qkey : kRdmaUdpQkey, params.private_data);
    return 0;
  }
  if (params.private_data.size() > RepMessage::kPrivateDataBytes) return EINVAL;
  id.local_qpn = params.qpn & 0xffffff;
  id.responder_resources = params.responder_resources;
  id.initiator_depth = params.initiator_depth;
  id.srq = params.srq;
  RepMessage rep;
  rep.local_comm_id = id.local_comm_id;
  rep.remote_comm_id = id.remote_comm_id;
  rep.local_qpn = id.local_qpn;
  rep.starting_psn = id.psn;
  rep.responder_resources = params.responder_resources;
  rep.initiator_depth = params.initiator_depth;
  rep.target_ack_delay = kCaAckDelay;
  rep.end_to_end_flow_control = params.flow_control;
  rep.rnr_retry_count = std::min<uint8_t>(params.rnr_retry_count, 7);
  rep.srq = params.srq;
  rep.local_ca_guid = device_at(id.device_index).node_guid;
  rep.private_data = padded<RepMessage::kPrivateDataBytes>(params.private_data);
  id.cm = CmState::kRepSent;
  send(id, CmMad{id.transaction_id, 0, rep}, true);
  return 0;
}

void ConnectionManager::on_rtu(uint32_t remote_comm_id) {
  Id* id = find_by_comm_id(remote_comm_id);
  if (!id || id->cm != CmState::kRepSent) return;
  enter_established(*id);
}

void ConnectionManager::enter_established(Id& id) {
  id.awaiting_reply = false;
  id.deadline_ns = 0;
  id.cm = CmState::kEstablished;
  Event event;
  event.type = EventType::kEstablished;
  post(id, event);
}

Errno ConnectionManager::notify(uint32_t handle, QpNotice notice) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  switch (notice) {
    case QpNotice::kCommunicationEstablished:
      if (id->cm == CmState::kEstablished) return EISCONN;
      if (id->cm != CmState::kRepSent) return EINVAL;
      enter_established(*id);  // the RTU was lost or is late; a late one is ignored
      return 0;
    case QpNotice::kPathMigrated:
      return id->cm == CmState::kEstablished ? 0 : EINVAL;
  }
  return EINVAL;
}

Errno ConnectionManager::reject(uint32_t handle, std::span<const uint8_t> private_data,
                                uint16_t reason) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->cm != CmState::kReqRcvd && id->cm != CmState::kRepRcvd) return EINVAL;
  if (id->qp_type == QpType::kUd) {
    if (id->cm != CmState::kReqRcvd || private_data.size() > SidrRepMessage::kPrivateDataBytes)
      return EINVAL;
    send_sidr_rep(*id, static_cast<uint8_t>(SidrStatus::kRejected), 0, 0, private_data);
    return 0;
  }
  if (private_data.size() > RejMessage::kPrivateDataBytes) return EINVAL;
  const auto rejected = id->cm == CmState::kReqRcvd ? MessageRef::kReq : MessageRef::kRep;
  send_rej(id->remote_agent, id->local_comm_id, id->remote_comm_id, reason, private_data,
           static_cast<uint8_t>(rejected));
  id->cm = CmState::kIdle;
  return 0;
}

void ConnectionManager::on_rej(const RejMessage& rej) {
  Id* id = find_by_comm_id(rej.remote_comm_id);
  if (!id) return;
  if (id->cm != CmState::kReqSent && id->cm != CmState::kRepSent &&
      id->cm != CmState::kRepRcvd && id->cm != CmState::kReqRcvd)
    return;
  id->cm = CmState::kIdle;
  id->awaiting_reply = false;
  id->deadline_ns = 0;
  Event event;
  event.type = EventType::kRejected;
  event.status = static_cast<int32_t>(rej.reason);
  event.params.private_data = bytes_of(rej.private_data);
  post(*id, event);
}

}  // namespace softverbs::cm
