#include "provider/translate.h"

#include <endian.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "provider/upstream_verbs.h"

namespace softverbs::provider {
namespace {

constexpr uint32_t kKnownQpAttrMask =
    IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
    IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
    IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
    IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
    IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP |
    IBV_QP_DEST_QPN;

// Which HCA mask bit each verbs mask bit becomes.
struct MaskPair {
  uint32_t ibv;
  uint32_t hca;
};
constexpr MaskPair kQpAttrMaskPairs[] = {
    {IBV_QP_STATE, kQpAttrState},
    {IBV_QP_CUR_STATE, kQpAttrCurState},
    {IBV_QP_EN_SQD_ASYNC_NOTIFY, kQpAttrEnSqdAsyncNotify},
    {IBV_QP_ACCESS_FLAGS, kQpAttrAccessFlags},
    {IBV_QP_PKEY_INDEX, kQpAttrPkeyIndex},
    {IBV_QP_PORT, kQpAttrPort},
    {IBV_QP_QKEY, kQpAttrQkey},
    {IBV_QP_AV, kQpAttrAv},
    {IBV_QP_PATH_MTU, kQpAttrPathMtu},
    {IBV_QP_TIMEOUT, kQpAttrTimeout},
    {IBV_QP_RETRY_CNT, kQpAttrRetryCnt},
    {IBV_QP_RNR_RETRY, kQpAttrRnrRetry},
    {IBV_QP_RQ_PSN, kQpAttrRqPsn},
    {IBV_QP_MAX_QP_RD_ATOMIC, kQpAttrMaxQpRdAtomic},
    {IBV_QP_ALT_PATH, kQpAttrAltPath},
    {IBV_QP_MIN_RNR_TIMER, kQpAttrMinRnrTimer},
    {IBV_QP_SQ_PSN, kQpAttrSqPsn},
    {IBV_QP_MAX_DEST_RD_ATOMIC, kQpAttrMaxDestRdAtomic},
    {IBV_QP_PATH_MIG_STATE, kQpAttrPathMigState},
    {IBV_QP_CAP, kQpAttrCap},
    {IBV_QP_DEST_QPN, kQpAttrDestQpn},
};

}  // namespace

// --- enums -------------------------------------------------------------------

ibv_qp_state to_ibv_qp_state(QpState state) {
  switch (state) {
    case QpState::kReset: return IBV_QPS_RESET;
    case QpState::kInit: return IBV_QPS_INIT;
    case QpState::kRtr: return IBV_QPS_RTR;
    case QpState::kRts: return IBV_QPS_RTS;
    case QpState::kSqd: return IBV_QPS_SQD;
    case QpState::kSqe: return IBV_QPS_SQE;
    case QpState::kErr: return IBV_QPS_ERR;
  }
  return IBV_QPS_UNKNOWN;
}

Errno from_ibv_qp_state(int state, QpState& out) {
  switch (state) {
    case IBV_QPS_RESET: out = QpState::kReset; return 0;
    case IBV_QPS_INIT: out = QpState::kInit; return 0;
    case IBV_QPS_RTR: out = QpState::kRtr; return 0;
    case IBV_QPS_RTS: out = QpState::kRts; return 0;
    case IBV_QPS_SQD: out = QpState::kSqd; return 0;
    case IBV_QPS_SQE: out = QpState::kSqe; return 0;
    case IBV_QPS_ERR: out = QpState::kErr; return 0;
    default: return EINVAL;
  }
}

ibv_mtu to_ibv_mtu(Mtu mtu) {
  // Both use the IBTA encoding: 1 = 256 ... 5 = 4096.
  return static_cast<ibv_mtu>(static_cast<uint8_t>(mtu));
}

Errno from_ibv_mtu(int mtu, Mtu& out) {
  if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) return EINVAL;
  out = static_cast<Mtu>(mtu);
  return 0;
}

Errno from_ibv_qp_type(int type, QpType& out) {
  switch (type) {
    case IBV_QPT_RC: out = QpType::kRc; return 0;
    case IBV_QPT_UC: out = QpType::kUc; return 0;
    case IBV_QPT_UD: out = QpType::kUd; return 0;
    case IBV_QPT_XRC_SEND: out = QpType::kXrcSend; return 0;
    case IBV_QPT_XRC_RECV: out = QpType::kXrcRecv; return 0;
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_DRIVER:
      return EOPNOTSUPP;
    default:
      return EINVAL;
  }
}

ibv_qp_type to_ibv_qp_type(QpType type) {
  switch (type) {
    case QpType::kRc: return IBV_QPT_RC;
    case QpType::kUc: return IBV_QPT_UC;
    case QpType::kUd: return IBV_QPT_UD;
    case QpType::kXrcSend: return IBV_QPT_XRC_SEND;
    case QpType::kXrcRecv: return IBV_QPT_XRC_RECV;
  }
  return IBV_QPT_RC;
}

ibv_wc_status to_ibv_wc_status(WcStatus status) {
  switch (status) {
    case WcStatus::kSuccess: return IBV_WC_SUCCESS;
    case WcStatus::kLocLenErr: return IBV_WC_LOC_LEN_ERR;
    case WcStatus::kLocQpOpErr: return IBV_WC_LOC_QP_OP_ERR;
    case WcStatus::kLocEecOpErr: return IBV_WC_LOC_EEC_OP_ERR;
    case WcStatus::kLocProtErr: return IBV_WC_LOC_PROT_ERR;
    case WcStatus::kWrFlushErr: return IBV_WC_WR_FLUSH_ERR;
    case WcStatus::kMwBindErr: return IBV_WC_MW_BIND_ERR;
    case WcStatus::kBadRespErr: return IBV_WC_BAD_RESP_ERR;
    case WcStatus::kLocAccessErr: return IBV_WC_LOC_ACCESS_ERR;
    case WcStatus::kRemInvReqErr: return IBV_WC_REM_INV_REQ_ERR;
    case WcStatus::kRemAccessErr: return IBV_WC_REM_ACCESS_ERR;
    case WcStatus::kRemOpErr: return IBV_WC_REM_OP_ERR;
    case WcStatus::kRetryExcErr: return IBV_WC_RETRY_EXC_ERR;
    case WcStatus::kRnrRetryExcErr: return IBV_WC_RNR_RETRY_EXC_ERR;
    case WcStatus::kLocRddViolErr: return IBV_WC_LOC_RDD_VIOL_ERR;
    case WcStatus::kRemInvRdReqErr: return IBV_WC_REM_INV_RD_REQ_ERR;
    case WcStatus::kRemAbortErr: return IBV_WC_REM_ABORT_ERR;
    case WcStatus::kInvEecnErr: return IBV_WC_INV_EECN_ERR;
    case WcStatus::kInvEecStateErr: return IBV_WC_INV_EEC_STATE_ERR;
    case WcStatus::kFatalErr: return IBV_WC_FATAL_ERR;
    case WcStatus::kRespTimeoutErr: return IBV_WC_RESP_TIMEOUT_ERR;
    case WcStatus::kGeneralErr: return IBV_WC_GENERAL_ERR;
  }
  return IBV_WC_GENERAL_ERR;
}

ibv_wc_opcode to_ibv_wc_opcode(WcOpcode opcode) {
  switch (opcode) {
    case WcOpcode::kSend: return IBV_WC_SEND;
    case WcOpcode::kRdmaWrite: return IBV_WC_RDMA_WRITE;
    case WcOpcode::kRdmaRead: return IBV_WC_RDMA_READ;
    case WcOpcode::kCompSwap: return IBV_WC_COMP_SWAP;
    case WcOpcode::kFetchAdd: return IBV_WC_FETCH_ADD;
    case WcOpcode::kBindMw: return IBV_WC_BIND_MW;
    case WcOpcode::kLocalInv: return IBV_WC_LOCAL_INV;
    case WcOpcode::kAtomicWrite: return IBV_WC_ATOMIC_WRITE;
    case WcOpcode::kFlush: return static_cast<ibv_wc_opcode>(kIbvWcFlush);
    case WcOpcode::kRecv: return IBV_WC_RECV;
    case WcOpcode::kRecvRdmaWithImm: return IBV_WC_RECV_RDMA_WITH_IMM;
  }
  return IBV_WC_SEND;
}

bool to_ibv_event_type(AsyncEventType type, ibv_event_type& out) {
  switch (type) {
    case AsyncEventType::kCqErr: out = IBV_EVENT_CQ_ERR; return true;
    case AsyncEventType::kQpFatal: out = IBV_EVENT_QP_FATAL; return true;
    case AsyncEventType::kQpReqErr: out = IBV_EVENT_QP_REQ_ERR; return true;
    case AsyncEventType::kQpAccessErr: out = IBV_EVENT_QP_ACCESS_ERR; return true;
    case AsyncEventType::kCommEst: out = IBV_EVENT_COMM_EST; return true;
    case AsyncEventType::kSqDrained: out = IBV_EVENT_SQ_DRAINED; return true;
    case AsyncEventType::kPathMig: out = IBV_EVENT_PATH_MIG; return true;
    case AsyncEventType::kPathMigErr: out = IBV_EVENT_PATH_MIG_ERR; return true;
    case AsyncEventType::kDeviceFatal: out = IBV_EVENT_DEVICE_FATAL; return true;
    case AsyncEventType::kPortActive: out = IBV_EVENT_PORT_ACTIVE; return true;
    case AsyncEventType::kPortErr: out = IBV_EVENT_PORT_ERR; return true;
    case AsyncEventType::kLidChange: out = IBV_EVENT_LID_CHANGE; return true;
    case AsyncEventType::kPkeyChange: out = IBV_EVENT_PKEY_CHANGE; return true;
    case AsyncEventType::kSmChange: out = IBV_EVENT_SM_CHANGE; return true;
    case AsyncEventType::kSrqErr: out = IBV_EVENT_SRQ_ERR; return true;
    case AsyncEventType::kSrqLimitReached: out = IBV_EVENT_SRQ_LIMIT_REACHED; return true;
    case AsyncEventType::kQpLastWqeReached: out = IBV_EVENT_QP_LAST_WQE_REACHED; return true;
    case AsyncEventType::kClientReregister: out = IBV_EVENT_CLIENT_REREGISTER; return true;
    case AsyncEventType::kGidChange: out = IBV_EVENT_GID_CHANGE; return true;
  }
  return false;
}

// --- access rights -----------------------------------------------------------

uint32_t qp_access_from_ibv(unsigned int ibv_access) {
  uint32_t access = 0;
  if (ibv_access & IBV_ACCESS_LOCAL_WRITE) access |= kAccessLocalWrite;
  if (ibv_access & IBV_ACCESS_REMOTE_WRITE) access |= kAccessRemoteWrite;
  if (ibv_access & IBV_ACCESS_REMOTE_READ) access |= kAccessRemoteRead;
  if (ibv_access & IBV_ACCESS_REMOTE_ATOMIC) access |= kAccessRemoteAtomic;
  if (ibv_access & kIbvAccessFlushGlobal) access |= kAccessFlushGlobal;
  if (ibv_access & kIbvAccessFlushPersistent) access |= kAccessFlushPersistent;
  return access;
}

unsigned int access_to_ibv(uint32_t access) {
  unsigned int out = 0;
  if (access & kAccessLocalWrite) out |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kAccessRemoteWrite) out |= IBV_ACCESS_REMOTE_WRITE;
  if (access & kAccessRemoteRead) out |= IBV_ACCESS_REMOTE_READ;
  if (access & kAccessRemoteAtomic) out |= IBV_ACCESS_REMOTE_ATOMIC;
  if (access & kAccessMwBind) out |= IBV_ACCESS_MW_BIND;
  if (access & kAccessFlushGlobal) out |= kIbvAccessFlushGlobal;
  if (access & kAccessFlushPersistent) out |= kIbvAccessFlushPersistent;
  return out;
}

Errno mr_access_from_ibv(unsigned int ibv_access, uint32_t& out) {
  // Optional bits are hints a device may ignore (IBV_ACCESS_OPTIONAL_RANGE),
  // and so is HUGETLB, a promise about the pages that the kernel (rxe,
  // mlx5) takes and no longer uses.
  const unsigned int access = ibv_access & ~static_cast<unsigned int>(IBV_ACCESS_OPTIONAL_RANGE) &
                              ~static_cast<unsigned int>(IBV_ACCESS_HUGETLB);
  // No soft MR is persistent memory: a flush to persistence has no target.
  constexpr unsigned int kUnsupported = kIbvAccessFlushPersistent;
  // How the MR is addressed and paged, not rights: the caller reads them.
  constexpr unsigned int kLayout = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND;
  constexpr unsigned int kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                      IBV_ACCESS_MW_BIND | kIbvAccessFlushGlobal | kLayout;
  if (access & ~(kSupported | kUnsupported)) return EINVAL;
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  if (access & kUnsupported) return EOPNOTSUPP;
  out = qp_access_from_ibv(access & ~kLayout);
  if (access & IBV_ACCESS_MW_BIND) out |= kAccessMwBind;
  return 0;
}

// --- QP attributes -----------------------------------------------------------

AddressVector from_ibv_ah_attr(const ibv_ah_attr& in) {
  AddressVector av;
  av.dlid = in.dlid;
  av.sl = in.sl;
  av.src_path_bits = in.src_path_bits;
  av.static_rate = in.static_rate;
  av.is_global = in.is_global != 0;
  av.dgid = from_ibv_gid(in.grh.dgid);
  av.flow_label = in.grh.flow_label;
  av.sgid_index = in.grh.sgid_index;
  av.hop_limit = in.grh.hop_limit;
  av.traffic_class = in.grh.traffic_class;
  av.port_num = in.port_num;
  return av;
}

void to_ibv_ah_attr(const AddressVector& in, ibv_ah_attr& out) {
  std::memset(&out, 0, sizeof(out));
  out.dlid = in.dlid;
  out.sl = in.sl;
  out.src_path_bits = in.src_path_bits;
  out.static_rate = in.static_rate;
  out.is_global = in.is_global ? 1 : 0;
  out.grh.dgid = to_ibv_gid(in.dgid);
  out.grh.flow_label = in.flow_label;
  out.grh.sgid_index = in.sgid_index;
  out.grh.hop_limit = in.hop_limit;
  out.grh.traffic_class = in.traffic_class;
  out.port_num = in.port_num;
}

QpCapabilities from_ibv_qp_cap(const ibv_qp_cap& in) {
  return QpCapabilities{in.max_send_wr, in.max_recv_wr, in.max_send_sge,
                        in.max_recv_sge, in.max_inline_data};
}

void to_ibv_qp_cap(const QpCapabilities& in, ibv_qp_cap& out) {
  out.max_send_wr = in.max_send_wr;
  out.max_recv_wr = in.max_recv_wr;
  out.max_send_sge = in.max_send_sge;
  out.max_recv_sge = in.max_recv_sge;
  out.max_inline_data = in.max_inline_data;
}

Errno from_ibv_qp_attr(const ibv_qp_attr& in, int ibv_mask, QpAttributes& out,
                       uint32_t& mask) {
  const uint32_t requested = static_cast<uint32_t>(ibv_mask);
  if (ibv_mask < 0 || (requested & ~kKnownQpAttrMask)) return EINVAL;

  QpAttributes attr;
  if (requested & IBV_QP_STATE) {
    if (Errno err = from_ibv_qp_state(raw_value(in.qp_state), attr.state)) return err;
  }
  if (requested & IBV_QP_CUR_STATE) {
    if (Errno err = from_ibv_qp_state(raw_value(in.cur_qp_state), attr.cur_state)) return err;
  }
  if (requested & IBV_QP_PATH_MTU) {
    if (Errno err = from_ibv_mtu(raw_value(in.path_mtu), attr.path_mtu)) return err;
  }
  if ((requested & IBV_QP_PATH_MIG_STATE) && raw_value(in.path_mig_state) > IBV_MIG_ARMED)
    return EINVAL;

  attr.access_flags = qp_access_from_ibv(in.qp_access_flags);
  attr.pkey_index = in.pkey_index;
  attr.port_num = in.port_num;
  attr.qkey = in.qkey;
  attr.av = from_ibv_ah_attr(in.ah_attr);
  attr.alt_av = from_ibv_ah_attr(in.alt_ah_attr);
  attr.timeout = in.timeout;
  attr.retry_cnt = in.retry_cnt;
  attr.rnr_retry = in.rnr_retry;
  attr.rq_psn = in.rq_psn;
  attr.sq_psn = in.sq_psn;
  attr.max_rd_atomic = in.max_rd_atomic;
  attr.max_dest_rd_atomic = in.max_dest_rd_atomic;
  attr.min_rnr_timer = in.min_rnr_timer;
  attr.dest_qp_num = in.dest_qp_num;
  attr.en_sqd_async_notify = in.en_sqd_async_notify != 0;
  attr.path_mig_state = static_cast<uint8_t>(raw_value(in.path_mig_state));
  attr.alt_pkey_index = in.alt_pkey_index;
  attr.alt_port_num = in.alt_port_num;
  attr.alt_timeout = in.alt_timeout;
  attr.cap = from_ibv_qp_cap(in.cap);

  uint32_t hca_mask = 0;
  for (const auto& pair : kQpAttrMaskPairs)
    if (requested & pair.ibv) hca_mask |= pair.hca;

  out = attr;
  mask = hca_mask;
  return 0;
}

void to_ibv_qp_attr(const QpAttributes& in, ibv_qp_attr& out) {
  std::memset(&out, 0, sizeof(out));
  out.qp_state = to_ibv_qp_state(in.state);
  out.cur_qp_state = to_ibv_qp_state(in.cur_state);
  out.path_mtu = to_ibv_mtu(in.path_mtu);
  out.path_mig_state = static_cast<ibv_mig_state>(in.path_mig_state);
  out.qkey = in.qkey;
  out.rq_psn = in.rq_psn;
  out.sq_psn = in.sq_psn;
  out.dest_qp_num = in.dest_qp_num;
  out.qp_access_flags = access_to_ibv(in.access_flags);
  to_ibv_qp_cap(in.cap, out.cap);
  to_ibv_ah_attr(in.av, out.ah_attr);
  to_ibv_ah_attr(in.alt_av, out.alt_ah_attr);
  out.pkey_index = in.pkey_index;
  out.alt_pkey_index = in.alt_pkey_index;
  out.en_sqd_async_notify = in.en_sqd_async_notify ? 1 : 0;
  out.sq_draining = in.sq_draining ? 1 : 0;
  out.max_rd_atomic = in.max_rd_atomic;
  out.max_dest_rd_atomic = in.max_dest_rd_atomic;
  out.min_rnr_timer = in.min_rnr_timer;
  out.port_num = in.port_num;
  out.timeout = in.timeout;
  out.retry_cnt = in.retry_cnt;
  out.rnr_retry = in.rnr_retry;
  out.alt_port_num = in.alt_port_num;
  out.alt_timeout = in.alt_timeout;
}

// --- work requests and completions --------------------------------------------

Errno from_ibv_wr_opcode(int opcode, WrOpcode& out) {
  switch (opcode) {
    case IBV_WR_SEND: out = WrOpcode::kSend; return 0;
    case IBV_WR_SEND_WITH_IMM: out = WrOpcode::kSendWithImm; return 0;
    case IBV_WR_RDMA_WRITE: out = WrOpcode::kRdmaWrite; return 0;
    case IBV_WR_RDMA_WRITE_WITH_IMM: out = WrOpcode::kRdmaWriteWithImm; return 0;
    case IBV_WR_RDMA_READ: out = WrOpcode::kRdmaRead; return 0;
    case IBV_WR_ATOMIC_CMP_AND_SWP: out = WrOpcode::kAtomicCmpSwp; return 0;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: out = WrOpcode::kAtomicFetchAdd; return 0;
    case IBV_WR_SEND_WITH_INV: out = WrOpcode::kSendWithInv; return 0;
    case IBV_WR_BIND_MW: out = WrOpcode::kBindMw; return 0;
    case IBV_WR_LOCAL_INV: out = WrOpcode::kLocalInv; return 0;
    case IBV_WR_ATOMIC_WRITE: out = WrOpcode::kAtomicWrite; return 0;
    // TSO, DRIVER1, and FLUSH, which no ibv_send_wr can carry (ibv_wr_flush).
    default: return EINVAL;
  }
}

uint32_t send_flags_from_ibv(unsigned int flags) {
  uint32_t out = 0;
  if (flags & IBV_SEND_SIGNALED) out |= kWrSignaled;
  if (flags & IBV_SEND_SOLICITED) out |= kWrSolicited;
  if (flags & IBV_SEND_INLINE) out |= kWrInline;
  if (flags & IBV_SEND_FENCE) out |= kWrFence;
  return out;
}

Errno from_ibv_send_wr(const ibv_send_wr& in, SendRequest& out) {
  WrOpcode opcode;
  if (Errno err = from_ibv_wr_opcode(raw_value(in.opcode), opcode)) return err;
  out.wr_id = in.wr_id;
  out.opcode = opcode;
  out.flags = send_flags_from_ibv(in.send_flags);
  // imm_data (network order) and invalidate_rkey share the union; the HCA
  // reads the one the opcode carries from the same field.
  out.imm_data = in.imm_data;
  switch (opcode) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
    case WrOpcode::kRdmaRead:
      out.remote_addr = in.wr.rdma.remote_addr;
      out.rkey = in.wr.rdma.rkey;
      break;
    case WrOpcode::kAtomicCmpSwp:
    case WrOpcode::kAtomicFetchAdd:
      out.remote_addr = in.wr.atomic.remote_addr;
      out.rkey = in.wr.atomic.rkey;
      out.compare_add = in.wr.atomic.compare_add;
      out.swap = in.wr.atomic.swap;
      break;
    case WrOpcode::kSendWithInv:
      out.rkey = in.invalidate_rkey;
      break;
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      // For UD the union holds the destination instead.
      out.remote_qpn = in.wr.ud.remote_qpn;
      out.remote_qkey = in.wr.ud.remote_qkey;
      break;
    case WrOpcode::kLocalInv:
      out.rkey = in.invalidate_rkey;
      break;
    case WrOpcode::kBindMw:
      out.rkey = in.bind_mw.rkey;  // the rest needs the objects: translate_window_binding
      break;
    case WrOpcode::kAtomicWrite:
      // The 8 bytes are those of its one SGE, read at post time.
      if (in.num_sge != 1 || !in.sg_list || in.sg_list[0].length != sizeof(uint64_t) ||
          !in.sg_list[0].addr)
        return EINVAL;
      out.remote_addr = in.wr.rdma.remote_addr;
      out.rkey = in.wr.rdma.rkey;
      std::memcpy(&out.atomic_write_data, reinterpret_cast<const void*>(in.sg_list[0].addr),
                  sizeof(uint64_t));
      break;
    case WrOpcode::kFlush: return EINVAL;  // from ibv_wr_flush only
  }
  return 0;
}

unsigned int to_ibv_wc_flags(uint32_t flags) {
  unsigned int out = 0;
  if (flags & kWcGrh) out |= IBV_WC_GRH;
  if (flags & kWcWithImm) out |= IBV_WC_WITH_IMM;
  if (flags & kWcWithInv) out |= IBV_WC_WITH_INV;
  return out;
}

void to_ibv_wc(const Completion& in, ibv_wc& out) {
  out.wr_id = in.wr_id;
  out.status = to_ibv_wc_status(in.status);
  out.opcode = to_ibv_wc_opcode(in.opcode);
  out.vendor_err = in.vendor_err;
  out.byte_len = in.byte_len;
  out.wc_flags = to_ibv_wc_flags(in.wc_flags);
  if (in.wc_flags & kWcWithInv)
    out.invalidated_rkey = in.invalidated_rkey;
  else
    out.imm_data = in.imm_data;
  out.qp_num = in.qp_num;
  out.src_qp = in.src_qp;
  out.pkey_index = in.pkey_index;
  out.slid = in.slid;
  out.sl = in.sl;
  out.dlid_path_bits = in.dlid_path_bits;
}

}  // namespace softverbs::provider
