// Brings an RC QP of a load run to RTS toward a peer's QP, by LID or, on
// RoCE (LID 0), by GID: the attributes and masks of ibv_modify_qp(3).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>

namespace softverbs::load {

struct RcPeer {
  uint16_t lid = 0;
  const uint8_t* gid = nullptr;  // 16 bytes
  uint32_t qpn = 0;
  uint8_t local_gid_index = 0;   // the GID we send from, on RoCE
};

// 0, or the errno of the first transition that failed (`failed` names it).
inline int connect_rc(ibv_qp* qp, ibv_mtu mtu, const RcPeer& peer, uint8_t timeout,
                      const char*& failed, uint8_t rnr_retry = 7) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
  failed = "INIT";
  if (int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                          IBV_QP_ACCESS_FLAGS))
    return err;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = 1;
  a.ah_attr.dlid = peer.lid;
  if (peer.lid == 0) {  // RoCE: by GID
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.sgid_index = peer.local_gid_index;
  }
  failed = "RTR";
  if (int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                          IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return err;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 1;
  a.timeout = timeout;
  a.retry_cnt = 7;
  a.rnr_retry = rnr_retry;
  a.max_rd_atomic = 1;
  failed = "RTS";
  return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

}  // namespace softverbs::load
