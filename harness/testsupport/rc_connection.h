// Creating RC QPs and walking them through RESET -> INIT -> RTR -> RTS with
// the attributes ibv_modify_qp(3) requires for each transition.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <type_traits>

#include "harness/testsupport/device.h"
#include "harness/testsupport/errors.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::testsupport {

// Required attribute masks of the RC transitions (ibv_modify_qp(3), IBTA
// 11.2.5.2 table "QP State Transition Properties").
constexpr int kRcResetToInitMask =
    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
constexpr int kRcInitToRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                 IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
constexpr int kRcRtrToRtsMask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                IBV_QP_MAX_QP_RD_ATOMIC;

// What one side tells the other to connect: its QP and, optionally, a buffer
// the peer may access remotely. Plain bytes, so it crosses a socket as is.
struct QpEndpoint {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint16_t alt_lid = 0;  // its device's other port, for an alternate path; 0: none
  uint8_t gid[16] = {};
  uint32_t rkey = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
};
static_assert(std::is_trivially_copyable_v<QpEndpoint>);

QpEndpoint describe_endpoint(const ibv_qp* qp, uint32_t psn, const PortAddress& port,
                             const ibv_mr* mr = nullptr);

// Attributes of the connection beyond addressing; defaults suit a test that
// is not about retries: a 0.5 s transport timeout (4.096 us * 2^17) with 7
// retries rides out a peer process that a loaded host does not schedule for
// a while, and RNR retries are infinite.
struct RcParameters {
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
               IBV_ACCESS_REMOTE_READ;
  ibv_mtu path_mtu = IBV_MTU_4096;  // lowered to the port's active MTU
  uint8_t timeout = 17;
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 12;
  uint8_t max_rd_atomic = 1;
  uint8_t max_dest_rd_atomic = 1;
  // In RTS, load the other ports of both ends as the alternate path and
  // rearm path migration (IBTA 17.2.8); needs two InfiniBand ports.
  bool alternate_path = false;
};

// Creates an RC QP on `pd`. `cap` asks; `granted` (if given) receives what
// the device granted. Returns null with `err` set on failure.
QpPtr create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, const ibv_qp_cap& cap,
                   bool sq_sig_all, Errno& err, ibv_qp_cap* granted = nullptr);

// The address vector that reaches `remote` from `local`'s port.
ibv_ah_attr address_vector_to(const PortAddress& local, const QpEndpoint& remote);

Errno modify_rc_to_init(ibv_qp* qp, const PortAddress& local, const RcParameters& params);
Errno modify_rc_to_rtr(ibv_qp* qp, const PortAddress& local, const QpEndpoint& remote,
                       const RcParameters& params);
Errno modify_rc_to_rts(ibv_qp* qp, uint32_t sq_psn, const RcParameters& params);
// RTS -> RTS loading the alternate path (local.alt_port to remote.alt_lid)
// with IBV_MIG_REARM. EINVAL when either end has no other port.
Errno load_alternate_path(ibv_qp* qp, const PortAddress& local, const QpEndpoint& remote,
                          const RcParameters& params);

// RESET -> INIT -> RTR -> RTS against `remote`, sending from `local_psn`.
Errno connect_rc_qp(ibv_qp* qp, const PortAddress& local, uint32_t local_psn,
                    const QpEndpoint& remote, const RcParameters& params = {});

// Connects two QPs of one process to each other (both on `port`).
Errno connect_rc_pair(ibv_qp* a, ibv_qp* b, const PortAddress& port,
                      const RcParameters& params = {});

// Current state of `qp` as ibv_query_qp reports it; IBV_QPS_UNKNOWN on error.
ibv_qp_state query_qp_state(ibv_qp* qp);

}  // namespace softverbs::testsupport
