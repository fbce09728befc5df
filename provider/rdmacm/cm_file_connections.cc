// The rdma_cm file's connection commands: CONNECT, LISTEN, ACCEPT, REJECT,
// DISCONNECT and INIT_QP_ATTR.
#include <infiniband/verbs.h>

#include <cerrno>

#include "provider/rdmacm/cm_file.h"
#include "provider/rdmacm/cm_file_commands.h"

namespace softverbs::provider {
namespace {

// REJECT's reasons a consumer may give (the kernel's rule): none means
// "consumer defined".
constexpr uint8_t kRejectConsumerDefined = 28;
constexpr uint8_t kRejectVendorOptionNotSupported = 35;

cm::ConnectionParams params_of(const rdma_ucm_conn_param& conn) {
  cm::ConnectionParams p;
  p.qpn = conn.qp_num & 0xffffff;
  p.qkey = conn.qkey;
  p.responder_resources = conn.responder_resources;
  p.initiator_depth = conn.initiator_depth;
  p.flow_control = conn.flow_control;
  p.retry_count = conn.retry_count;
  p.rnr_retry_count = conn.rnr_retry_count;
  p.srq = conn.srq;
  p.private_data.assign(conn.private_data, conn.private_data + conn.private_data_len);
  return p;
}

// The kernel ABI's QP attributes (struct ib_uverbs_qp_attr); the mask bits
// are the IBTA's in both.
ib_uverbs_qp_attr user_qp_attr(const QpAttributes& a, uint32_t mask) {
  ib_uverbs_qp_attr out{};
  out.qp_attr_mask = mask;
  out.qp_state = static_cast<uint32_t>(a.state);
  out.path_mtu = static_cast<uint32_t>(a.path_mtu);
  out.qkey = a.qkey;
  out.rq_psn = a.rq_psn;
  out.sq_psn = a.sq_psn;
  out.dest_qp_num = a.dest_qp_num;
  out.qp_access_flags = a.access_flags;
  out.ah_attr = user_ah_attr(a.av);
  out.pkey_index = a.pkey_index;
  out.max_rd_atomic = a.max_rd_atomic;
  out.max_dest_rd_atomic = a.max_dest_rd_atomic;
  out.min_rnr_timer = a.min_rnr_timer;
  out.port_num = a.port_num;
  out.timeout = a.timeout;
  out.retry_cnt = a.retry_cnt;
  out.rnr_retry = a.rnr_retry;
  return out;
}

}  // namespace

int CmFile::connect(const uint8_t* in, size_t in_length) {
  if (in_length < offsetof(rdma_ucm_connect, ece)) return EINVAL;
  const auto command = command_of<rdma_ucm_connect>(in, in_length);
  if (!command.conn_param.valid) return EINVAL;
  if (!has_id(command.id)) return ENOENT;
  return manager_->connect(command.id, params_of(command.conn_param));
}

int CmFile::listen(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_listen>(in, in_length);
  if (!has_id(command.id)) return ENOENT;
  if (int err = manager_->listen(command.id, static_cast<int>(command.backlog))) return err;
  listen_on_kernel_too(command.id, command.backlog);
  return 0;
}

int CmFile::accept(const uint8_t* in, size_t in_length) {
  if (in_length < offsetof(rdma_ucm_accept, ece)) return EINVAL;
  const auto command = command_of<rdma_ucm_accept>(in, in_length);
  if (!has_id(command.id)) return ENOENT;
  // valid = 0: the active side's "established" after CONNECT_RESPONSE.
  if (!command.conn_param.valid) return manager_->establish(command.id);
  // The cookie first: the peer's RTU, and with it ESTABLISHED, may come
  // before accept() returns.
  Id before;
  {
    std::lock_guard lock(mutex_);
    Id& id = ids_[command.id];
    before = id;
    id.uid = command.uid;
    id.has_uid = true;
  }
  const int err = manager_->accept(command.id, params_of(command.conn_param));
  if (err) {
    std::lock_guard lock(mutex_);
    if (auto it = ids_.find(command.id); it != ids_.end()) it->second = before;
  }
  return err;
}

int CmFile::reject(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_reject>(in, in_length);
  uint8_t reason = command.reason;
  if (reason == 0) reason = kRejectConsumerDefined;
  if (reason != kRejectConsumerDefined && reason != kRejectVendorOptionNotSupported)
    return EINVAL;
  if (!has_id(command.id)) return ENOENT;
  return manager_->reject(
      command.id, std::span<const uint8_t>(command.private_data, command.private_data_len),
      reason);
}

int CmFile::disconnect(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_disconnect>(in, in_length);
  if (!has_id(command.id)) return ENOENT;
  return manager_->disconnect(command.id);
}

int CmFile::notify(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_notify>(in, in_length);
  if (!has_id(command.id)) return ENOENT;
  switch (command.event) {
    case IBV_EVENT_COMM_EST:
      return manager_->notify(command.id,
                              cm::ConnectionManager::QpNotice::kCommunicationEstablished);
    case IBV_EVENT_PATH_MIG:
      return manager_->notify(command.id, cm::ConnectionManager::QpNotice::kPathMigrated);
    default: return EINVAL;  // the kernel's CM takes no other event
  }
}

int CmFile::init_qp_attr(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_init_qp_attr>(in, in_length);
  if (command.qp_state > IBV_QPS_ERR) return EINVAL;
  if (!has_id(command.id)) return ENOENT;
  QpAttributes attributes;
  uint32_t mask = 0;
  if (int err = manager_->qp_attributes(command.id, static_cast<QpState>(command.qp_state),
                                        attributes, mask))
    return err;
  respond(command.response, user_qp_attr(attributes, mask));
  return 0;
}

int CmFile::set_option(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_set_option>(in, in_length);
  const int err = set_soft_option(command);
  // Kept, for the kernel's CM if the id moves there (cm_file_forwarding.cc).
  if (err == 0)
    record_option(command.id, command.level, command.optname,
                  reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(command.optval)),
                  command.optlen);
  return err;
}

int CmFile::set_soft_option(const rdma_ucm_set_option& command) {
  if (!has_id(command.id)) return ENOENT;
  const auto* value = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(command.optval));
  auto as_int = [&](int& out) {
    if (command.optlen != sizeof(int)) return false;
    std::memcpy(&out, value, sizeof out);
    return true;
  };
  // Unknown levels and names: ENOSYS, as the kernel.
  if (command.level != RDMA_OPTION_ID) return ENOSYS;
  int flag = 0;
  switch (command.optname) {
    case RDMA_OPTION_ID_TOS:
      if (command.optlen != 1) return EINVAL;
      return manager_->set_type_of_service(command.id, *value);
    case RDMA_OPTION_ID_REUSEADDR:
      if (!as_int(flag)) return EINVAL;
      return manager_->set_reuse_address(command.id, flag != 0);
    case RDMA_OPTION_ID_AFONLY:
      if (!as_int(flag)) return EINVAL;
      return manager_->set_ipv6_only(command.id, flag != 0);
    case RDMA_OPTION_ID_ACK_TIMEOUT:
      if (command.optlen != 1) return EINVAL;
      return manager_->set_ack_timeout(command.id, *value);
    default:
      return ENOSYS;
  }
}

}  // namespace softverbs::provider
