#include "bench/rc_endpoint.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

namespace softverbs::bench {
namespace {

constexpr uint8_t kPort = 1;
constexpr int kCqDepth = 2 * RcEndpoint::kSendQueueDepth;

std::string describe(const char* what, int error) {
  return std::string(what) + ": " + std::strerror(error);
}

constexpr const char* kRunUnderSoftverbs =
    " (run the benchmarks under `softverbs run --`, or name another device in "
    "SOFTVERBS_BENCH_DEVICE)";

// Opens the device called `name`, or nullptr.
ibv_context* open_device(const std::string& name, std::string& error) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) {
    error = describe("ibv_get_device_list", errno) + kRunUnderSoftverbs;
    return nullptr;
  }
  ibv_context* context = nullptr;
  bool found = false;
  for (int i = 0; i < count; ++i) {
    if (name == ibv_get_device_name(list[i])) {
      found = true;
      context = ibv_open_device(list[i]);
      if (!context) error = describe("ibv_open_device", errno);
      break;
    }
  }
  ibv_free_device_list(list);
  if (!found) error = "no RDMA device named " + name + kRunUnderSoftverbs;
  return context;
}

}  // namespace

std::string benchmark_device_name() {
  const char* name = std::getenv("SOFTVERBS_BENCH_DEVICE");
  return name && *name ? name : "softverbs0";
}

std::unique_ptr<RcEndpoint> RcEndpoint::open(const std::string& device_name,
                                             std::size_t region_bytes, std::string& error) {
  std::unique_ptr<RcEndpoint> endpoint(new RcEndpoint);
  RcEndpoint& e = *endpoint;
  e.context_ = open_device(device_name, error);
  if (!e.context_) return nullptr;
  if (ibv_query_port(e.context_, kPort, &e.port_) != 0) {
    error = describe("ibv_query_port", errno);
    return nullptr;
  }
  if (ibv_query_gid(e.context_, kPort, 0, &e.gid_) != 0) {
    error = describe("ibv_query_gid", errno);
    return nullptr;
  }
  e.pd_ = ibv_alloc_pd(e.context_);
  if (!e.pd_) {
    error = describe("ibv_alloc_pd", errno);
    return nullptr;
  }
  e.region_bytes_ = region_bytes;
  void* memory = nullptr;
  if (posix_memalign(&memory, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), 2 * region_bytes) != 0) {
    error = "out of memory for the buffers";
    return nullptr;
  }
  e.buffer_ = static_cast<uint8_t*>(memory);
  std::memset(e.buffer_, 0, 2 * region_bytes);
  e.mr_ = ibv_reg_mr(e.pd_, e.buffer_, 2 * region_bytes,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!e.mr_) {
    error = describe("ibv_reg_mr", errno);
    return nullptr;
  }
  e.send_cq_ = ibv_create_cq(e.context_, kCqDepth, nullptr, nullptr, 0);
  e.recv_cq_ = ibv_create_cq(e.context_, kCqDepth, nullptr, nullptr, 0);
  if (!e.send_cq_ || !e.recv_cq_) {
    error = describe("ibv_create_cq", errno);
    return nullptr;
  }
  ibv_qp_init_attr init{};
  init.send_cq = e.send_cq_;
  init.recv_cq = e.recv_cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kSendQueueDepth;
  init.cap.max_recv_wr = kSendQueueDepth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  e.qp_ = ibv_create_qp(e.pd_, &init);
  if (!e.qp_) {
    error = describe("ibv_create_qp", errno);
    return nullptr;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = kPort;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (int rc = ibv_modify_qp(e.qp_, &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
    error = describe("ibv_modify_qp to INIT", rc);
    return nullptr;
  }
  std::random_device seed;
  e.psn_ = seed() & 0xffffff;
  return endpoint;
}

RcEndpoint::~RcEndpoint() {
  // Children before parents, as verbs requires.
  if (qp_) ibv_destroy_qp(qp_);
  if (send_cq_) ibv_destroy_cq(send_cq_);
  if (recv_cq_) ibv_destroy_cq(recv_cq_);
  if (mr_) ibv_dereg_mr(mr_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (context_) ibv_close_device(context_);
  std::free(buffer_);
}

EndpointAddress RcEndpoint::address() const {
  EndpointAddress address;
  address.qpn = qp_->qp_num;
  address.psn = psn_;
  address.lid = port_.lid;
  address.use_gid = port_.link_layer == IBV_LINK_LAYER_ETHERNET || port_.lid == 0;
  std::memcpy(address.gid, gid_.raw, sizeof address.gid);
  address.recv_region = reinterpret_cast<uintptr_t>(buffer_ + region_bytes_);
  address.rkey = mr_->rkey;
  return address;
}

bool RcEndpoint::connect(const EndpointAddress& remote, std::string& error) {
  remote_recv_region_ = remote.recv_region;
  remote_rkey_ = remote.rkey;

  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = port_.active_mtu;
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = kPort;
  attr.ah_attr.dlid = remote.lid;
  if (remote.use_gid) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, remote.gid, sizeof remote.gid);
    attr.ah_attr.grh.sgid_index = 0;
    attr.ah_attr.grh.hop_limit = 1;
  }
  if (int rc = ibv_modify_qp(qp_, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                 IBV_QP_MIN_RNR_TIMER)) {
    error = describe("ibv_modify_qp to RTR", rc);
    return false;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;
  attr.retry_cnt = 7;
  attr.rnr_retry = 7;
  attr.sq_psn = psn_;
  attr.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp_, &attr,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    error = describe("ibv_modify_qp to RTS", rc);
    return false;
  }
  return true;
}

bool RcEndpoint::post_send(uint32_t length, bool signaled) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(send_region()), length, mr_->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, &wr, &bad)) {
    last_error_ = describe("ibv_post_send", rc);
    return false;
  }
  return true;
}

bool RcEndpoint::post_write(uint32_t length, bool signaled, bool immediate) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(send_region()), length, mr_->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = immediate ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.imm_data = htonl(length);
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.wr.rdma.remote_addr = remote_recv_region_;
  wr.wr.rdma.rkey = remote_rkey_;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, &wr, &bad)) {
    last_error_ = describe("ibv_post_send (RDMA WRITE)", rc);
    return false;
  }
  return true;
}

bool RcEndpoint::post_recv(uint32_t length) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(recv_region()), length, mr_->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_, &wr, &bad)) {
    last_error_ = describe("ibv_post_recv", rc);
    return false;
  }
  return true;
}

int RcEndpoint::poll_send_cq() { return poll(send_cq_); }
int RcEndpoint::poll_recv_cq() { return poll(recv_cq_); }

int RcEndpoint::poll(ibv_cq* cq) {
  ibv_wc completions[16];
  const int count = ibv_poll_cq(cq, 16, completions);
  if (count < 0) {
    last_error_ = "ibv_poll_cq failed";
    return -1;
  }
  for (int i = 0; i < count; ++i) {
    if (completions[i].status != IBV_WC_SUCCESS) {
      last_error_ = std::string("completion with status ") + ibv_wc_status_str(completions[i].status);
      return -1;
    }
  }
  return count;
}

}  // namespace softverbs::bench
