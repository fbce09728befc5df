#include "provider/rdmacm/cm_file_commands.h"

#include <endian.h>

#include <cerrno>

namespace softverbs::provider {

int endpoint_of(const sockaddr* address, size_t length, cm::IpEndpoint& out) {
  if (length < sizeof(sa_family_t)) return EINVAL;
  out = cm::IpEndpoint{};
  if (address->sa_family == AF_INET && length >= sizeof(sockaddr_in)) {
    sockaddr_in in;
    std::memcpy(&in, address, sizeof in);
    out.ipv4 = true;
    out.port = ntohs(in.sin_port);
    if (in.sin_addr.s_addr != INADDR_ANY) {
      out.address[10] = out.address[11] = 0xff;
      std::memcpy(&out.address[12], &in.sin_addr, 4);
    }
    return 0;
  }
  if (address->sa_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6;
    std::memcpy(&in6, address, sizeof in6);
    out.ipv4 = false;
    out.port = ntohs(in6.sin6_port);
    std::memcpy(out.address.data(), &in6.sin6_addr, 16);
    return 0;
  }
  return address->sa_family == AF_IB ? EAFNOSUPPORT : EINVAL;
}

size_t write_sockaddr(const cm::IpEndpoint& endpoint, void* out, size_t room) {
  if (endpoint.ipv4) {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(endpoint.port);
    std::memcpy(&in.sin_addr, &endpoint.address[12], 4);
    std::memcpy(out, &in, std::min(room, sizeof in));
    return sizeof in;
  }
  sockaddr_in6 in6{};
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(endpoint.port);
  std::memcpy(&in6.sin6_addr, endpoint.address.data(), 16);
  std::memcpy(out, &in6, std::min(room, sizeof in6));
  return sizeof in6;
}

ib_user_path_rec user_path_record(const cm::PathRecord& path) {
  ib_user_path_rec record{};
  std::memcpy(record.dgid, path.dgid.data(), 16);
  std::memcpy(record.sgid, path.sgid.data(), 16);
  record.dlid = htobe16(path.dlid);
  record.slid = htobe16(path.slid);
  record.flow_label = htobe32(path.flow_label);
  record.reversible = path.reversible;
  record.mtu = static_cast<uint32_t>(path.mtu);
  record.pkey = htobe16(path.pkey);
  record.hop_limit = path.hop_limit;
  record.traffic_class = path.traffic_class;
  record.numb_path = 1;
  record.sl = path.sl;
  record.mtu_selector = 2;  // exactly
  record.rate_selector = 2;
  record.rate = path.rate;
  record.packet_life_time_selector = 2;
  record.packet_life_time = path.packet_life_time;
  return record;
}

namespace {

template <typename Param>
void copy_private_data(const std::vector<uint8_t>& data, Param& param) {
  const size_t length = std::min(data.size(), sizeof param.private_data);
  std::copy_n(data.begin(), length, param.private_data);
  param.private_data_len = static_cast<uint8_t>(length);
}

}  // namespace

ib_uverbs_ah_attr user_ah_attr(const AddressVector& av) {
  ib_uverbs_ah_attr ah{};
  std::memcpy(ah.grh.dgid, av.dgid.data(), 16);
  ah.grh.flow_label = av.flow_label;
  ah.grh.sgid_index = av.sgid_index;
  ah.grh.hop_limit = av.hop_limit;
  ah.grh.traffic_class = av.traffic_class;
  ah.dlid = av.dlid;
  ah.sl = av.sl;
  ah.src_path_bits = av.src_path_bits;
  ah.static_rate = av.static_rate;
  ah.is_global = av.is_global;
  ah.port_num = av.port_num;
  return ah;
}

std::vector<uint8_t> event_response(const cm::Event& event, uint64_t uid, uint32_t id) {
  rdma_ucm_event_resp response{};
  response.uid = uid;
  response.id = id;
  response.event = static_cast<uint32_t>(event.type);
  response.status = static_cast<uint32_t>(event.status);
  const cm::ConnectionParams& p = event.params;
  if (event.datagram) {
    // UD ids report an address (the kernel's ucma_copy_ud_event).
    rdma_ucm_ud_param& ud = response.param.ud;
    ud.qp_num = p.qpn;
    ud.qkey = p.qkey;
    ud.ah_attr = user_ah_attr(event.av);
    copy_private_data(p.private_data, ud);
  } else {
    rdma_ucm_conn_param& conn = response.param.conn;
    conn.qp_num = p.qpn;
    conn.qkey = p.qkey;
    copy_private_data(p.private_data, conn);
    conn.srq = p.srq;
    conn.responder_resources = p.responder_resources;
    conn.initiator_depth = p.initiator_depth;
    conn.flow_control = p.flow_control;
    conn.retry_count = p.retry_count;
    conn.rnr_retry_count = p.rnr_retry_count;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(&response);
  return std::vector<uint8_t>(bytes, bytes + sizeof response);
}

}  // namespace softverbs::provider
