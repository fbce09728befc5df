// ibv_create_qp_ex(3): IBV_QP_INIT_ATTR_PD is required; a comp_mask bit
// whose field holds its default asks for nothing; the send ops of
// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS must be ones the QP type has
// (ibv_wr_post(3)'s table), else creation fails; ibv_qp_to_qp_ex gives the
// ibv_qp_ex of a QP created with send ops, and nothing for a plain QP.
#include <gtest/gtest.h>

#include "conformance/device_fixture.h"

namespace softverbs::conformance {
namespace {

class CreateQpEx : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    pd_ = alloc_pd();
    cq_ = create_cq(16);
    ASSERT_TRUE(pd_ && cq_);
  }

  ibv_qp_init_attr_ex attr(ibv_qp_type type, uint32_t comp_mask = IBV_QP_INIT_ATTR_PD) {
    ibv_qp_init_attr_ex init{};
    init.send_cq = init.recv_cq = cq_.get();
    init.cap = small_qp_cap();
    init.qp_type = type;
    init.comp_mask = comp_mask;
    init.pd = pd_.get();
    return init;
  }
  QpPtr create(ibv_qp_init_attr_ex init) {
    errno = 0;
    QpPtr qp(ibv_create_qp_ex(context(), &init));
    last_error_ = qp ? 0 : errno;
    return qp;
  }
  QpPtr create_with_ops(ibv_qp_type type, uint64_t ops) {
    ibv_qp_init_attr_ex init = attr(type, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
    init.send_ops_flags = ops;
    return create(init);
  }

  PdPtr pd_;
  CqPtr cq_;
};

TEST_F(CreateQpEx, PdIsRequired) {
  ibv_qp_init_attr_ex init = attr(IBV_QPT_RC, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  init.send_ops_flags = IBV_QP_EX_WITH_SEND;
  EXPECT_FALSE(create(init));
  EXPECT_EQ(last_error_, EINVAL);
}

TEST_F(CreateQpEx, BitsWithDefaultFieldsAreAccepted) {
  ibv_qp_init_attr_ex init = attr(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS);
  init.create_flags = 0;
  QpPtr qp = create(init);
  EXPECT_TRUE(qp) << "errno " << last_error_;
}

TEST_F(CreateQpEx, UnknownCompMaskBitsFail) {
  QpPtr qp = create(attr(IBV_QPT_RC, IBV_QP_INIT_ATTR_PD | (1u << 20)));
  EXPECT_FALSE(qp);
  EXPECT_TRUE(last_error_ == EINVAL || last_error_ == EOPNOTSUPP) << "errno " << last_error_;
}

TEST_F(CreateQpEx, QpExOnlyWithSendOps) {
  QpPtr with_ops = create_with_ops(IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE);
  ASSERT_TRUE(with_ops) << "errno " << last_error_;
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(with_ops.get());
  ASSERT_NE(qpx, nullptr);
  EXPECT_EQ(&qpx->qp_base, with_ops.get());
  EXPECT_NE(qpx->wr_send, nullptr);
  EXPECT_NE(qpx->wr_rdma_write, nullptr);
  EXPECT_NE(qpx->wr_start, nullptr);

  QpPtr plain = create_qp(pd_.get(), cq_.get(), cq_.get());
  ASSERT_TRUE(plain);
  EXPECT_EQ(ibv_qp_to_qp_ex(plain.get()), nullptr);
}

// ibv_wr_post(3)'s table: what each QP type can post.
TEST_F(CreateQpEx, SendOpsTheQpTypeLacksAreRefused) {
  EXPECT_FALSE(create_with_ops(IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ));
  EXPECT_EQ(last_error_, EOPNOTSUPP);
  EXPECT_FALSE(create_with_ops(IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD));
  EXPECT_EQ(last_error_, EOPNOTSUPP);
  EXPECT_FALSE(create_with_ops(IBV_QPT_RC, IBV_QP_EX_WITH_TSO));
  EXPECT_EQ(last_error_, EOPNOTSUPP);
  EXPECT_FALSE(create_with_ops(IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE));
  EXPECT_NE(last_error_, 0);
  EXPECT_TRUE(create_with_ops(IBV_QPT_UC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM))
      << "errno " << last_error_;
}

// Memory window operations: on RC where the device has memory windows,
// never on UD (ibv_wr_post(3)).
TEST_F(CreateQpEx, WindowOpsFollowTheDeviceAndTheQpType) {
  constexpr uint64_t kWindowOps = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  EXPECT_FALSE(create_with_ops(IBV_QPT_UD, IBV_QP_EX_WITH_BIND_MW));
  EXPECT_NE(last_error_, 0);
  if (device_attr().max_mw == 0) {
    EXPECT_FALSE(create_with_ops(IBV_QPT_RC, kWindowOps));
    EXPECT_EQ(last_error_, EOPNOTSUPP);
    return;
  }
  EXPECT_TRUE(create_with_ops(IBV_QPT_RC, kWindowOps)) << "errno " << last_error_;
}

TEST_F(CreateQpEx, XrcTypesNeedXrc) {
  if (device_attr().device_cap_flags & IBV_DEVICE_XRC) GTEST_SKIP() << "the device has XRC";
  EXPECT_FALSE(create(attr(IBV_QPT_XRC_SEND)));
  EXPECT_EQ(last_error_, EOPNOTSUPP);
}

}  // namespace
}  // namespace softverbs::conformance
