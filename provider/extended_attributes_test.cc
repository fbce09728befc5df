#include "provider/extended_attributes.h"

#include <gtest/gtest.h>

#include "provider/translate.h"

namespace softverbs::provider {
namespace {

ibv_pd* const kSomePd = reinterpret_cast<ibv_pd*>(0x1000);

ibv_qp_init_attr_ex rc_attr(uint32_t comp_mask = IBV_QP_INIT_ATTR_PD) {
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.comp_mask = comp_mask;
  attr.pd = kSomePd;
  return attr;
}

TEST(CreateQpEx, PdIsRequired) {
  ibv_qp_init_attr_ex attr = rc_attr(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  EXPECT_EQ(check_create_qp_ex(attr), EINVAL);
  attr.comp_mask |= IBV_QP_INIT_ATTR_PD;
  attr.pd = nullptr;
  EXPECT_EQ(check_create_qp_ex(attr), EINVAL);
  attr.pd = kSomePd;
  EXPECT_EQ(check_create_qp_ex(attr), 0);
}

TEST(CreateQpEx, UnknownCompMaskBitsAreInvalid) {
  EXPECT_EQ(check_create_qp_ex(rc_attr(IBV_QP_INIT_ATTR_PD | (1u << 7))), EINVAL);
  EXPECT_EQ(check_create_qp_ex(rc_attr(IBV_QP_INIT_ATTR_PD | (1u << 31))), EINVAL);
}

// ibv_create_qp_ex(3): a bit whose field holds its default asks for nothing.
TEST(CreateQpEx, BitsWithDefaultFieldsAreAccepted) {
  const ibv_qp_init_attr_ex attr =
      rc_attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
              IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE |
              IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
  EXPECT_EQ(check_create_qp_ex(attr), 0);
}

TEST(CreateQpEx, OffloadsASoftDeviceLacksAreNotSupported) {
  ibv_qp_init_attr_ex attr = rc_attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS);
  attr.create_flags = IBV_QP_CREATE_SCATTER_FCS;
  EXPECT_EQ(check_create_qp_ex(attr), EOPNOTSUPP);
  attr.create_flags = 1u << 20;  // no such flag
  EXPECT_EQ(check_create_qp_ex(attr), EINVAL);

  attr = rc_attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER);
  attr.max_tso_header = 64;
  EXPECT_EQ(check_create_qp_ex(attr), EOPNOTSUPP);

  attr = rc_attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE);
  attr.rwq_ind_tbl = reinterpret_cast<ibv_rwq_ind_table*>(0x2000);
  EXPECT_EQ(check_create_qp_ex(attr), EOPNOTSUPP);

  attr = rc_attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH);
  attr.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4;
  EXPECT_EQ(check_create_qp_ex(attr), EOPNOTSUPP);
}

// An initiator belongs to a PD, a target to an XRC domain (ibv_create_qp_ex(3)).
TEST(CreateQpEx, XrcTargetsNeedADomainAndInitiatorsAPd) {
  ibv_qp_init_attr_ex attr = rc_attr();
  attr.qp_type = IBV_QPT_XRC_SEND;
  EXPECT_EQ(check_create_qp_ex(attr), 0);
  attr.comp_mask = 0;
  EXPECT_EQ(check_create_qp_ex(attr), EINVAL);
  attr.qp_type = IBV_QPT_XRC_RECV;
  EXPECT_EQ(check_create_qp_ex(attr), EINVAL);
  attr.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  attr.xrcd = reinterpret_cast<ibv_xrcd*>(0x3000);
  EXPECT_EQ(check_create_qp_ex(attr), 0);
  attr.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_SEND;  // a target sends nothing
  EXPECT_EQ(check_create_qp_ex(attr), EOPNOTSUPP);
}

struct SendOpsCase {
  ibv_qp_type type;
  uint64_t ops;
  Errno expected;
};

TEST(CreateQpEx, SendOpsAreCheckedAgainstTheQpType) {
  const uint64_t rc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
                          IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                          IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                          IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_BIND_MW |
                          IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_ATOMIC_WRITE |
                          (1u << 11) /* IBV_QP_EX_WITH_FLUSH */;
  const uint64_t uc_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                          IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                          IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
  const uint64_t ud_ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  const SendOpsCase cases[] = {
      {IBV_QPT_RC, rc_ops, 0},
      {IBV_QPT_UC, uc_ops, 0},
      {IBV_QPT_UD, ud_ops, 0},
      {IBV_QPT_UD, IBV_QP_EX_WITH_BIND_MW, EOPNOTSUPP},
      {IBV_QPT_UD, IBV_QP_EX_WITH_LOCAL_INV, EOPNOTSUPP},
      {IBV_QPT_RC, IBV_QP_EX_WITH_TSO, EOPNOTSUPP},
      {IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE, EOPNOTSUPP},
      {IBV_QPT_UD, 1u << 11, EOPNOTSUPP},
      {IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, EOPNOTSUPP},
      {IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, EOPNOTSUPP},
      {IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV, EOPNOTSUPP},
      {IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, EOPNOTSUPP},
      {IBV_QPT_UD, IBV_QP_EX_WITH_TSO, EOPNOTSUPP},
  };
  for (const SendOpsCase& c : cases) {
    ibv_qp_init_attr_ex attr = rc_attr(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
    attr.qp_type = c.type;
    attr.send_ops_flags = c.ops;
    EXPECT_EQ(check_create_qp_ex(attr), c.expected) << "type " << c.type << " ops " << c.ops;
  }
  EXPECT_EQ(supported_send_ops(QpType::kRc), rc_ops);
  EXPECT_EQ(supported_send_ops(QpType::kUc), uc_ops);
  EXPECT_EQ(supported_send_ops(QpType::kUd), ud_ops);
}

ibv_cq_init_attr_ex cq_attr(int cqe = 16) {
  ibv_cq_init_attr_ex attr{};
  attr.cqe = cqe;
  return attr;
}

TEST(CreateCqEx, CqeAndCompVectorLimits) {
  uint32_t stamps = 0;
  EXPECT_EQ(check_create_cq_ex(cq_attr(0), 64, 1, stamps), EINVAL);
  EXPECT_EQ(check_create_cq_ex(cq_attr(-1), 64, 1, stamps), EINVAL);
  EXPECT_EQ(check_create_cq_ex(cq_attr(65), 64, 1, stamps), EINVAL);
  EXPECT_EQ(check_create_cq_ex(cq_attr(64), 64, 1, stamps), 0);
  ibv_cq_init_attr_ex attr = cq_attr();
  attr.comp_vector = 1;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), EINVAL);
  attr.comp_vector = UINT32_MAX;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), EINVAL);
}

TEST(CreateCqEx, WcFlagsBeyondWhatASoftCqReportsAreNotSupported) {
  uint32_t stamps = 0;
  for (uint64_t flag : {uint64_t{IBV_WC_EX_WITH_CVLAN}, uint64_t{IBV_WC_EX_WITH_FLOW_TAG},
                        uint64_t{IBV_WC_EX_WITH_TM_INFO}, uint64_t{1} << 40}) {
    ibv_cq_init_attr_ex attr = cq_attr();
    attr.wc_flags = IBV_WC_STANDARD_FLAGS | flag;
    EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), EOPNOTSUPP) << flag;
  }
}

TEST(CreateCqEx, TimestampFlagsBecomeStamps) {
  ibv_cq_init_attr_ex attr = cq_attr();
  attr.wc_flags = IBV_WC_STANDARD_FLAGS;
  uint32_t stamps = 99;
  ASSERT_EQ(check_create_cq_ex(attr, 64, 1, stamps), 0);
  EXPECT_EQ(stamps, 0u);
  attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
  ASSERT_EQ(check_create_cq_ex(attr, 64, 1, stamps), 0);
  EXPECT_EQ(stamps, uint32_t{kStampTimestamp});
  attr.wc_flags |= IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  ASSERT_EQ(check_create_cq_ex(attr, 64, 1, stamps), 0);
  EXPECT_EQ(stamps, uint32_t{kStampTimestamp | kStampWallclock});
}

TEST(CreateCqEx, CompMaskAndFlags) {
  uint32_t stamps = 0;
  ibv_cq_init_attr_ex attr = cq_attr();
  attr.comp_mask = 1u << 2;  // no such bit
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), EINVAL);
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  attr.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), 0);
  attr.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), EOPNOTSUPP);
  attr.flags = 1u << 5;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), EINVAL);
  attr = cq_attr();
  attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), 0);
  // Whether parent_domain is one is the create's to check (cq_ex_verbs.cc).
  attr.parent_domain = kSomePd;
  EXPECT_EQ(check_create_cq_ex(attr, 64, 1, stamps), 0);
}

TEST(ModifyCq, ModerationWithinTheAdvertisedCaps) {
  DeviceAttributes device;
  ibv_modify_cq_attr attr{};
  attr.attr_mask = IBV_CQ_ATTR_MODERATE;
  attr.moderate = {device.max_cq_moderation_count, device.max_cq_moderation_period_us};
  EXPECT_EQ(check_modify_cq(attr, device), 0);
  attr.moderate.cq_period = device.max_cq_moderation_period_us + 1;
  EXPECT_EQ(check_modify_cq(attr, device), EINVAL);
  attr.moderate.cq_period = 0;
  attr.attr_mask = IBV_CQ_ATTR_RESERVED;
  EXPECT_EQ(check_modify_cq(attr, device), EINVAL);
}

TEST(DeviceAttrEx, TimestampsAndModerationAreAdvertised) {
  DeviceAttributes in;
  ibv_device_attr_ex out;
  to_ibv_device_attr_ex(in, out);
  EXPECT_EQ(out.hca_core_clock, 1'000'000u);  // kHz: nanosecond timestamps
  EXPECT_EQ(out.completion_timestamp_mask, ~0ull);
  EXPECT_EQ(out.cq_mod_caps.max_cq_count, in.max_cq_moderation_count);
  EXPECT_EQ(out.cq_mod_caps.max_cq_period, in.max_cq_moderation_period_us);
  EXPECT_EQ(out.raw_packet_caps, 0u);
  EXPECT_EQ(out.max_dm_size, in.max_dm_size);
  EXPECT_EQ(out.tso_caps.max_tso, 0u);
}

}  // namespace
}  // namespace softverbs::provider
