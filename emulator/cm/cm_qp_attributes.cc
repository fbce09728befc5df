// The QP attributes a connection's QP needs for each state (IBTA 12.7;
// what the kernel CM's init_qp_attr gives librdmacm): the QP follows the
// connection's path, PSNs and RDMA resources.
#include <cerrno>

#include "emulator/cm/cm_id.h"
#include "emulator/cm/cm_path.h"
#include "emulator/cm/connection_manager.h"
#include "emulator/host/device_config.h"

namespace softverbs::cm {
namespace {


bool connection_usable(CmState cm) {
  return cm == CmState::kReqRcvd || cm == CmState::kRepSent || cm == CmState::kRepRcvd ||
         cm == CmState::kEstablished;
}


}  // namespace

Errno ConnectionManager::qp_attributes(uint32_t handle, QpState state, QpAttributes& out,
                                       uint32_t& mask) const {
  std::lock_guard lock(mutex_);
  const Id* found = find(handle);
  if (!found) return ENOENT;
  const Id& id = *found;
  if (!id.has_device) return EINVAL;
  out = QpAttributes{};
  out.state = state;
  out.pkey_index = 0;
  out.port_num = 1;
  if (id.qp_type == QpType::kUd) {
    out.qkey = kRdmaUdpQkey;
    mask = kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey;
    return 0;
  }
  if (id.state == IdState::kListen) return EINVAL;
  if (id.cm == CmState::kNone) {
    // Not connecting yet: what any connected QP starts INIT with.
    mask = kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags;
    return 0;
  }
  const bool before_rep = id.cm == CmState::kReqSent;
  if (!before_rep && !connection_usable(id.cm)) return EINVAL;
  switch (state) {
    case QpState::kInit:
      out.access_flags = kAccessRemoteWrite;
      if (id.responder_resources) out.access_flags |= kAccessRemoteRead | kAccessRemoteAtomic;
      mask = kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags;
      return 0;
    case QpState::kRtr:
      if (before_rep) return EINVAL;
      out.av = address_vector_for(id.device_index, id.path);
      out.path_mtu = id.path.mtu;
      out.dest_qp_num = id.remote_qpn;
      out.rq_psn = id.psn;
      out.max_dest_rd_atomic = id.responder_resources;
      out.min_rnr_timer = 0;
      mask = kQpAttrState | kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn | kQpAttrRqPsn |
             kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer;
      return 0;
    case QpState::kRts:
      if (before_rep) return EINVAL;
      out.sq_psn = id.remote_psn;
      out.timeout = id.ack_timeout_option ? id.ack_timeout_option : id.local_ack_timeout;
      out.retry_cnt = id.retry_count;
      out.rnr_retry = id.rnr_retry_count;
      out.max_rd_atomic = id.initiator_depth;
      mask = kQpAttrState | kQpAttrSqPsn | kQpAttrTimeout | kQpAttrRetryCnt | kQpAttrRnrRetry |
             kQpAttrMaxQpRdAtomic;
      return 0;
    default:
      return EINVAL;
  }
}

}  // namespace softverbs::cm
