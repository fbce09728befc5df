// Shared receive queues (IBTA 10.2.9, 11.2.3; ibv_create_srq(3),
// ibv_modify_srq(3)): RC QPs attached to one SRQ take its WQEs in order;
// an empty SRQ answers a SEND with RNR, and the SEND completes once a WQE
// is posted; the limit event fires once per arming; a QP that enters ERR
// raises LAST_WQE_REACHED; an SRQ in use cannot be destroyed; resize keeps
// the posted WQEs; UD QPs share an SRQ too.
#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <vector>

#include "conformance/datagram_endpoint.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/device.h"
#include "harness/testsupport/soft_control.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::conformance {
namespace {

using namespace testsupport;
constexpr auto kWait = std::chrono::milliseconds(5000);

// One process, one device: two senders and two receivers on one SRQ,
// connected pairwise through the device's own port.
class SrqTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Errno err = 0;
    context_ = open_test_device(err);
    ASSERT_TRUE(context_) << strerror(err);
    ASSERT_EQ(0, query_test_port_address(context_.get(), port_));
    pd_.reset(ibv_alloc_pd(context_.get()));
    cq_.reset(ibv_create_cq(context_.get(), 256, nullptr, nullptr, 0));
    mr_.reset(ibv_reg_mr(pd_.get(), buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(pd_ && cq_ && mr_);
    ibv_srq_init_attr init{};
    init.attr.max_wr = 16;
    init.attr.max_sge = 1;
    srq_ = ibv_create_srq(pd_.get(), &init);
    ASSERT_NE(nullptr, srq_) << strerror(errno);
    EXPECT_GE(init.attr.max_wr, 16u);
  }
  void TearDown() override {
    qps_.clear();
    if (srq_) {
      EXPECT_EQ(0, ibv_destroy_srq(srq_));
    }
  }

  ibv_qp* make_rc(bool on_srq) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq_.get();
    init.srq = on_srq ? srq_ : nullptr;
    init.qp_type = IBV_QPT_RC;
    init.cap = {16, on_srq ? 0u : 16u, 1, 1, 0};
    qps_.emplace_back(ibv_create_qp(pd_.get(), &init));
    return qps_.back().get();
  }

  void connect(ibv_qp* qp, uint32_t remote_qpn, uint8_t rnr_retry = 7) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port_.port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    ASSERT_EQ(0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_ACCESS_FLAGS));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = port_.lid;
    a.ah_attr.port_num = port_.port;
    if (port_.use_grh) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = port_.gid;
      a.ah_attr.grh.sgid_index = port_.gid_index;
      a.ah_attr.grh.hop_limit = 1;
    }
    ASSERT_EQ(0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                           IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 1;
    ASSERT_EQ(0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                                           IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                           IBV_QP_MAX_QP_RD_ATOMIC));
  }

  // A sender and a receiver on the SRQ, connected.
  std::pair<ibv_qp*, ibv_qp*> pair() {
    ibv_qp* sender = make_rc(false);
    ibv_qp* receiver = make_rc(true);
    connect(sender, receiver->qp_num);
    connect(receiver, sender->qp_num);
    return {sender, receiver};
  }

  int post_srq(uint64_t wr_id, uint64_t offset, uint32_t length = 4096) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq_, &wr, &bad);
  }

  int send(ibv_qp* qp, uint64_t wr_id, uint64_t offset, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
  }

  std::vector<ibv_wc> poll(size_t count, std::chrono::milliseconds timeout = kWait) {
    std::vector<ibv_wc> out;
    poll_completions(cq_.get(), count, out, timeout);  // a shortfall is the test's to judge
    return out;
  }

  // The next async event of `type` within the wait, acknowledged.
  bool next_event(ibv_event_type type, ibv_async_event& out) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{context_->async_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      if (ibv_get_async_event(context_.get(), &out)) return false;
      ibv_ack_async_event(&out);
      if (out.event_type == type) return true;
    }
    return false;
  }

  ContextPtr context_;
  PortAddress port_;
  PdPtr pd_;
  CqPtr cq_;
  std::vector<uint8_t> buffer_ = std::vector<uint8_t>(1 << 20);
  MrPtr mr_;
  ibv_srq* srq_ = nullptr;
  std::vector<QpPtr> qps_;
};

TEST_F(SrqTest, QpsOnOneSrqTakeItsWqesInTheOrderPosted) {
  auto [s1, r1] = pair();
  auto [s2, r2] = pair();
  for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(0, post_srq(10 + i, 0x10000 + i * 4096));
  ASSERT_EQ(0, send(s1, 1, 0, 100));
  ASSERT_EQ(0, send(s2, 2, 0, 200));
  ASSERT_EQ(0, send(s1, 3, 0, 300));
  const std::vector<ibv_wc> wcs = poll(6);
  ASSERT_EQ(6u, wcs.size());
  std::vector<uint64_t> receive_ids;
  for (const ibv_wc& wc : wcs) {
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    if (wc.opcode == IBV_WC_RECV) {
      receive_ids.push_back(wc.wr_id);
      EXPECT_TRUE(wc.qp_num == r1->qp_num || wc.qp_num == r2->qp_num);
    }
  }
  EXPECT_EQ((std::vector<uint64_t>{10, 11, 12}), receive_ids);
  ibv_srq_attr attr{};
  ASSERT_EQ(0, ibv_query_srq(srq_, &attr));
  EXPECT_GE(attr.max_wr, 16u);
}

TEST_F(SrqTest, AnEmptySrqAnswersRnrUntilAWqeIsPosted) {
  auto [sender, receiver] = pair();
  ASSERT_EQ(0, send(sender, 1, 0, 64));
  EXPECT_TRUE(poll(1, std::chrono::milliseconds(200)).empty());  // RNR, retried
  if (soft_control_available()) {  // the responder said RNR, more than once
    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    EXPECT_GE(qp_counter(stats, receiver->qp_num, "rnr_naks_sent").value_or(0), 2u) << stats;
  }
  ASSERT_EQ(0, post_srq(7, 0x20000));
  const std::vector<ibv_wc> wcs = poll(2);
  ASSERT_EQ(2u, wcs.size());
  for (const ibv_wc& wc : wcs) EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
  (void)receiver;
}

TEST_F(SrqTest, AnEmptySrqExhaustsRnrRetry) {
  ibv_qp* sender = make_rc(false);
  ibv_qp* receiver = make_rc(true);
  connect(sender, receiver->qp_num, /*rnr_retry=*/0);
  connect(receiver, sender->qp_num);
  ASSERT_EQ(0, send(sender, 1, 0, 64));
  const std::vector<ibv_wc> wcs = poll(1);
  ASSERT_EQ(1u, wcs.size());
  EXPECT_EQ(IBV_WC_RNR_RETRY_EXC_ERR, wcs[0].status);
}

TEST_F(SrqTest, TheLimitEventFiresOncePerArming) {
  auto [sender, receiver] = pair();
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(0, post_srq(i, 0x10000 + i * 4096));
  ibv_srq_attr attr{};
  attr.srq_limit = 6;
  ASSERT_EQ(0, ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT));
  ASSERT_EQ(0, send(sender, 1, 0, 8));
  ASSERT_EQ(0, send(sender, 2, 0, 8));
  ASSERT_EQ(0, send(sender, 3, 0, 8));  // 5 left: below the limit
  ASSERT_EQ(6u, poll(6).size());
  ibv_async_event event{};
  ASSERT_TRUE(next_event(IBV_EVENT_SRQ_LIMIT_REACHED, event));
  EXPECT_EQ(srq_, event.element.srq);
  ASSERT_EQ(0, ibv_query_srq(srq_, &attr));
  EXPECT_EQ(0u, attr.srq_limit);  // disarmed
  ASSERT_EQ(0, send(sender, 4, 0, 8));
  ASSERT_EQ(2u, poll(2).size());
  pollfd p{context_->async_fd, POLLIN, 0};
  EXPECT_EQ(0, ::poll(&p, 1, 200)) << "a second event without a new arming";
  (void)receiver;
}

TEST_F(SrqTest, AQpEnteringErrRaisesLastWqeReachedAndTheSrqStaysInUseUntilItGoes) {
  auto [sender, receiver] = pair();
  auto [other_sender, other_receiver] = pair();
  EXPECT_EQ(EBUSY, ibv_destroy_srq(srq_));
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(0, post_srq(5 + i, 0x10000 + i * 4096));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(0, ibv_modify_qp(receiver, &attr, IBV_QP_STATE));
  ibv_async_event event{};
  ASSERT_TRUE(next_event(IBV_EVENT_QP_LAST_WQE_REACHED, event));
  EXPECT_EQ(receiver, event.element.qp);
  // The SRQ's WQEs stayed for the others: none was flushed, and the other
  // QP takes them in order.
  EXPECT_TRUE(poll(1, std::chrono::milliseconds(100)).empty());
  ASSERT_EQ(0, send(other_sender, 1, 0, 8));
  ASSERT_EQ(0, send(other_sender, 2, 0, 8));
  std::vector<uint64_t> receive_ids;
  for (const ibv_wc& wc : poll(4)) {
    EXPECT_EQ(IBV_WC_SUCCESS, wc.status);
    if (wc.opcode == IBV_WC_RECV) {
      receive_ids.push_back(wc.wr_id);
      EXPECT_EQ(other_receiver->qp_num, wc.qp_num);
    }
  }
  EXPECT_EQ((std::vector<uint64_t>{5, 6}), receive_ids);
  qps_.clear();  // the QPs go; the SRQ can be destroyed (TearDown)
  (void)sender;
}

TEST_F(SrqTest, ResizeKeepsThePostedWqesAndRefusesTooSmall) {
  ibv_device_attr device{};
  ASSERT_EQ(0, ibv_query_device(context_.get(), &device));
  if (!(device.device_cap_flags & IBV_DEVICE_SRQ_RESIZE))
    GTEST_SKIP() << "the device does not resize SRQs (IBV_DEVICE_SRQ_RESIZE)";
  for (uint64_t i = 0; i < 10; ++i) ASSERT_EQ(0, post_srq(i, 0x10000 + i * 4096));
  ibv_srq_attr attr{};
  attr.max_wr = 4;
  EXPECT_EQ(EINVAL, ibv_modify_srq(srq_, &attr, IBV_SRQ_MAX_WR));
  attr.max_wr = 64;
  ASSERT_EQ(0, ibv_modify_srq(srq_, &attr, IBV_SRQ_MAX_WR));
  // It holds more than the 16 it was made with now.
  for (uint64_t i = 10; i < 40; ++i) ASSERT_EQ(0, post_srq(i, 0x10000 + (i % 16) * 4096));
  // A limit above max_wr is refused, and so is shrinking below an armed limit.
  attr.srq_limit = 65;
  EXPECT_EQ(EINVAL, ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT));
  attr.srq_limit = 50;
  ASSERT_EQ(0, ibv_modify_srq(srq_, &attr, IBV_SRQ_LIMIT));
  attr.max_wr = 45;
  EXPECT_EQ(EINVAL, ibv_modify_srq(srq_, &attr, IBV_SRQ_MAX_WR));
  auto [sender, receiver] = pair();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(0, send(sender, 100 + i, 0, 8));
  std::vector<uint64_t> receive_ids;
  for (const ibv_wc& wc : poll(6))
    if (wc.opcode == IBV_WC_RECV) receive_ids.push_back(wc.wr_id);
  EXPECT_EQ((std::vector<uint64_t>{0, 1, 2}), receive_ids);
  (void)receiver;
}

TEST_F(SrqTest, PostRecvOnAQpOfAnSrqIsRefused) {
  ibv_qp* receiver = make_rc(true);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port_.port;
  ASSERT_EQ(0, ibv_modify_qp(receiver, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                 IBV_QP_ACCESS_FLAGS));
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data()), 8, mr_->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_NE(0, ibv_post_recv(receiver, &wr, &bad));
  EXPECT_EQ(&wr, bad);
}

TEST(SrqUd, UdQpsShareAnSrq) {
  DatagramEndpoint receiver(kTestQkey, true), sender;
  ASSERT_EQ("", receiver.error());
  ASSERT_EQ("", sender.error());
  ASSERT_EQ(0, receiver.post_recv(1, 0, 4096));
  ibv_ah* ah = sender.make_ah(receiver.address());
  ASSERT_NE(nullptr, ah);
  ASSERT_EQ(0, sender.send(ah, receiver.qp()->qp_num, kTestQkey, 9, 8192, 32));
  const std::vector<ibv_wc> got = receiver.poll(1, kWait);
  ASSERT_EQ(1u, got.size());
  EXPECT_EQ(1u, got[0].wr_id);
  EXPECT_EQ(32u + kGrhBytes, got[0].byte_len);
}

}  // namespace
}  // namespace softverbs::conformance
