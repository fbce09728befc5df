// Completion queues: timestamps, resizing, and posting a batch of send WRs
// whole or not at all, on the transport fixture's manual clock.
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

class CqTest : public Transport {
 protected:
  // A signaled RDMA WRITE of 8 bytes from a's buffer to b's.
  SendRequest write_request(Endpoint& a, Endpoint& b, uint64_t wr_id) {
    sge_ = {reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
    SendRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kWrSignaled;
    wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
    wr.rkey = b.mr->rkey();
    wr.sges = {&sge_, 1};
    return wr;
  }
  Sge sge_{};
};

// A timestamp is taken when the completion is generated, not when polled.
TEST_F(CqTest, StampedCompletionsCarryTheClockOfTheirArrival) {
  cq_stamps_ = kStampTimestamp | kStampWallclock;
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 1, 2);
  std::vector<uint64_t> generated_at;
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_EQ(a.qp->post_send(write_request(a, b, i)), 0);
    run_until_idle();  // the ACK comes back and the completion is pushed
    generated_at.push_back(clock_.now_ns());
    clock_.advance(1000 * (i + 1));
  }
  clock_.advance(5'000'000);  // polled much later
  for (uint64_t i = 0; i < 3; ++i) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, i);
    EXPECT_EQ(c.timestamp_ns, generated_at[i]);
    EXPECT_EQ(c.wallclock_ns - c.timestamp_ns, clock_.wallclock_ns() - clock_.now_ns());
  }
}

TEST_F(CqTest, UnstampedCompletionsCarryNoTime) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 1, 2);
  ASSERT_EQ(a.qp->post_send(write_request(a, b, 1)), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.timestamp_ns, 0u);
  EXPECT_EQ(c.wallclock_ns, 0u);
}

// ibv_resize_cq(3): pending completions survive, in order; the new size
// must hold them.
TEST_F(CqTest, ResizeKeepsPendingCompletionsInOrder) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 1, 2);
  for (uint64_t i = 0; i < 10; ++i) {
    ASSERT_EQ(a.qp->post_send(write_request(a, b, i)), 0);
    run_until_idle();
  }
  Completion first;
  ASSERT_TRUE(poll_one(*a.send_cq, first));  // head moves off slot 0
  EXPECT_EQ(a.send_cq->resize(8), EINVAL);   // 9 pending
  EXPECT_EQ(a.send_cq->resize(0), EINVAL);
  EXPECT_EQ(a.send_cq->resize(kMaxCqe + 1), EINVAL);
  ASSERT_EQ(a.send_cq->resize(9), 0);
  EXPECT_EQ(a.send_cq->capacity(), 9u);
  ASSERT_EQ(a.send_cq->resize(1000), 0);
  EXPECT_EQ(a.send_cq->capacity(), 1000u);
  for (uint64_t i = 1; i < 10; ++i) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, i);
  }
}

// A QP taken to RESET leaves none of its completions behind on a CQ it
// shares with another QP, whose completions stay, in order (as mlx4 and
// mlx5 clean their CQs at RESET).
TEST_F(CqTest, ResetRemovesTheQpsCompletionsAndKeepsTheOthers) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 1, 2);
  Endpoint shared = make_endpoint(64), peer = make_endpoint(64);
  Hca::QpInit init;
  init.send_cq = a.send_cq.get();
  init.recv_cq = a.recv_cq.get();
  init.cap = {16, 16, 4, 4, 64};
  Errno err = 0;
  shared.qp = hca_->create_qp(*shared.pd, init, err);  // on a's CQs
  ASSERT_TRUE(shared.qp) << err;
  connect(shared, peer, 3, 4);
  for (uint64_t i = 0; i < 6; ++i) {
    Endpoint& from = i % 2 ? shared : a;
    ASSERT_EQ(from.qp->post_send(write_request(from, i % 2 ? peer : b, i)), 0);
    run_until_idle();
  }
  QpAttributes attr;
  attr.state = QpState::kReset;
  ASSERT_EQ(a.qp->modify(attr, kQpAttrState), 0);
  for (uint64_t i : {1u, 3u, 5u}) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, i);
    EXPECT_EQ(c.qp_num, shared.qp->qpn());
  }
  Completion none;
  EXPECT_FALSE(poll_one(*a.send_cq, none));
}

TEST_F(CqTest, BatchWithARefusedWrPostsNothing) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 1, 2);
  std::vector<SendRequest> batch = {write_request(a, b, 1), write_request(a, b, 2),
                                    write_request(a, b, 3)};
  std::vector<Sge> too_many(5, sge_);  // the QP takes 4
  batch[1].sges = too_many;
  size_t refused = 99;
  EXPECT_EQ(a.qp->post_send_batch(batch, refused), EINVAL);
  EXPECT_EQ(refused, 1u);
  run_until_idle();
  Completion c;
  EXPECT_FALSE(poll_one(*a.send_cq, c));
  EXPECT_TRUE(sent_.empty());
}

TEST_F(CqTest, BatchLargerThanTheRoomLeftPostsNothing) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);  // 16 send WRs
  connect(a, b, 1, 2);
  std::vector<SendRequest> batch(17, write_request(a, b, 0));
  size_t refused = 0;
  EXPECT_EQ(a.qp->post_send_batch(batch, refused), ENOMEM);
  EXPECT_EQ(refused, 16u);
  EXPECT_TRUE(sent_.empty());
  batch.resize(16);
  for (size_t i = 0; i < batch.size(); ++i) batch[i].wr_id = i;
  ASSERT_EQ(a.qp->post_send_batch(batch, refused), 0);
  for (uint64_t i = 0; i < 16; ++i) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, i);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
}

}  // namespace
}  // namespace softverbs
