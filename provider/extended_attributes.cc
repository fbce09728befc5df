#include "provider/extended_attributes.h"

#include "provider/upstream_verbs.h"

namespace softverbs::provider {
namespace {

constexpr uint32_t kKnownQpInitAttrMask =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
    IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
    IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

constexpr uint32_t kKnownQpCreateFlags =
    IBV_QP_CREATE_BLOCK_SELF_MCAST_LB | IBV_QP_CREATE_SCATTER_FCS |
    IBV_QP_CREATE_CVLAN_STRIPPING | IBV_QP_CREATE_SOURCE_QPN |
    IBV_QP_CREATE_PCI_WRITE_END_PADDING;

constexpr uint32_t kKnownCqInitAttrMask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
constexpr uint32_t kKnownCqCreateFlags =
    IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;

constexpr uint64_t kUcSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                IBV_QP_EX_WITH_RDMA_WRITE |
                                IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW |
                                IBV_QP_EX_WITH_LOCAL_INV;
constexpr uint64_t kRcSendOps = kUcSendOps | IBV_QP_EX_WITH_SEND_WITH_INV |
                                IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                IBV_QP_EX_WITH_ATOMIC_WRITE | kIbvQpExWithFlush;
constexpr uint64_t kUdSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

bool is_zero_hash(const ibv_rx_hash_conf& conf) {
  return conf.rx_hash_function == 0 && conf.rx_hash_key_len == 0 && !conf.rx_hash_key &&
         conf.rx_hash_fields_mask == 0;
}

// The bits of comp_mask that ask for something a soft QP cannot do.
Errno check_qp_offloads(const ibv_qp_init_attr_ex& attr) {
  const uint32_t mask = attr.comp_mask;
  if ((mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr.create_flags) {
    if (attr.create_flags & ~kKnownQpCreateFlags) return EINVAL;
    return EOPNOTSUPP;
  }
  if ((mask & IBV_QP_INIT_ATTR_MAX_TSO_HEADER) && attr.max_tso_header) return EOPNOTSUPP;
  if ((mask & IBV_QP_INIT_ATTR_IND_TABLE) && attr.rwq_ind_tbl) return EOPNOTSUPP;
  if ((mask & IBV_QP_INIT_ATTR_RX_HASH) && !is_zero_hash(attr.rx_hash_conf)) return EOPNOTSUPP;
  return 0;
}

// Send ops beyond what the QP type can post. An unknown type is left to the
// creation, which refuses it with its own errno.
Errno check_send_ops(int qp_type, uint64_t send_ops) {
  QpType type;
  switch (qp_type) {
    case IBV_QPT_RC: type = QpType::kRc; break;
    case IBV_QPT_UC: type = QpType::kUc; break;
    case IBV_QPT_UD: type = QpType::kUd; break;
    case IBV_QPT_XRC_SEND: type = QpType::kXrcSend; break;
    case IBV_QPT_XRC_RECV: type = QpType::kXrcRecv; break;
    default: return 0;
  }
  return (send_ops & ~supported_send_ops(type)) ? EOPNOTSUPP : 0;
}

}  // namespace

uint64_t supported_send_ops(QpType type) {
  switch (type) {
    case QpType::kRc: return kRcSendOps;
    case QpType::kUc: return kUcSendOps;
    case QpType::kUd: return kUdSendOps;
    case QpType::kXrcSend: return kRcSendOps;
    case QpType::kXrcRecv: return 0;  // a target sends nothing
  }
  return 0;
}

Errno check_create_qp_ex(const ibv_qp_init_attr_ex& attr) {
  const uint32_t mask = attr.comp_mask;
  if (mask & ~kKnownQpInitAttrMask) return EINVAL;
  const int qp_type = static_cast<int>(attr.qp_type);
  // A target belongs to an XRC domain; every other QP to a PD.
  if (qp_type == IBV_QPT_XRC_RECV) {
    if (!(mask & IBV_QP_INIT_ATTR_XRCD) || !attr.xrcd) return EINVAL;
  } else if (!(mask & IBV_QP_INIT_ATTR_PD) || !attr.pd) {
    return EINVAL;
  }
  if (Errno err = check_qp_offloads(attr)) return err;
  if (mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) return check_send_ops(qp_type, attr.send_ops_flags);
  return 0;
}

Errno check_create_cq_ex(const ibv_cq_init_attr_ex& attr, uint32_t max_cqe,
                         int num_comp_vectors, uint32_t& stamps) {
  if (attr.cqe <= 0 || static_cast<uint32_t>(attr.cqe) > max_cqe) return EINVAL;
  // comp_vector is unsigned here, unlike ibv_create_cq's.
  if (num_comp_vectors <= 0 || attr.comp_vector >= static_cast<uint32_t>(num_comp_vectors))
    return EINVAL;
  if (attr.comp_mask & ~kKnownCqInitAttrMask) return EINVAL;
  if (attr.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) {
    if (attr.flags & ~kKnownCqCreateFlags) return EINVAL;
    // SINGLE_THREADED is a promise the CQ may ignore; losing CQEs silently
    // on overrun is not something a soft CQ does.
    if (attr.flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN) return EOPNOTSUPP;
  }
  if (attr.wc_flags & ~kSupportedWcFlags) return EOPNOTSUPP;
  stamps = 0;
  if (attr.wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) stamps |= kStampTimestamp;
  if (attr.wc_flags & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) stamps |= kStampWallclock;
  return 0;
}

Errno check_modify_cq(const ibv_modify_cq_attr& attr, const DeviceAttributes& device) {
  if (attr.attr_mask & ~static_cast<uint32_t>(IBV_CQ_ATTR_MODERATE)) return EINVAL;
  if (attr.attr_mask & IBV_CQ_ATTR_MODERATE) {
    if (attr.moderate.cq_count > device.max_cq_moderation_count ||
        attr.moderate.cq_period > device.max_cq_moderation_period_us)
      return EINVAL;
  }
  return 0;
}

}  // namespace softverbs::provider
