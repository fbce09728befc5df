// The RC QP state machine: ibv_modify_qp(3) and ibv_query_qp(3) against the
// IBTA Modify QP verb's table of legal transitions with their required and
// optional attributes. "If any of the modify attributes or the modify mask
// are invalid, none of the attributes will be modified (including the QP
// state)" (ibv_modify_qp(3)).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "conformance/device_fixture.h"
#include "harness/testsupport/verbs_names.h"

namespace softverbs::conformance {
namespace {

constexpr int kQueryAllMask =
    IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_AV |
    IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
    IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_CAP;

constexpr int kRemoteAccessBits =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

// Values chosen to differ from every default, so a query that echoes a
// default is caught.
constexpr int kInitAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
constexpr uint32_t kRqPsn = 0x123456;
constexpr uint32_t kSqPsn = 0xabcdef;
constexpr uint8_t kMinRnrTimer = 14;
constexpr uint8_t kTimeout = 19;
constexpr uint8_t kRetryCnt = 5;
constexpr uint8_t kRnrRetry = 6;

class QpStateMachine : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    pd_ = alloc_pd();
    ASSERT_TRUE(pd_);
    cq_ = create_cq(16);
    ASSERT_TRUE(cq_);
    qp_ = create_qp(pd_.get(), cq_.get(), cq_.get());
    ASSERT_TRUE(qp_) << describe_errno(last_error_);
    peer_ = create_qp(pd_.get(), cq_.get(), cq_.get());
    ASSERT_TRUE(peer_) << describe_errno(last_error_);
    path_mtu_ = std::min(IBV_MTU_1024, port().active_mtu);
    // Powers of two within the device's limits: some devices round.
    max_dest_rd_atomic_ = static_cast<uint8_t>(std::min(4, device_attr().max_qp_rd_atom));
    max_rd_atomic_ = static_cast<uint8_t>(std::min(2, device_attr().max_qp_init_rd_atom));
  }

  ibv_qp* qp() const { return qp_.get(); }

  ibv_qp_attr init_attr() const {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port().port;
    attr.qp_access_flags = kInitAccess;
    return attr;
  }
  ibv_qp_attr rtr_attr() const {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.ah_attr = address_vector_to(port(), describe_endpoint(peer_.get(), 0, port()));
    attr.path_mtu = path_mtu_;
    attr.dest_qp_num = peer_->qp_num;
    attr.rq_psn = kRqPsn;
    attr.max_dest_rd_atomic = max_dest_rd_atomic_;
    attr.min_rnr_timer = kMinRnrTimer;
    return attr;
  }
  ibv_qp_attr rts_attr() const {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = kSqPsn;
    attr.timeout = kTimeout;
    attr.retry_cnt = kRetryCnt;
    attr.rnr_retry = kRnrRetry;
    attr.max_rd_atomic = max_rd_atomic_;
    return attr;
  }

  int to_init() {
    ibv_qp_attr attr = init_attr();
    return ibv_modify_qp(qp(), &attr, kRcResetToInitMask);
  }
  int to_rtr() {
    ibv_qp_attr attr = rtr_attr();
    return ibv_modify_qp(qp(), &attr, kRcInitToRtrMask);
  }
  int to_rts() {
    ibv_qp_attr attr = rts_attr();
    return ibv_modify_qp(qp(), &attr, kRcRtrToRtsMask);
  }
  int to_state(ibv_qp_state state) {
    ibv_qp_attr attr{};
    attr.qp_state = state;
    return ibv_modify_qp(qp(), &attr, IBV_QP_STATE);
  }

  // Brings the QP from RESET to `target` along the legal path.
  void bring_to(ibv_qp_state target) {
    ASSERT_EQ(IBV_QPS_RESET, query().qp_state);
    if (target == IBV_QPS_RESET) return;
    if (target == IBV_QPS_ERR) {
      ASSERT_EQ(0, to_state(IBV_QPS_ERR));
      return;
    }
    ASSERT_EQ(0, to_init());
    if (target == IBV_QPS_INIT) return;
    ASSERT_EQ(0, to_rtr());
    if (target == IBV_QPS_RTR) return;
    ASSERT_EQ(0, to_rts());
    if (target == IBV_QPS_RTS) return;
    ASSERT_EQ(IBV_QPS_SQD, target);
    ASSERT_EQ(0, to_state(IBV_QPS_SQD));
  }

  ibv_qp_attr query() {
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(0, ibv_query_qp(qp(), &attr, kQueryAllMask, &init));
    return attr;
  }

  void expect_init_attributes(const ibv_qp_attr& attr) {
    EXPECT_EQ(kInitAccess, attr.qp_access_flags & kRemoteAccessBits);
    EXPECT_EQ(0, attr.pkey_index);
    EXPECT_EQ(port().port, attr.port_num);
  }
  void expect_rtr_attributes(const ibv_qp_attr& attr) {
    EXPECT_EQ(path_mtu_, attr.path_mtu);
    EXPECT_EQ(peer_->qp_num, attr.dest_qp_num);
    EXPECT_EQ(kRqPsn, attr.rq_psn);
    EXPECT_EQ(max_dest_rd_atomic_, attr.max_dest_rd_atomic);
    EXPECT_EQ(kMinRnrTimer, attr.min_rnr_timer);
    if (port().use_grh) {
      EXPECT_EQ(1, attr.ah_attr.is_global);
      EXPECT_EQ(0, std::memcmp(port().gid.raw, attr.ah_attr.grh.dgid.raw, 16));
      EXPECT_EQ(port().gid_index, attr.ah_attr.grh.sgid_index);
    } else {
      EXPECT_EQ(port().lid, attr.ah_attr.dlid);
      EXPECT_EQ(0, attr.ah_attr.is_global);
    }
    EXPECT_EQ(port().port, attr.ah_attr.port_num);
  }
  void expect_rts_attributes(const ibv_qp_attr& attr) {
    EXPECT_EQ(kSqPsn, attr.sq_psn);
    EXPECT_EQ(kTimeout, attr.timeout);
    EXPECT_EQ(kRetryCnt, attr.retry_cnt);
    EXPECT_EQ(kRnrRetry, attr.rnr_retry);
    EXPECT_EQ(max_rd_atomic_, attr.max_rd_atomic);
  }

  PdPtr pd_;
  CqPtr cq_;
  QpPtr qp_;
  QpPtr peer_;
  ibv_mtu path_mtu_ = IBV_MTU_1024;
  uint8_t max_dest_rd_atomic_ = 1;
  uint8_t max_rd_atomic_ = 1;
};

// ---------------------------------------------------------------- legal --

// RESET -> INIT -> RTR -> RTS with exactly the required attributes; after
// each step ibv_query_qp reports the state and every attribute set so far.
TEST_F(QpStateMachine, ResetInitRtrRtsWithRequiredAttributesAndQueryEchoesThem) {
  ASSERT_EQ(IBV_QPS_RESET, query().qp_state);

  ASSERT_EQ(0, to_init());
  ibv_qp_attr attr = query();
  EXPECT_EQ(IBV_QPS_INIT, attr.qp_state);
  expect_init_attributes(attr);

  ASSERT_EQ(0, to_rtr());
  attr = query();
  EXPECT_EQ(IBV_QPS_RTR, attr.qp_state);
  expect_init_attributes(attr);
  expect_rtr_attributes(attr);

  ASSERT_EQ(0, to_rts());
  attr = query();
  EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
  expect_init_attributes(attr);
  expect_rtr_attributes(attr);
  expect_rts_attributes(attr);
}

// RTS -> SQD (drain the send queue) -> RTS, each with the state alone.
TEST_F(QpStateMachine, RtsToSqdAndBackToRts) {
  bring_to(IBV_QPS_RTS);
  ASSERT_EQ(0, to_state(IBV_QPS_SQD));
  EXPECT_EQ(IBV_QPS_SQD, query().qp_state);
  ASSERT_EQ(0, to_state(IBV_QPS_RTS));
  ibv_qp_attr attr = query();
  EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
  expect_rtr_attributes(attr);
  expect_rts_attributes(attr);
}

// RTS -> RTS may change the optional attributes (access flags, minimum RNR
// timer), with or without a matching current state.
TEST_F(QpStateMachine, RtsToRtsChangesOptionalAttributes) {
  bring_to(IBV_QPS_RTS);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  attr.min_rnr_timer = 20;
  ASSERT_EQ(0, ibv_modify_qp(qp(), &attr, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
                                              IBV_QP_MIN_RNR_TIMER));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_RTS, now.qp_state);
  EXPECT_EQ(IBV_ACCESS_REMOTE_READ, now.qp_access_flags & kRemoteAccessBits);
  EXPECT_EQ(20, now.min_rnr_timer);
  expect_rts_attributes(now);

  attr.cur_qp_state = IBV_QPS_RTS;
  attr.min_rnr_timer = 3;
  ASSERT_EQ(0, ibv_modify_qp(qp(), &attr, IBV_QP_STATE | IBV_QP_CUR_STATE |
                                              IBV_QP_MIN_RNR_TIMER));
  now = query();
  EXPECT_EQ(IBV_QPS_RTS, now.qp_state);
  EXPECT_EQ(3, now.min_rnr_timer);
}

class QpStateFrom : public QpStateMachine,
                    public ::testing::WithParamInterface<ibv_qp_state> {};

// Any state -> RESET; the QP then walks up again as a fresh one.
TEST_P(QpStateFrom, ToResetAlwaysSucceeds) {
  bring_to(GetParam());
  ASSERT_EQ(GetParam(), query().qp_state);
  ASSERT_EQ(0, to_state(IBV_QPS_RESET));
  EXPECT_EQ(IBV_QPS_RESET, query().qp_state);
  ASSERT_EQ(0, to_init());
  ASSERT_EQ(0, to_rtr());
  ASSERT_EQ(0, to_rts());
  EXPECT_EQ(IBV_QPS_RTS, query().qp_state);
}

// Any state -> ERR, and ERR -> RESET.
TEST_P(QpStateFrom, ToErrorAlwaysSucceeds) {
  bring_to(GetParam());
  ASSERT_EQ(0, to_state(IBV_QPS_ERR));
  EXPECT_EQ(IBV_QPS_ERR, query().qp_state);
  ASSERT_EQ(0, to_state(IBV_QPS_RESET));
  EXPECT_EQ(IBV_QPS_RESET, query().qp_state);
}

INSTANTIATE_TEST_SUITE_P(EveryState, QpStateFrom,
                         ::testing::Values(IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR,
                                           IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR),
                         [](const auto& info) { return std::string(testsupport::qp_state_name(info.param)); });

// -------------------------------------------------------------- illegal --

// RESET -> RTR skips INIT: EINVAL, still RESET.
TEST_F(QpStateMachine, ResetToRtrIsEinvalAndChangesNothing) {
  ibv_qp_attr attr = rtr_attr();
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcInitToRtrMask));
  EXPECT_EQ(IBV_QPS_RESET, query().qp_state);
  EXPECT_EQ(0, to_init()) << "QP unusable after the refused transition";
}

// INIT -> RTS skips RTR: EINVAL, still INIT with its attributes.
TEST_F(QpStateMachine, InitToRtsIsEinvalAndChangesNothing) {
  bring_to(IBV_QPS_INIT);
  ibv_qp_attr attr = rts_attr();
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcRtrToRtsMask));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_INIT, now.qp_state);
  expect_init_attributes(now);
  EXPECT_EQ(0, to_rtr()) << "QP unusable after the refused transition";
}

struct MissingAttribute {
  const char* name;
  int bit;
};

class ResetToInitMissing : public QpStateMachine,
                           public ::testing::WithParamInterface<MissingAttribute> {};

// RESET -> INIT requires PKEY_INDEX, PORT and ACCESS_FLAGS.
TEST_P(ResetToInitMissing, IsEinvalAndStaysInReset) {
  ibv_qp_attr attr = init_attr();
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcResetToInitMask & ~GetParam().bit));
  EXPECT_EQ(IBV_QPS_RESET, query().qp_state);
  EXPECT_EQ(0, to_init());
}

INSTANTIATE_TEST_SUITE_P(RequiredAttributes, ResetToInitMissing,
                         ::testing::Values(MissingAttribute{"PkeyIndex", IBV_QP_PKEY_INDEX},
                                           MissingAttribute{"Port", IBV_QP_PORT},
                                           MissingAttribute{"AccessFlags", IBV_QP_ACCESS_FLAGS}),
                         [](const auto& info) { return std::string(info.param.name); });

class InitToRtrMissing : public QpStateMachine,
                         public ::testing::WithParamInterface<MissingAttribute> {};

// INIT -> RTR requires AV, PATH_MTU, DEST_QPN, RQ_PSN, MAX_DEST_RD_ATOMIC and
// MIN_RNR_TIMER. The refused modify also carries an optional attribute
// (ACCESS_FLAGS) with a new value, which must not take effect either.
TEST_P(InitToRtrMissing, IsEinvalAndChangesNothing) {
  bring_to(IBV_QPS_INIT);
  ibv_qp_attr attr = rtr_attr();
  attr.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr,
                                  (kRcInitToRtrMask & ~GetParam().bit) | IBV_QP_ACCESS_FLAGS));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_INIT, now.qp_state);
  expect_init_attributes(now);
  EXPECT_EQ(0, to_rtr());
}

INSTANTIATE_TEST_SUITE_P(
    RequiredAttributes, InitToRtrMissing,
    ::testing::Values(MissingAttribute{"Av", IBV_QP_AV},
                      MissingAttribute{"PathMtu", IBV_QP_PATH_MTU},
                      MissingAttribute{"DestQpn", IBV_QP_DEST_QPN},
                      MissingAttribute{"RqPsn", IBV_QP_RQ_PSN},
                      MissingAttribute{"MaxDestRdAtomic", IBV_QP_MAX_DEST_RD_ATOMIC},
                      MissingAttribute{"MinRnrTimer", IBV_QP_MIN_RNR_TIMER}),
    [](const auto& info) { return std::string(info.param.name); });

class RtrToRtsMissing : public QpStateMachine,
                        public ::testing::WithParamInterface<MissingAttribute> {};

// RTR -> RTS requires SQ_PSN, TIMEOUT, RETRY_CNT, RNR_RETRY and
// MAX_QP_RD_ATOMIC. The refused modify also carries an optional
// MIN_RNR_TIMER with a new value, which must not take effect either.
TEST_P(RtrToRtsMissing, IsEinvalAndChangesNothing) {
  bring_to(IBV_QPS_RTR);
  ibv_qp_attr attr = rts_attr();
  attr.min_rnr_timer = 1;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr,
                                  (kRcRtrToRtsMask & ~GetParam().bit) | IBV_QP_MIN_RNR_TIMER));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_RTR, now.qp_state);
  expect_init_attributes(now);
  expect_rtr_attributes(now);
  EXPECT_EQ(0, to_rts());
}

INSTANTIATE_TEST_SUITE_P(
    RequiredAttributes, RtrToRtsMissing,
    ::testing::Values(MissingAttribute{"SqPsn", IBV_QP_SQ_PSN},
                      MissingAttribute{"Timeout", IBV_QP_TIMEOUT},
                      MissingAttribute{"RetryCnt", IBV_QP_RETRY_CNT},
                      MissingAttribute{"RnrRetry", IBV_QP_RNR_RETRY},
                      MissingAttribute{"MaxQpRdAtomic", IBV_QP_MAX_QP_RD_ATOMIC}),
    [](const auto& info) { return std::string(info.param.name); });

// An attribute the transition does not allow (neither required nor
// optional) makes the whole modify invalid.
TEST_F(QpStateMachine, SqPsnOnResetToInitIsEinval) {
  ibv_qp_attr attr = init_attr();
  attr.sq_psn = 7;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcResetToInitMask | IBV_QP_SQ_PSN));
  EXPECT_EQ(IBV_QPS_RESET, query().qp_state);
}

TEST_F(QpStateMachine, SqPsnOnInitToRtrIsEinval) {
  bring_to(IBV_QPS_INIT);
  ibv_qp_attr attr = rtr_attr();
  attr.sq_psn = 7;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcInitToRtrMask | IBV_QP_SQ_PSN));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_INIT, now.qp_state);
  expect_init_attributes(now);
}

TEST_F(QpStateMachine, DestQpnOnRtrToRtsIsEinval) {
  bring_to(IBV_QPS_RTR);
  ibv_qp_attr attr = rts_attr();
  attr.dest_qp_num = qp()->qp_num;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcRtrToRtsMask | IBV_QP_DEST_QPN));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_RTR, now.qp_state);
  expect_rtr_attributes(now);
}

TEST_F(QpStateMachine, PathMtuOnRtsToRtsIsEinval) {
  bring_to(IBV_QPS_RTS);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.path_mtu = IBV_MTU_256;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, IBV_QP_STATE | IBV_QP_PATH_MTU));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_RTS, now.qp_state);
  expect_rtr_attributes(now);
}

// Port numbers run from 1 to phys_port_cnt.
TEST_F(QpStateMachine, ResetToInitWithBadPortIsEinval) {
  for (int bad_port : {0, device_attr().phys_port_cnt + 1}) {
    SCOPED_TRACE("port " + std::to_string(bad_port));
    ibv_qp_attr attr = init_attr();
    attr.port_num = static_cast<uint8_t>(bad_port);
    EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr, kRcResetToInitMask));
    EXPECT_EQ(IBV_QPS_RESET, query().qp_state);
  }
  EXPECT_EQ(0, to_init());
}

// The IBTA Modify QP verb: a current state that does not match the QP's
// actual state is an error ("invalid current QP state"). Here the QP is in
// RTS and the caller claims SQD, for a modify that would be legal from SQD.
TEST_F(QpStateMachine, CurrentStateMismatchIsEinvalAndChangesNothing) {
  bring_to(IBV_QPS_RTS);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.cur_qp_state = IBV_QPS_SQD;
  attr.min_rnr_timer = 1;
  EXPECT_EQ(EINVAL, ibv_modify_qp(qp(), &attr,
                                  IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_MIN_RNR_TIMER));
  ibv_qp_attr now = query();
  EXPECT_EQ(IBV_QPS_RTS, now.qp_state);
  EXPECT_EQ(kMinRnrTimer, now.min_rnr_timer);
}

// IBV_QP_CUR_STATE is an optional attribute of RTR -> RTS, RTS -> RTS and
// SQD -> RTS only (IBTA 11.2.5.2; the kernel's ib_modify_qp_is_ok): given
// anywhere else, even naming the state the QP is in, the modify is EINVAL
// and changes nothing. SQD -> SQD does not take it either.
TEST_F(QpStateMachine, CurrentStateOnlyInTheTransitionsThatAllowIt) {
  auto modify_claiming_current = [&](ibv_qp_attr attr, int mask) {
    attr.cur_qp_state = query().qp_state;
    return ibv_modify_qp(qp(), &attr, mask | IBV_QP_CUR_STATE);
  };
  auto refused = [&](ibv_qp_attr attr, int mask, const char* what) {
    const ibv_qp_state before = query().qp_state;
    EXPECT_EQ(EINVAL, modify_claiming_current(attr, mask)) << what;
    EXPECT_EQ(before, query().qp_state) << what;
  };
  ibv_qp_attr state_only{};

  refused(init_attr(), kRcResetToInitMask, "RESET -> INIT");
  ASSERT_EQ(0, to_init());
  state_only.qp_state = IBV_QPS_INIT;
  refused(state_only, IBV_QP_STATE, "INIT -> INIT");
  refused(rtr_attr(), kRcInitToRtrMask, "INIT -> RTR");
  ASSERT_EQ(0, to_rtr());
  EXPECT_EQ(0, modify_claiming_current(rts_attr(), kRcRtrToRtsMask)) << "RTR -> RTS";
  state_only.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(0, modify_claiming_current(state_only, IBV_QP_STATE)) << "RTS -> RTS";
  state_only.qp_state = IBV_QPS_SQD;
  refused(state_only, IBV_QP_STATE, "RTS -> SQD");
  ASSERT_EQ(0, to_state(IBV_QPS_SQD));
  refused(state_only, IBV_QP_STATE, "SQD -> SQD");
  state_only.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(0, modify_claiming_current(state_only, IBV_QP_STATE)) << "SQD -> RTS";
  EXPECT_EQ(IBV_QPS_RTS, query().qp_state);
  state_only.qp_state = IBV_QPS_ERR;
  refused(state_only, IBV_QP_STATE, "RTS -> ERR");
  ASSERT_EQ(0, to_state(IBV_QPS_ERR));
  state_only.qp_state = IBV_QPS_RESET;
  refused(state_only, IBV_QP_STATE, "ERR -> RESET");
}

}  // namespace
}  // namespace softverbs::conformance
