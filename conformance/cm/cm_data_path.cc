#include "conformance/cm/cm_data_path.h"

#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace softverbs::conformance::cm {
namespace {

using Clock = std::chrono::steady_clock;

::testing::AssertionResult posted(int rc, const char* what) {
  if (rc == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << strerror(rc);
}

ibv_sge slot_sge(RegisteredBuffer& buffer, uint32_t slot, uint32_t length) {
  return ibv_sge{reinterpret_cast<uint64_t>(buffer.slot(slot)), length, buffer.mr()->lkey};
}

}  // namespace

RegisteredBuffer::~RegisteredBuffer() { deregister(); }

void RegisteredBuffer::deregister() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  mr_ = nullptr;
}

::testing::AssertionResult RegisteredBuffer::register_on(ibv_pd* pd) {
  if (pd == nullptr) return ::testing::AssertionFailure() << "the id has no PD";
  bytes_.assign(size_t(kSlots) * kSlotBytes, 0);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  mr_ = ibv_reg_mr(pd, bytes_.data(), bytes_.size(), access);
  if (mr_ == nullptr) return ::testing::AssertionFailure() << "ibv_reg_mr: " << strerror(errno);
  return ::testing::AssertionSuccess();
}

RemoteBuffer RegisteredBuffer::remote_slot(uint32_t index) const {
  return RemoteBuffer{reinterpret_cast<uint64_t>(bytes_.data() + slot_offset(index)), mr_->rkey,
                      kSlotBytes};
}

::testing::AssertionResult create_qp(rdma_cm_id* id) {
  ibv_qp_init_attr attr{};
  attr.qp_type = id->qp_type;
  attr.cap.max_send_wr = kSlots;
  attr.cap.max_recv_wr = kSlots;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  if (rdma_create_qp(id, nullptr, &attr) != 0)
    return ::testing::AssertionFailure() << "rdma_create_qp: " << strerror(errno);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult post_receive(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot) {
  ibv_sge sge = slot_sge(buffer, slot, kSlotBytes);
  ibv_recv_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return posted(ibv_post_recv(qp, &wr, &bad), "ibv_post_recv");
}

namespace {

ibv_send_wr send_wr(ibv_sge& sge, uint32_t slot, ibv_wr_opcode opcode) {
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  return wr;
}

}  // namespace

::testing::AssertionResult post_send(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot,
                                     uint32_t length) {
  ibv_sge sge = slot_sge(buffer, slot, length);
  ibv_send_wr wr = send_wr(sge, slot, IBV_WR_SEND);
  ibv_send_wr* bad = nullptr;
  return posted(ibv_post_send(qp, &wr, &bad), "ibv_post_send (SEND)");
}

::testing::AssertionResult post_write(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot,
                                      uint32_t length, const RemoteBuffer& to) {
  ibv_sge sge = slot_sge(buffer, slot, length);
  ibv_send_wr wr = send_wr(sge, slot, IBV_WR_RDMA_WRITE);
  wr.wr.rdma.remote_addr = to.address;
  wr.wr.rdma.rkey = to.rkey;
  ibv_send_wr* bad = nullptr;
  return posted(ibv_post_send(qp, &wr, &bad), "ibv_post_send (RDMA WRITE)");
}

::testing::AssertionResult post_ud_send(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot,
                                        uint32_t length, ibv_ah* ah, uint32_t qpn, uint32_t qkey) {
  ibv_sge sge = slot_sge(buffer, slot, length);
  ibv_send_wr wr = send_wr(sge, slot, IBV_WR_SEND);
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  return posted(ibv_post_send(qp, &wr, &bad), "ibv_post_send (UD SEND)");
}

::testing::AssertionResult wait_completion(ibv_cq* cq, ibv_wc& wc,
                                           std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  for (;;) {
    int n = ibv_poll_cq(cq, 1, &wc);
    if (n == 1) return ::testing::AssertionSuccess();
    if (n < 0) return ::testing::AssertionFailure() << "ibv_poll_cq: " << n;
    if (Clock::now() >= until)
      return ::testing::AssertionFailure() << "no completion within " << timeout.count() << " ms";
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

::testing::AssertionResult wait_success(ibv_cq* cq, ibv_wc_opcode opcode, ibv_wc& wc,
                                        std::chrono::milliseconds timeout) {
  auto got = wait_completion(cq, wc, timeout);
  if (!got) return got;
  if (wc.status != IBV_WC_SUCCESS || wc.opcode != opcode)
    return ::testing::AssertionFailure()
           << "completion " << ibv_wc_status_str(wc.status) << " opcode " << wc.opcode
           << " (wr_id " << wc.wr_id << "), expected success with opcode " << opcode;
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult no_completion_within(ibv_cq* cq, std::chrono::milliseconds window) {
  ibv_wc wc{};
  if (!wait_completion(cq, wc, window)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "a completion arrived: " << ibv_wc_status_str(wc.status)
                                       << " wr_id " << wc.wr_id;
}

void fill_pattern(uint8_t* data, size_t length, uint8_t seed) {
  for (size_t i = 0; i < length; ++i) data[i] = static_cast<uint8_t>(seed + i);
}

::testing::AssertionResult has_pattern(const uint8_t* data, size_t length, uint8_t seed) {
  for (size_t i = 0; i < length; ++i) {
    if (data[i] != static_cast<uint8_t>(seed + i))
      return ::testing::AssertionFailure() << "byte " << i << " is " << int(data[i])
                                           << ", expected " << int(static_cast<uint8_t>(seed + i));
  }
  return ::testing::AssertionSuccess();
}

}  // namespace softverbs::conformance::cm
