#include "bench/loopback.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace softverbs::bench {
namespace {

constexpr uint8_t kPort = 1;

std::string describe(const char* what, int error) { return std::string(what) + ": " + std::strerror(error); }

}  // namespace

ibv_context* open_device_named(const std::string& name, std::string& error) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) {
    error = describe("ibv_get_device_list", errno) + " (run under `softverbs run --`)";
    return nullptr;
  }
  ibv_context* context = nullptr;
  error = "no RDMA device named " + name + " (run under `softverbs run --`)";
  for (int i = 0; i < count; ++i) {
    if (name != ibv_get_device_name(list[i])) continue;
    context = ibv_open_device(list[i]);
    error = context ? "" : describe("ibv_open_device", errno);
    break;
  }
  ibv_free_device_list(list);
  return context;
}

bool LoopbackPort::query(ibv_context* context, std::string& error) {
  if (ibv_query_port(context, kPort, &attr) != 0) {
    error = describe("ibv_query_port", errno);
    return false;
  }
  if (ibv_query_gid(context, kPort, 0, &gid) != 0) {
    error = describe("ibv_query_gid", errno);
    return false;
  }
  return true;
}

ibv_qp* create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, uint32_t depth, std::string& error) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq;
  init.recv_cq = recv_cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = depth;
  init.cap.max_recv_wr = depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (!qp) error = describe("ibv_create_qp", errno);
  return qp;
}

bool post_one_receive(ibv_qp* qp, void* address, uint32_t bytes, uint32_t lkey, std::string& error) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(address), bytes, lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp, &wr, &bad)) {
    error = describe("ibv_post_recv", rc);
    return false;
  }
  return true;
}

bool connect_loopback(ibv_qp* qp, const LoopbackPort& port, uint32_t remote_qpn, std::string& error) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = kPort;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    error = describe("ibv_modify_qp to INIT", rc);
    return false;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = port.attr.active_mtu;
  attr.dest_qp_num = remote_qpn;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = kPort;
  attr.ah_attr.dlid = port.attr.lid;
  if (port.attr.link_layer == IBV_LINK_LAYER_ETHERNET || port.attr.lid == 0) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = port.gid;
    attr.ah_attr.grh.hop_limit = 1;
  }
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
    error = describe("ibv_modify_qp to RTR", rc);
    return false;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = 0;
  attr.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                 IBV_QP_MAX_QP_RD_ATOMIC)) {
    error = describe("ibv_modify_qp to RTS", rc);
    return false;
  }
  return true;
}

long resident_kib() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (!status) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, status)) {
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  }
  std::fclose(status);
  return kib;
}

}  // namespace softverbs::bench
