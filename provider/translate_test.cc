#include "provider/translate.h"

#include <endian.h>
#include <gtest/gtest.h>

#include <cstring>

namespace softverbs::provider {
namespace {

TEST(DeviceAttr, GuidsAreInNetworkOrderAndCapsBecomeFlags) {
  DeviceAttributes in;
  in.fw_ver = "1.2.3";
  in.node_guid = 0x0102030405060708ull;
  in.sys_image_guid = 0x1112131415161718ull;
  in.cap_xrc = false;
  in.cap_rc_rnr_nak_gen = true;
  in.atomic_cap = AtomicCapability::kHca;
  ibv_device_attr out;
  to_ibv_device_attr(in, out);
  EXPECT_STREQ(out.fw_ver, "1.2.3");
  EXPECT_EQ(out.node_guid, htobe64(0x0102030405060708ull));
  EXPECT_EQ(out.sys_image_guid, htobe64(0x1112131415161718ull));
  EXPECT_TRUE(out.device_cap_flags & IBV_DEVICE_RC_RNR_NAK_GEN);
  EXPECT_TRUE(out.device_cap_flags & IBV_DEVICE_PORT_ACTIVE_EVENT);
  EXPECT_FALSE(out.device_cap_flags & IBV_DEVICE_XRC);
  EXPECT_TRUE(out.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_FALSE(out.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A);
  EXPECT_TRUE(out.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
  EXPECT_EQ(out.atomic_cap, IBV_ATOMIC_HCA);
  EXPECT_EQ(out.max_sge, static_cast<int>(kMaxSge));
  EXPECT_EQ(out.max_cqe, static_cast<int>(kMaxCqe));
  EXPECT_EQ(out.phys_port_cnt, 1);
}

TEST(DeviceAttr, LimitsAboveIntMaxSaturate) {
  DeviceAttributes in;
  in.max_qp = 0xffffffffu;
  ibv_device_attr out;
  to_ibv_device_attr(in, out);
  EXPECT_EQ(out.max_qp, INT32_MAX);
}

TEST(DeviceAttrEx, CarriesTheOriginalAndThePortCount) {
  DeviceAttributes in;
  in.phys_port_cnt = 1;
  ibv_device_attr_ex out;
  to_ibv_device_attr_ex(in, out);
  EXPECT_EQ(out.phys_port_cnt_ex, 1u);
  // The 32 bits of the original, and above them the memory placement
  // extensions' bits (IB_UVERBS_DEVICE_ATOMIC_WRITE, _FLUSH_GLOBAL).
  EXPECT_EQ(out.device_cap_flags_ex & 0xffffffffu, out.orig_attr.device_cap_flags);
  EXPECT_EQ(out.device_cap_flags_ex >> 32, (1u << 8) | (1u << 6));
  EXPECT_EQ(out.odp_caps.general_caps, uint64_t{IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT});
}

// What each transport has, and nothing it lacks: UC no READ or atomics, UD
// only SEND (IBTA 9.8.2, 9.8.3); FLUSH (1 << 6) and ATOMIC WRITE (1 << 7)
// on RC and XRC.
TEST(DeviceAttrEx, OdpCapsFollowEachTransport) {
  DeviceAttributes in;
  ibv_device_attr_ex out;
  to_ibv_device_attr_ex(in, out);
  const auto& t = out.odp_caps.per_transport_caps;
  constexpr uint32_t kSends = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  constexpr uint32_t kPlacement = (1u << 6) | (1u << 7);
  EXPECT_EQ(t.rc_odp_caps, kSends | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                               IBV_ODP_SUPPORT_ATOMIC | kPlacement);
  EXPECT_EQ(t.uc_odp_caps, kSends | IBV_ODP_SUPPORT_WRITE);
  EXPECT_EQ(t.ud_odp_caps, kSends);
  EXPECT_EQ(out.xrc_odp_caps, uint32_t{IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE |
                                       IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
                                       IBV_ODP_SUPPORT_SRQ_RECV | kPlacement});
}

TEST(PortAttr, InfiniBandPort) {
  PortAttributes in;
  in.lid = 7;
  in.active_mtu = Mtu::k2048;
  ibv_port_attr out;
  to_ibv_port_attr(in, out);
  EXPECT_EQ(out.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(out.max_mtu, IBV_MTU_4096);
  EXPECT_EQ(out.active_mtu, IBV_MTU_2048);
  EXPECT_EQ(out.lid, 7);
  EXPECT_EQ(out.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(out.flags, 0);
  EXPECT_TRUE(out.port_cap_flags & IBV_PORT_SYS_IMAGE_GUID_SUP);
  EXPECT_FALSE(out.port_cap_flags & IBV_PORT_CM_SUP);
  EXPECT_EQ(out.gid_tbl_len, static_cast<int>(kGidTableLen));
  EXPECT_EQ(out.pkey_tbl_len, kPkeyTableLen);
}

TEST(PortAttr, EthernetPortRequiresGrh) {
  PortAttributes in;
  in.link_layer = LinkLayer::kEthernet;
  ibv_port_attr out;
  to_ibv_port_attr(in, out);
  EXPECT_EQ(out.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(out.flags, IBV_QPF_GRH_REQUIRED);
}

TEST(Enums, QpStatesRoundTrip) {
  for (int state = IBV_QPS_RESET; state <= IBV_QPS_ERR; ++state) {
    QpState hca;
    ASSERT_EQ(from_ibv_qp_state(state, hca), 0);
    EXPECT_EQ(to_ibv_qp_state(hca), state);
  }
  QpState hca;
  EXPECT_EQ(from_ibv_qp_state(IBV_QPS_UNKNOWN, hca), EINVAL);
  EXPECT_EQ(from_ibv_qp_state(-1, hca), EINVAL);
}

TEST(Enums, MtuOutsideTheIbtaCodesIsInvalid) {
  Mtu mtu;
  EXPECT_EQ(from_ibv_mtu(IBV_MTU_1024, mtu), 0);
  EXPECT_EQ(mtu_bytes(mtu), 1024u);
  EXPECT_EQ(from_ibv_mtu(0, mtu), EINVAL);
  EXPECT_EQ(from_ibv_mtu(6, mtu), EINVAL);
}

TEST(Enums, QpTypes) {
  QpType type;
  EXPECT_EQ(from_ibv_qp_type(IBV_QPT_RC, type), 0);
  EXPECT_EQ(type, QpType::kRc);
  EXPECT_EQ(from_ibv_qp_type(IBV_QPT_UD, type), 0);
  EXPECT_EQ(type, QpType::kUd);
  EXPECT_EQ(from_ibv_qp_type(IBV_QPT_XRC_SEND, type), 0);
  EXPECT_EQ(type, QpType::kXrcSend);
  EXPECT_EQ(from_ibv_qp_type(IBV_QPT_XRC_RECV, type), 0);
  EXPECT_EQ(type, QpType::kXrcRecv);
  EXPECT_EQ(from_ibv_qp_type(IBV_QPT_RAW_PACKET, type), EOPNOTSUPP);
  EXPECT_EQ(from_ibv_qp_type(77, type), EINVAL);
}

TEST(Enums, EveryWcStatusHasItsVerbsName) {
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kSuccess), IBV_WC_SUCCESS);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kLocLenErr), IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kLocProtErr), IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kWrFlushErr), IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kRemAccessErr), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kRetryExcErr), IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kRnrRetryExcErr), IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(to_ibv_wc_status(WcStatus::kGeneralErr), IBV_WC_GENERAL_ERR);
}

TEST(Enums, ReceiveOpcodesCarryTheRecvBit) {
  EXPECT_EQ(to_ibv_wc_opcode(WcOpcode::kRecv), IBV_WC_RECV);
  EXPECT_TRUE(to_ibv_wc_opcode(WcOpcode::kRecvRdmaWithImm) & IBV_WC_RECV);
  EXPECT_FALSE(to_ibv_wc_opcode(WcOpcode::kRdmaRead) & IBV_WC_RECV);
  EXPECT_EQ(to_ibv_wc_opcode(WcOpcode::kFetchAdd), IBV_WC_FETCH_ADD);
}

TEST(Enums, AsyncEvents) {
  ibv_event_type type;
  ASSERT_TRUE(to_ibv_event_type(AsyncEventType::kCommEst, type));
  EXPECT_EQ(type, IBV_EVENT_COMM_EST);
  ASSERT_TRUE(to_ibv_event_type(AsyncEventType::kPortErr, type));
  EXPECT_EQ(type, IBV_EVENT_PORT_ERR);
  ASSERT_TRUE(to_ibv_event_type(AsyncEventType::kQpLastWqeReached, type));
  EXPECT_EQ(type, IBV_EVENT_QP_LAST_WQE_REACHED);
  ASSERT_TRUE(to_ibv_event_type(AsyncEventType::kGidChange, type));
  EXPECT_EQ(type, IBV_EVENT_GID_CHANGE);
}

// ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is
// set, then IBV_ACCESS_LOCAL_WRITE must be set too."
TEST(MrAccess, RemoteWriteOrAtomicNeedLocalWrite) {
  uint32_t access = 0xdead;
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_REMOTE_WRITE, access), EINVAL);
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_REMOTE_ATOMIC, access), EINVAL);
  EXPECT_EQ(access, 0xdeadu) << "output untouched on failure";
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_REMOTE_READ, access), 0);
  EXPECT_EQ(access, kAccessRemoteRead);
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_ATOMIC,
                               access),
            0);
  EXPECT_EQ(access, kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteAtomic);
}

TEST(MrAccess, UnsupportedAndUnknownBits) {
  uint32_t access = 0;
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_HUGETLB | IBV_ACCESS_REMOTE_READ, access), 0);
  EXPECT_EQ(access, kAccessRemoteRead) << "HUGETLB is a hint, taken and ignored";
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED |
                                   IBV_ACCESS_REMOTE_READ, access), 0);
  EXPECT_EQ(access, kAccessRemoteRead);
  EXPECT_EQ(mr_access_from_ibv(1u << 15, access), EINVAL);
  // Optional bits may be ignored by a device.
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING, access), 0);
  EXPECT_EQ(access, kAccessLocalWrite);
  EXPECT_EQ(mr_access_from_ibv(IBV_ACCESS_MW_BIND, access), 0);
}

TEST(QpAttr, MaskBitsMapOneToOne) {
  ibv_qp_attr in{};
  in.qp_state = IBV_QPS_RTR;
  in.path_mtu = IBV_MTU_4096;
  in.dest_qp_num = 0x123456;
  in.rq_psn = 77;
  in.max_dest_rd_atomic = 4;
  in.min_rnr_timer = 12;
  in.ah_attr.dlid = 3;
  in.ah_attr.port_num = 1;
  const int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  QpAttributes out;
  uint32_t hca_mask = 0;
  ASSERT_EQ(from_ibv_qp_attr(in, mask, out, hca_mask), 0);
  EXPECT_EQ(hca_mask, kQpAttrState | kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn |
                          kQpAttrRqPsn | kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer);
  EXPECT_EQ(out.state, QpState::kRtr);
  EXPECT_EQ(out.path_mtu, Mtu::k4096);
  EXPECT_EQ(out.dest_qp_num, 0x123456u);
  EXPECT_EQ(out.rq_psn, 77u);
  EXPECT_EQ(out.max_dest_rd_atomic, 4);
  EXPECT_EQ(out.min_rnr_timer, 12);
  EXPECT_EQ(out.av.dlid, 3);
}

TEST(QpAttr, UnknownMaskBitsAreInvalidAndChangeNothing) {
  ibv_qp_attr in{};
  in.qp_state = IBV_QPS_INIT;
  QpAttributes out;
  out.qkey = 0x1234;
  uint32_t hca_mask = 99;
  EXPECT_EQ(from_ibv_qp_attr(in, IBV_QP_STATE | (1 << 21), out, hca_mask), EINVAL);
  EXPECT_EQ(from_ibv_qp_attr(in, IBV_QP_STATE | IBV_QP_RATE_LIMIT, out, hca_mask), EINVAL);
  EXPECT_EQ(from_ibv_qp_attr(in, -1, out, hca_mask), EINVAL);
  EXPECT_EQ(out.qkey, 0x1234u);
  EXPECT_EQ(hca_mask, 99u);
}

TEST(QpAttr, BadEnumsCountOnlyWhenSelected) {
  ibv_qp_attr in{};
  in.qp_state = static_cast<ibv_qp_state>(42);
  in.path_mtu = static_cast<ibv_mtu>(9);
  QpAttributes out;
  uint32_t hca_mask = 0;
  EXPECT_EQ(from_ibv_qp_attr(in, IBV_QP_STATE, out, hca_mask), EINVAL);
  EXPECT_EQ(from_ibv_qp_attr(in, IBV_QP_PATH_MTU, out, hca_mask), EINVAL);
  EXPECT_EQ(from_ibv_qp_attr(in, IBV_QP_QKEY, out, hca_mask), 0);
}

TEST(QpAttr, GrhRoundTrip) {
  ibv_ah_attr in{};
  in.is_global = 1;
  for (int i = 0; i < 16; ++i) in.grh.dgid.raw[i] = static_cast<uint8_t>(i * 3);
  in.grh.flow_label = 0xabcde;
  in.grh.sgid_index = 2;
  in.grh.hop_limit = 64;
  in.grh.traffic_class = 5;
  in.dlid = 9;
  in.sl = 3;
  in.src_path_bits = 1;
  in.static_rate = IBV_RATE_100_GBPS;
  in.port_num = 1;
  ibv_ah_attr back;
  to_ibv_ah_attr(from_ibv_ah_attr(in), back);
  EXPECT_EQ(std::memcmp(&in, &back, sizeof(in)), 0);
}

TEST(QpAttr, QueryFillsEverything) {
  QpAttributes in;
  in.state = QpState::kRts;
  in.access_flags = kAccessRemoteRead | kAccessRemoteWrite;
  in.sq_psn = 5;
  in.timeout = 14;
  in.retry_cnt = 7;
  in.rnr_retry = 6;
  in.max_rd_atomic = 2;
  in.cap.max_send_wr = 100;
  in.cap.max_inline_data = 64;
  ibv_qp_attr out;
  to_ibv_qp_attr(in, out);
  EXPECT_EQ(out.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(out.qp_access_flags,
            static_cast<unsigned>(IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(out.sq_psn, 5u);
  EXPECT_EQ(out.timeout, 14);
  EXPECT_EQ(out.retry_cnt, 7);
  EXPECT_EQ(out.rnr_retry, 6);
  EXPECT_EQ(out.max_rd_atomic, 2);
  EXPECT_EQ(out.cap.max_send_wr, 100u);
  EXPECT_EQ(out.cap.max_inline_data, 64u);
}

TEST(SendWr, RdmaWriteWithImm) {
  ibv_send_wr in{};
  in.wr_id = 42;
  in.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  in.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  in.imm_data = htobe32(0x11223344);
  in.wr.rdma.remote_addr = 0x1000;
  in.wr.rdma.rkey = 0x55;
  SendRequest out;
  ASSERT_EQ(from_ibv_send_wr(in, out), 0);
  EXPECT_EQ(out.wr_id, 42u);
  EXPECT_EQ(out.opcode, WrOpcode::kRdmaWriteWithImm);
  EXPECT_EQ(out.flags, kWrSignaled | kWrSolicited);
  EXPECT_EQ(out.imm_data, htobe32(0x11223344));
  EXPECT_EQ(out.remote_addr, 0x1000u);
  EXPECT_EQ(out.rkey, 0x55u);
}

TEST(SendWr, AtomicFields) {
  ibv_send_wr in{};
  in.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  in.send_flags = IBV_SEND_FENCE;
  in.wr.atomic.remote_addr = 0x2000;
  in.wr.atomic.rkey = 9;
  in.wr.atomic.compare_add = 1;
  in.wr.atomic.swap = 2;
  SendRequest out;
  ASSERT_EQ(from_ibv_send_wr(in, out), 0);
  EXPECT_EQ(out.opcode, WrOpcode::kAtomicCmpSwp);
  EXPECT_EQ(out.flags, kWrFence);
  EXPECT_EQ(out.remote_addr, 0x2000u);
  EXPECT_EQ(out.rkey, 9u);
  EXPECT_EQ(out.compare_add, 1u);
  EXPECT_EQ(out.swap, 2u);
}

TEST(SendWr, OpcodesWithoutSoftSupportAreInvalid) {
  SendRequest out;
  // IBV_WR_FLUSH (14) has no ibv_send_wr form: ibv_wr_flush only.
  const int opcodes[] = {IBV_WR_TSO, IBV_WR_DRIVER1, 14, 200};
  for (int opcode : opcodes) {
    ibv_send_wr in{};
    in.opcode = static_cast<ibv_wr_opcode>(opcode);
    EXPECT_EQ(from_ibv_send_wr(in, out), EINVAL) << opcode;
  }
}

// An ATOMIC WRITE's 8 bytes are those its one 8-byte SGE points at, read
// when it is posted; any other gather list is invalid.
TEST(SendWr, AtomicWriteTakesTheEightBytesOfItsSge) {
  const uint64_t value = 0x0123456789abcdefull;
  ibv_sge sge{reinterpret_cast<uintptr_t>(&value), sizeof value, 7};
  ibv_send_wr in{};
  in.opcode = IBV_WR_ATOMIC_WRITE;
  in.wr.rdma.remote_addr = 0x3000;
  in.wr.rdma.rkey = 11;
  in.sg_list = &sge;
  in.num_sge = 1;
  SendRequest out;
  ASSERT_EQ(from_ibv_send_wr(in, out), 0);
  EXPECT_EQ(out.opcode, WrOpcode::kAtomicWrite);
  EXPECT_EQ(out.remote_addr, 0x3000u);
  EXPECT_EQ(out.rkey, 11u);
  EXPECT_EQ(out.atomic_write_data, value);
  sge.length = 4;
  EXPECT_EQ(from_ibv_send_wr(in, out), EINVAL) << "4 bytes";
  sge.length = 8;
  in.num_sge = 0;
  EXPECT_EQ(from_ibv_send_wr(in, out), EINVAL) << "no SGE";
}

// The keys of the memory window operations come from their own fields.
TEST(SendWr, WindowOperationsTakeTheirKeys) {
  SendRequest out;
  ibv_send_wr in{};
  in.opcode = IBV_WR_LOCAL_INV;
  in.invalidate_rkey = 0x1234;
  ASSERT_EQ(from_ibv_send_wr(in, out), 0);
  EXPECT_EQ(out.opcode, WrOpcode::kLocalInv);
  EXPECT_EQ(out.rkey, 0x1234u);
  in.opcode = IBV_WR_SEND_WITH_INV;
  ASSERT_EQ(from_ibv_send_wr(in, out), 0);
  EXPECT_EQ(out.opcode, WrOpcode::kSendWithInv);
  EXPECT_EQ(out.rkey, 0x1234u);
  in = {};
  in.opcode = IBV_WR_BIND_MW;
  in.bind_mw.rkey = 0x5678;
  ASSERT_EQ(from_ibv_send_wr(in, out), 0);
  EXPECT_EQ(out.opcode, WrOpcode::kBindMw);
  EXPECT_EQ(out.rkey, 0x5678u);
}

TEST(Completion, AllFieldsAndFlags) {
  Completion in;
  in.wr_id = 7;
  in.status = WcStatus::kRemAccessErr;
  in.opcode = WcOpcode::kRecv;
  in.vendor_err = 3;
  in.byte_len = 4096;
  in.imm_data = htobe32(0xcafe);
  in.qp_num = 0x11;
  in.src_qp = 0x22;
  in.wc_flags = kWcWithImm | kWcGrh;
  in.pkey_index = 0;
  in.slid = 5;
  in.sl = 2;
  in.dlid_path_bits = 1;
  ibv_wc out;
  std::memset(&out, 0xff, sizeof(out));
  to_ibv_wc(in, out);
  EXPECT_EQ(out.wr_id, 7u);
  EXPECT_EQ(out.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(out.opcode, IBV_WC_RECV);
  EXPECT_EQ(out.vendor_err, 3u);
  EXPECT_EQ(out.byte_len, 4096u);
  EXPECT_EQ(out.imm_data, htobe32(0xcafe));
  EXPECT_EQ(out.qp_num, 0x11u);
  EXPECT_EQ(out.src_qp, 0x22u);
  EXPECT_EQ(out.wc_flags, static_cast<unsigned>(IBV_WC_WITH_IMM | IBV_WC_GRH));
  EXPECT_EQ(out.pkey_index, 0);
  EXPECT_EQ(out.slid, 5);
  EXPECT_EQ(out.sl, 2);
  EXPECT_EQ(out.dlid_path_bits, 1);
}

TEST(Completion, InvalidatedRkeyTakesTheUnion) {
  Completion in;
  in.opcode = WcOpcode::kRecv;
  in.wc_flags = kWcWithInv;
  in.invalidated_rkey = 0xabc;
  in.imm_data = 0x999;
  ibv_wc out{};
  to_ibv_wc(in, out);
  EXPECT_EQ(out.wc_flags, static_cast<unsigned>(IBV_WC_WITH_INV));
  EXPECT_EQ(out.invalidated_rkey, 0xabcu);
}

}  // namespace
}  // namespace softverbs::provider
