// Verbs misuse: what ibv_post_send(3), ibv_post_recv(3) and ibv_modify_qp(3)
// do with invalid requests. A WR that is malformed as posted fails the post
// (EINVAL) with bad_wr pointing at it, and nothing after it is posted; a WR
// whose buffers turn out to be unusable when executed (IBTA local
// protection checks: L_Key of another PD, range beyond the MR) is accepted
// and completes with IBV_WC_LOC_PROT_ERR, which moves the QP to ERR.
#include <cerrno>
#include <string>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/registered_buffer.h"
#include "harness/testsupport/verbs_names.h"

namespace softverbs::conformance {
namespace {

class VerbsMisuse : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    pd_ = alloc_pd();
    ASSERT_TRUE(pd_);
    send_cq_ = create_cq(64);
    recv_cq_ = create_cq(64);
    ASSERT_TRUE(send_cq_ && recv_cq_);
    sender_ = create_qp(pd_.get(), send_cq_.get(), send_cq_.get(), {16, 16, 2, 2, 0}, false,
                        &sender_cap_);
    receiver_ = create_qp(pd_.get(), send_cq_.get(), recv_cq_.get(), {16, 16, 2, 2, 0}, false,
                          &receiver_cap_);
    ASSERT_TRUE(sender_ && receiver_) << describe_errno(last_error_);
    ASSERT_EQ(0, buffer_.allocate(pd_.get(), 8192, IBV_ACCESS_LOCAL_WRITE));
  }

  ibv_sge sge(uint64_t offset, uint32_t length) const {
    return {buffer_.address() + offset, length, buffer_.lkey()};
  }

  static ibv_send_wr send_wr(uint64_t wr_id, ibv_sge* sges, int num_sge) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = sges;
    wr.num_sge = num_sge;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    return wr;
  }

  void post_receives(int count) {
    for (int i = 0; i < count; ++i) {
      ibv_sge s = sge(4096 + 256 * i, 256);
      ibv_recv_wr recv{};
      recv.wr_id = 1000 + i;
      recv.sg_list = &s;
      recv.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(0, ibv_post_recv(receiver_.get(), &recv, &bad));
    }
  }

  void expect_no_completion(ibv_cq* cq) {
    std::vector<ibv_wc> wcs;
    ASSERT_LE(0, drain_completions(cq, wcs));
    EXPECT_TRUE(wcs.empty()) << "unexpected completion " << describe_completion(wcs[0]);
  }

  // Posts one SEND from `sges` and returns its completion.
  ibv_wc send_and_complete(ibv_sge* sges, int num_sge) {
    ibv_send_wr wr = send_wr(77, sges, num_sge);
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(sender_.get(), &wr, &bad);
    EXPECT_EQ(0, rc) << "the post itself failed (" << describe_errno(rc)
                     << "); the error belongs in the completion";
    std::vector<ibv_wc> wcs;
    if (rc == 0) {
      EXPECT_EQ(0, poll_completions(send_cq_.get(), 1, wcs));
    }
    return wcs.empty() ? ibv_wc{} : wcs[0];
  }

  PdPtr pd_;
  CqPtr send_cq_;
  CqPtr recv_cq_;
  QpPtr sender_;
  QpPtr receiver_;
  ibv_qp_cap sender_cap_{};
  ibv_qp_cap receiver_cap_{};
  RegisteredBuffer buffer_;
};

// IBTA: the send queue accepts WRs only from RTS on (also SQD, SQE); in
// RESET, INIT and RTR ibv_post_send fails and bad_wr is the rejected WR.
TEST_F(VerbsMisuse, PostSendBeforeRtsFailsAndBadWrIsTheWr) {
  const QpEndpoint peer = describe_endpoint(receiver_.get(), 0, port());
  for (ibv_qp_state state : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR}) {
    SCOPED_TRACE(std::string("QP in ") + testsupport::qp_state_name(state));
    if (state == IBV_QPS_INIT) {
      ASSERT_EQ(0, modify_rc_to_init(sender_.get(), port(), {}));
    }
    if (state == IBV_QPS_RTR) {
      ASSERT_EQ(0, modify_rc_to_rtr(sender_.get(), port(), peer, {}));
    }
    ASSERT_EQ(state, query_qp_state(sender_.get()));
    ibv_sge s = sge(0, 64);
    ibv_send_wr wr = send_wr(1, &s, 1);
    ibv_send_wr* bad = nullptr;
    EXPECT_NE(0, ibv_post_send(sender_.get(), &wr, &bad));
    EXPECT_EQ(&wr, bad);
    expect_no_completion(send_cq_.get());
  }
}

// IBTA: the receive queue accepts WRs from INIT on; in RESET the post fails.
TEST_F(VerbsMisuse, PostRecvInResetFailsAndBadWrIsTheWr) {
  ibv_sge s = sge(4096, 64);
  ibv_recv_wr recv{};
  recv.wr_id = 5;
  recv.sg_list = &s;
  recv.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  EXPECT_NE(0, ibv_post_recv(receiver_.get(), &recv, &bad));
  EXPECT_EQ(&recv, bad);
}

// ibv_post_send(3): num_sge above the QP's max_send_sge is EINVAL.
TEST_F(VerbsMisuse, NumSgeAboveMaxSendSgeIsEinval) {
  ASSERT_EQ(0, connect_pair(sender_.get(), receiver_.get()));
  const int too_many = static_cast<int>(sender_cap_.max_send_sge) + 1;
  std::vector<ibv_sge> sges(too_many, sge(0, 8));
  ibv_send_wr wr = send_wr(1, sges.data(), too_many);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(EINVAL, ibv_post_send(sender_.get(), &wr, &bad));
  EXPECT_EQ(&wr, bad);
  expect_no_completion(send_cq_.get());
  EXPECT_EQ(IBV_QPS_RTS, query_qp_state(sender_.get())) << "a refused post changes no state";
}

// ibv_post_send(3): bad_wr is the first WR that failed; the WRs before it
// were posted, the ones after it were not. Chain: good, bad, good; then a
// later good WR, whose completion implies everything posted before it is
// done (RC completes in order).
TEST_F(VerbsMisuse, BadWrPointsAtTheFirstBadWrOfAChain) {
  ASSERT_EQ(0, connect_pair(sender_.get(), receiver_.get()));
  ASSERT_NO_FATAL_FAILURE(post_receives(4));
  const int too_many = static_cast<int>(sender_cap_.max_send_sge) + 1;
  std::vector<ibv_sge> bad_sges(too_many, sge(0, 8));
  ibv_sge good_sge = sge(0, 64);
  ibv_send_wr chain[3] = {send_wr(1, &good_sge, 1), send_wr(2, bad_sges.data(), too_many),
                          send_wr(3, &good_sge, 1)};
  chain[0].next = &chain[1];
  chain[1].next = &chain[2];
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(EINVAL, ibv_post_send(sender_.get(), chain, &bad));
  EXPECT_EQ(&chain[1], bad) << "bad_wr is not the second WR of the chain";

  ibv_send_wr fence = send_wr(4, &good_sge, 1);
  ASSERT_EQ(0, ibv_post_send(sender_.get(), &fence, &bad));
  std::vector<ibv_wc> wcs;
  ASSERT_EQ(0, poll_completions(send_cq_.get(), 2, wcs));
  EXPECT_EQ(1u, wcs[0].wr_id) << describe_completion(wcs[0]);
  EXPECT_EQ(4u, wcs[1].wr_id) << describe_completion(wcs[1]);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(IBV_WC_SUCCESS, wc.status) << describe_completion(wc);
  expect_no_completion(send_cq_.get());

  std::vector<ibv_wc> received;
  ASSERT_EQ(0, poll_completions(recv_cq_.get(), 2, received));
  expect_no_completion(recv_cq_.get());
}

// ibv_post_recv(3): num_sge above the QP's max_recv_sge is EINVAL.
TEST_F(VerbsMisuse, PostRecvWithTooManySgesIsEinval) {
  ASSERT_EQ(0, modify_rc_to_init(receiver_.get(), port(), {}));
  const int too_many = static_cast<int>(receiver_cap_.max_recv_sge) + 1;
  std::vector<ibv_sge> sges(too_many, sge(4096, 8));
  ibv_recv_wr recv{};
  recv.wr_id = 9;
  recv.sg_list = sges.data();
  recv.num_sge = too_many;
  ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(EINVAL, ibv_post_recv(receiver_.get(), &recv, &bad));
  EXPECT_EQ(&recv, bad);
}

// IBTA local protection: an L_Key registered on another PD than the QP's is
// a local protection error, reported in the completion (not by the post),
// and the QP enters ERR.
TEST_F(VerbsMisuse, LkeyOfAnotherPdCompletesWithLocalProtectionError) {
  ASSERT_EQ(0, connect_pair(sender_.get(), receiver_.get()));
  ASSERT_NO_FATAL_FAILURE(post_receives(1));
  PdPtr other_pd = alloc_pd();
  ASSERT_TRUE(other_pd);
  RegisteredBuffer foreign;
  ASSERT_EQ(0, foreign.allocate(other_pd.get(), 4096, IBV_ACCESS_LOCAL_WRITE));
  ibv_sge s{foreign.address(), 64, foreign.lkey()};
  ibv_wc wc = send_and_complete(&s, 1);
  if (HasFailure()) return;
  EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status) << describe_completion(wc);
  EXPECT_EQ(77u, wc.wr_id);
  EXPECT_EQ(sender_->qp_num, wc.qp_num);
  EXPECT_EQ(IBV_QPS_ERR, query_qp_state(sender_.get()));
}

// IBTA local protection: an SGE reaching past the end of its MR is a local
// protection error, reported in the completion.
TEST_F(VerbsMisuse, SgeBeyondTheMrCompletesWithLocalProtectionError) {
  ASSERT_EQ(0, connect_pair(sender_.get(), receiver_.get()));
  ASSERT_NO_FATAL_FAILURE(post_receives(1));
  // The MR covers the first half of a mapping, so reading past it touches
  // valid memory: only the protection check can stop the transfer.
  std::vector<uint8_t> memory(8192);
  MrPtr half(ibv_reg_mr(pd_.get(), memory.data(), 4096, IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(half);
  ibv_sge s{reinterpret_cast<uintptr_t>(memory.data()) + 4096 - 16, 64, half->lkey};
  ibv_wc wc = send_and_complete(&s, 1);
  if (HasFailure()) return;
  EXPECT_EQ(IBV_WC_LOC_PROT_ERR, wc.status) << describe_completion(wc);
  EXPECT_EQ(77u, wc.wr_id);
  EXPECT_EQ(IBV_QPS_ERR, query_qp_state(sender_.get()));
}

// ibv_modify_qp(3): "If any of the modify attributes or the modify mask are
// invalid, none of the attributes will be modified": mask bits no verb
// defines are EINVAL.
TEST_F(VerbsMisuse, ModifyQpWithUnknownMaskBitsIsEinval) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.port_num = port().port;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  EXPECT_EQ(EINVAL, ibv_modify_qp(sender_.get(), &attr, kRcResetToInitMask | (1 << 30)));
  EXPECT_EQ(IBV_QPS_RESET, query_qp_state(sender_.get()));
  EXPECT_EQ(0, ibv_modify_qp(sender_.get(), &attr, kRcResetToInitMask));
}

}  // namespace
}  // namespace softverbs::conformance
