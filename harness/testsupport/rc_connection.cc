#include "harness/testsupport/rc_connection.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace softverbs::testsupport {

QpEndpoint describe_endpoint(const ibv_qp* qp, uint32_t psn, const PortAddress& port,
                             const ibv_mr* mr) {
  QpEndpoint endpoint;
  endpoint.qpn = qp->qp_num;
  endpoint.psn = psn & 0xffffff;
  endpoint.lid = port.lid;
  endpoint.alt_lid = port.alt_lid;
  std::memcpy(endpoint.gid, port.gid.raw, sizeof endpoint.gid);
  if (mr) {
    endpoint.rkey = mr->rkey;
    endpoint.addr = reinterpret_cast<uintptr_t>(mr->addr);
    endpoint.length = mr->length;
  }
  return endpoint;
}

QpPtr create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, const ibv_qp_cap& cap,
                   bool sq_sig_all, Errno& err, ibv_qp_cap* granted) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.cap = cap;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = sq_sig_all ? 1 : 0;
  errno = 0;
  QpPtr qp(ibv_create_qp(pd, &init));
  err = qp ? 0 : (errno ? errno : EINVAL);
  if (qp && granted) *granted = init.cap;
  return qp;
}

ibv_ah_attr address_vector_to(const PortAddress& local, const QpEndpoint& remote) {
  ibv_ah_attr av{};
  av.port_num = local.port;
  av.sl = 0;
  av.src_path_bits = 0;
  av.static_rate = 0;
  if (local.use_grh) {
    av.is_global = 1;
    std::memcpy(av.grh.dgid.raw, remote.gid, sizeof remote.gid);
    av.grh.sgid_index = local.gid_index;
    av.grh.hop_limit = 64;
    av.grh.traffic_class = 0;
    av.grh.flow_label = 0;
  } else {
    av.dlid = remote.lid;
  }
  return av;
}

Errno modify_rc_to_init(ibv_qp* qp, const PortAddress& local, const RcParameters& params) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local.port;
  attr.qp_access_flags = params.access;
  return ibv_modify_qp(qp, &attr, kRcResetToInitMask);
}

Errno modify_rc_to_rtr(ibv_qp* qp, const PortAddress& local, const QpEndpoint& remote,
                       const RcParameters& params) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.ah_attr = address_vector_to(local, remote);
  attr.path_mtu = std::min(params.path_mtu, local.active_mtu);
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = params.max_dest_rd_atomic;
  attr.min_rnr_timer = params.min_rnr_timer;
  return ibv_modify_qp(qp, &attr, kRcInitToRtrMask);
}

Errno modify_rc_to_rts(ibv_qp* qp, uint32_t sq_psn, const RcParameters& params) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = sq_psn & 0xffffff;
  attr.timeout = params.timeout;
  attr.retry_cnt = params.retry_cnt;
  attr.rnr_retry = params.rnr_retry;
  attr.max_rd_atomic = params.max_rd_atomic;
  return ibv_modify_qp(qp, &attr, kRcRtrToRtsMask);
}

Errno load_alternate_path(ibv_qp* qp, const PortAddress& local, const QpEndpoint& remote,
                          const RcParameters& params) {
  if (local.alt_port == 0 || remote.alt_lid == 0) return EINVAL;
  ibv_qp_attr attr{};
  attr.alt_ah_attr.dlid = remote.alt_lid;
  attr.alt_ah_attr.port_num = local.alt_port;
  attr.alt_port_num = local.alt_port;
  attr.alt_pkey_index = 0;
  attr.alt_timeout = params.timeout;
  attr.path_mig_state = IBV_MIG_REARM;
  return ibv_modify_qp(qp, &attr, IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE);
}

Errno connect_rc_qp(ibv_qp* qp, const PortAddress& local, uint32_t local_psn,
                    const QpEndpoint& remote, const RcParameters& params) {
  if (Errno err = modify_rc_to_init(qp, local, params)) return err;
  if (Errno err = modify_rc_to_rtr(qp, local, remote, params)) return err;
  if (Errno err = modify_rc_to_rts(qp, local_psn, params)) return err;
  return params.alternate_path ? load_alternate_path(qp, local, remote, params) : 0;
}

Errno connect_rc_pair(ibv_qp* a, ibv_qp* b, const PortAddress& port,
                      const RcParameters& params) {
  constexpr uint32_t kPsnA = 0x1000, kPsnB = 0x2000;
  const QpEndpoint end_a = describe_endpoint(a, kPsnA, port);
  const QpEndpoint end_b = describe_endpoint(b, kPsnB, port);
  if (Errno err = connect_rc_qp(a, port, kPsnA, end_b, params)) return err;
  return connect_rc_qp(b, port, kPsnB, end_a, params);
}

ibv_qp_state query_qp_state(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) != 0) return IBV_QPS_UNKNOWN;
  return attr.qp_state;
}

}  // namespace softverbs::testsupport
