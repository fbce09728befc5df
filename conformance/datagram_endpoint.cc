#include "conformance/datagram_endpoint.h"

#include <cstring>

#include "harness/testsupport/completion_polling.h"

namespace softverbs::conformance {

using namespace testsupport;

DatagramEndpoint::DatagramEndpoint(uint32_t qkey, bool with_srq, uint32_t buffer_bytes)
    : buffer_(buffer_bytes) {
  Errno err = 0;
  context_ = open_test_device(err);
  if (!context_) {
    error_ = "open device: " + std::string(strerror(err));
    return;
  }
  if ((err = query_test_port_address(context_.get(), port_))) {
    error_ = "query port: " + std::string(strerror(err));
    return;
  }
  pd_.reset(ibv_alloc_pd(context_.get()));
  cq_.reset(ibv_create_cq(context_.get(), 4096, nullptr, nullptr, 0));
  mr_.reset(ibv_reg_mr(pd_.get(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE));
  if (!pd_ || !cq_ || !mr_) {
    error_ = "pd/cq/mr: " + std::string(strerror(errno));
    return;
  }
  if (with_srq) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = 256;
    init.attr.max_sge = 1;
    srq_ = ibv_create_srq(pd_.get(), &init);
    if (!srq_) {
      error_ = "ibv_create_srq: " + std::string(strerror(errno));
      return;
    }
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq_.get();
  init.recv_cq = cq_.get();
  init.srq = srq_;
  init.qp_type = IBV_QPT_UD;
  init.cap = {256, with_srq ? 0u : 256u, 1, 1, 0};
  qp_.reset(ibv_create_qp(pd_.get(), &init));
  if (!qp_) {
    error_ = "ibv_create_qp(UD): " + std::string(strerror(errno));
    return;
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = port_.port;
  attr.qkey = qkey;
  if ((err = ibv_modify_qp(qp_.get(), &attr,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))) {
    error_ = "to INIT: " + std::string(strerror(err));
    return;
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  if ((err = ibv_modify_qp(qp_.get(), &attr, IBV_QP_STATE))) {
    error_ = "to RTR: " + std::string(strerror(err));
    return;
  }
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = 0;
  if ((err = ibv_modify_qp(qp_.get(), &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)))
    error_ = "to RTS: " + std::string(strerror(err));
}

DatagramEndpoint::~DatagramEndpoint() {
  qp_.reset();
  if (srq_) ibv_destroy_srq(srq_);
  for (ibv_ah* ah : ahs_) ibv_destroy_ah(ah);
}

DatagramAddress DatagramEndpoint::address() const {
  return DatagramAddress{qp_ ? qp_->qp_num : 0, port_.lid, port_.gid, port_.use_grh,
                         port_.gid_index};
}

ibv_ah* DatagramEndpoint::make_ah(const DatagramAddress& to) {
  ibv_ah_attr attr{};
  attr.dlid = to.lid;
  attr.port_num = port_.port;
  if (to.use_grh || port_.use_grh) {
    attr.is_global = 1;
    attr.grh.dgid = to.gid;
    attr.grh.sgid_index = port_.gid_index;
    attr.grh.hop_limit = 1;
  }
  ibv_ah* ah = ibv_create_ah(pd_.get(), &attr);
  if (ah) ahs_.push_back(ah);
  return ah;
}

ibv_ah* DatagramEndpoint::make_group_ah(const ibv_gid& group, uint16_t mlid) {
  ibv_ah_attr attr{};
  attr.dlid = mlid;
  attr.port_num = port_.port;
  attr.is_global = 1;
  attr.grh.dgid = group;
  attr.grh.sgid_index = port_.gid_index;
  attr.grh.hop_limit = 1;
  ibv_ah* ah = ibv_create_ah(pd_.get(), &attr);
  if (ah) ahs_.push_back(ah);
  return ah;
}

int DatagramEndpoint::post_recv(uint64_t wr_id, uint64_t offset, uint32_t length) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return srq_ ? ibv_post_srq_recv(srq_, &wr, &bad) : ibv_post_recv(qp_.get(), &wr, &bad);
}

int DatagramEndpoint::send(ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey,
                           uint64_t wr_id, uint64_t offset, uint32_t length, const uint32_t* imm) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  if (imm) wr.imm_data = *imm;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = remote_qpn;
  wr.wr.ud.remote_qkey = remote_qkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp_.get(), &wr, &bad);
}

std::vector<ibv_wc> DatagramEndpoint::poll(size_t count, std::chrono::milliseconds timeout) {
  std::vector<ibv_wc> out;
  poll_completions(cq_.get(), count, out, timeout);  // a shortfall is the caller's to judge
  return out;
}

}  // namespace softverbs::conformance
