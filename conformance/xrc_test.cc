// XRC (IBTA 11.2.4; ibv_open_xrcd(3), ibv_create_srq_ex(3), ibv_open_qp(3)):
// domains opened on a file are shared and follow the kernel's O_CREAT /
// O_EXCL rules; one initiator reaches every XRC SRQ of the target's domain,
// each message landing on the SRQ its WR names, completing on that SRQ's CQ
// with the target's QPN; one-sided operations are checked against the named
// SRQ's PD; an SRQ outside the domain is an invalid request; ibv_open_qp
// gives a second handle to a target. Skipped on devices without XRC.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/device.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::conformance {
namespace {

using namespace testsupport;
constexpr auto kWait = std::chrono::milliseconds(5000);

struct XrcdCloser {
  void operator()(ibv_xrcd* xrcd) const { ibv_close_xrcd(xrcd); }
};
struct SrqDestroyer {
  void operator()(ibv_srq* srq) const { ibv_destroy_srq(srq); }
};
using XrcdPtr = std::unique_ptr<ibv_xrcd, XrcdCloser>;
using SrqPtr = std::unique_ptr<ibv_srq, SrqDestroyer>;

// One process, one device: an initiator connected to a target through the
// device's own port, and XRC SRQs with their own CQs.
class XrcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Errno err = 0;
    context_ = open_test_device(err);
    ASSERT_TRUE(context_) << strerror(err);
    ibv_device_attr attr{};
    ASSERT_EQ(0, ibv_query_device(context_.get(), &attr));
    if (!(attr.device_cap_flags & IBV_DEVICE_XRC)) GTEST_SKIP() << "the device has no XRC";
    ASSERT_EQ(0, query_test_port_address(context_.get(), port_));
    pd_.reset(ibv_alloc_pd(context_.get()));
    send_cq_.reset(ibv_create_cq(context_.get(), 64, nullptr, nullptr, 0));
    mr_.reset(ibv_reg_mr(pd_.get(), buffer_.data(), buffer_.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                             IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
    ASSERT_TRUE(pd_ && send_cq_ && mr_);
    xrcd_ = open_xrcd(-1, 0);
    ASSERT_TRUE(xrcd_) << strerror(errno);
  }
  void TearDown() override {
    qps_.clear();
    srqs_.clear();
  }

  static XrcdPtr open_xrcd_on(ibv_context* context, int fd, int oflags) {
    ibv_xrcd_init_attr init{};
    init.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    init.fd = fd;
    init.oflags = oflags;
    return XrcdPtr(ibv_open_xrcd(context, &init));
  }
  XrcdPtr open_xrcd(int fd, int oflags) { return open_xrcd_on(context_.get(), fd, oflags); }

  // An XRC SRQ of `xrcd` whose completions go to `cq`.
  ibv_srq* make_srq(ibv_xrcd* xrcd, ibv_cq* cq, ibv_pd* pd = nullptr) {
    ibv_srq_init_attr_ex init{};
    init.attr.max_wr = 16;
    init.attr.max_sge = 1;
    init.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                     IBV_SRQ_INIT_ATTR_PD;
    init.srq_type = IBV_SRQT_XRC;
    init.xrcd = xrcd;
    init.cq = cq;
    init.pd = pd ? pd : pd_.get();
    ibv_srq* srq = ibv_create_srq_ex(context_.get(), &init);
    if (srq) srqs_.emplace_back(srq);
    return srq;
  }
  uint32_t srq_number(ibv_srq* srq) {
    uint32_t n = 0;
    EXPECT_EQ(0, ibv_get_srq_num(srq, &n));
    return n;
  }
  // What ibv_open_qp needs to find target `qp_num` in `xrcd`.
  static ibv_qp_open_attr target_open_attr(ibv_xrcd* xrcd, uint32_t qp_num) {
    ibv_qp_open_attr open{};
    open.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    open.qp_num = qp_num;
    open.xrcd = xrcd;
    open.qp_type = IBV_QPT_XRC_RECV;
    return open;
  }
  ibv_cq* make_cq() {
    cqs_.emplace_back(ibv_create_cq(context_.get(), 64, nullptr, nullptr, 0));
    return cqs_.back().get();
  }

  ibv_qp* make_initiator() {
    ibv_qp_init_attr_ex init{};
    init.qp_type = IBV_QPT_XRC_SEND;
    init.send_cq = send_cq_.get();
    init.cap.max_send_wr = 32;
    init.cap.max_send_sge = 1;
    init.comp_mask = IBV_QP_INIT_ATTR_PD;
    init.pd = pd_.get();
    ibv_qp* qp = ibv_create_qp_ex(context_.get(), &init);
    if (qp) qps_.emplace_back(qp);
    return qp;
  }
  ibv_qp* make_target(ibv_xrcd* xrcd) {
    ibv_qp_init_attr_ex init{};
    init.qp_type = IBV_QPT_XRC_RECV;
    init.comp_mask = IBV_QP_INIT_ATTR_XRCD;
    init.xrcd = xrcd;
    ibv_qp* qp = ibv_create_qp_ex(context_.get(), &init);
    if (qp) qps_.emplace_back(qp);
    return qp;
  }

  // The attributes each half requires (ibv_modify_qp(3), the kernel's table).
  void connect(ibv_qp* qp, uint32_t remote_qpn, bool target) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port_.port;
    a.qp_access_flags = target ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                     IBV_ACCESS_REMOTE_ATOMIC
                               : 0;
    ASSERT_EQ(0, ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                           IBV_QP_ACCESS_FLAGS));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 1;
    a.ah_attr.dlid = port_.lid;
    a.ah_attr.port_num = port_.port;
    if (port_.use_grh) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = port_.gid;
      a.ah_attr.grh.sgid_index = port_.gid_index;
      a.ah_attr.grh.hop_limit = 1;
    }
    const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                    IBV_QP_RQ_PSN;
    ASSERT_EQ(0, ibv_modify_qp(qp, &a, target ? rtr | IBV_QP_MAX_DEST_RD_ATOMIC |
                                                    IBV_QP_MIN_RNR_TIMER
                                              : rtr));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    const int rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
    ASSERT_EQ(0, ibv_modify_qp(qp, &a, target ? rts : rts | IBV_QP_RETRY_CNT |
                                                          IBV_QP_RNR_RETRY |
                                                          IBV_QP_MAX_QP_RD_ATOMIC));
  }

  // An initiator connected to a target in `xrcd`.
  std::pair<ibv_qp*, ibv_qp*> connection(ibv_xrcd* xrcd) {
    ibv_qp* initiator = make_initiator();
    ibv_qp* target = make_target(xrcd);
    if (!initiator || !target) return {nullptr, nullptr};
    connect(initiator, target->qp_num, false);
    connect(target, initiator->qp_num, true);
    return {initiator, target};
  }

  int post_srq(ibv_srq* srq, uint64_t wr_id, uint64_t offset, uint32_t length) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq, &wr, &bad);
  }

  // A signaled WR on the initiator for the XRC SRQ numbered `srqn`.
  int post(ibv_qp* qp, ibv_wr_opcode opcode, uint32_t srqn, uint64_t wr_id, uint64_t offset,
           uint32_t length, uint64_t remote_offset = 0, uint32_t rkey = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data() + offset), length, mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.qp_type.xrc.remote_srqn = srqn;
    const uint64_t remote = reinterpret_cast<uintptr_t>(buffer_.data() + remote_offset);
    if (opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = remote;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = 5;
    } else {
      wr.wr.rdma.remote_addr = remote;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp, &wr, &bad);
  }

  std::vector<ibv_wc> poll(ibv_cq* cq, size_t count) {
    std::vector<ibv_wc> out;
    poll_completions(cq, count, out, kWait);
    return out;
  }

  ContextPtr context_;
  PortAddress port_;
  PdPtr pd_;
  CqPtr send_cq_;
  std::vector<uint8_t> buffer_ = std::vector<uint8_t>(1 << 16);
  MrPtr mr_;
  XrcdPtr xrcd_;
  std::vector<CqPtr> cqs_;
  std::vector<QpPtr> qps_;     // destroyed before the SRQs, as verbs requires
  std::vector<SrqPtr> srqs_;   // then the SRQs, before their CQs and domains
};

TEST_F(XrcTest, DomainOnAFileFollowsTheOpenFlags) {
  char path[] = "/tmp/softverbs-xrcd-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  errno = 0;
  EXPECT_FALSE(open_xrcd(fd, 0)) << "no domain on the file yet, and no O_CREAT";
  EXPECT_EQ(errno, EAGAIN);
  XrcdPtr first = open_xrcd(fd, O_CREAT);
  ASSERT_TRUE(first) << strerror(errno);
  errno = 0;
  EXPECT_FALSE(open_xrcd(fd, O_CREAT | O_EXCL));
  EXPECT_EQ(errno, EINVAL);
  XrcdPtr second = open_xrcd(fd, 0);
  ASSERT_TRUE(second) << "the file's domain exists now";
  // Both handles name one domain: a target made through one is found through the other.
  ibv_qp* target = make_target(first.get());
  ASSERT_NE(target, nullptr);
  ibv_qp_open_attr open = target_open_attr(second.get(), target->qp_num);
  QpPtr opened(ibv_open_qp(context_.get(), &open));
  EXPECT_TRUE(opened) << strerror(errno);
  opened.reset();
  qps_.clear();
  ::close(fd);
}

TEST_F(XrcTest, OpenXrcdRefusesBadRequests) {
  errno = 0;
  EXPECT_FALSE(open_xrcd(1 << 20, O_CREAT)) << "an fd that names nothing";
  EXPECT_EQ(errno, EBADF);
  ibv_xrcd_init_attr init{};
  init.comp_mask = IBV_XRCD_INIT_ATTR_FD;  // the open flags missing
  init.fd = -1;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(context_.get(), &init), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(XrcTest, EachSendLandsOnTheSrqItNames) {
  ibv_cq* cq_a = make_cq();
  ibv_cq* cq_b = make_cq();
  ibv_srq* srq_a = make_srq(xrcd_.get(), cq_a);
  ibv_srq* srq_b = make_srq(xrcd_.get(), cq_b);
  ASSERT_TRUE(srq_a && srq_b) << strerror(errno);
  EXPECT_NE(srq_number(srq_a), srq_number(srq_b));
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target) << strerror(errno);
  ASSERT_EQ(0, post_srq(srq_a, 100, 32768, 4096));
  ASSERT_EQ(0, post_srq(srq_b, 200, 40960, 4096));
  for (int i = 0; i < 3000; ++i) buffer_[i] = static_cast<uint8_t>(i * 7);
  // 3000 bytes: three packets at an MTU of 1024.
  ASSERT_EQ(0, post(initiator, IBV_WR_SEND, srq_number(srq_b), 1, 0, 3000));
  ASSERT_EQ(0, post(initiator, IBV_WR_SEND, srq_number(srq_a), 2, 0, 100));
  const std::vector<ibv_wc> sent = poll(send_cq_.get(), 2);
  ASSERT_EQ(sent.size(), 2u);
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  const std::vector<ibv_wc> on_b = poll(cq_b, 1);
  const std::vector<ibv_wc> on_a = poll(cq_a, 1);
  ASSERT_EQ(on_b.size(), 1u);
  ASSERT_EQ(on_a.size(), 1u);
  EXPECT_EQ(on_b[0].wr_id, 200u);
  EXPECT_EQ(on_b[0].byte_len, 3000u);
  EXPECT_EQ(on_b[0].opcode, IBV_WC_RECV);
  // The completion names the target QP and the initiator it came from.
  EXPECT_EQ(on_b[0].qp_num, target->qp_num);
  EXPECT_EQ(on_b[0].src_qp, initiator->qp_num);
  EXPECT_EQ(on_a[0].wr_id, 100u);
  EXPECT_EQ(on_a[0].byte_len, 100u);
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 40960, 3000));
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 32768, 100));
}

TEST_F(XrcTest, OneSidedOperationsUseTheNamedSrqsProtectionDomain) {
  ibv_srq* srq = make_srq(xrcd_.get(), make_cq());
  ASSERT_NE(srq, nullptr);
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  for (int i = 0; i < 2048; ++i) buffer_[i] = static_cast<uint8_t>(i + 1);
  const uint32_t srqn = srq_number(srq);
  ASSERT_EQ(0, post(initiator, IBV_WR_RDMA_WRITE, srqn, 1, 0, 2048, 8192, mr_->rkey));
  ASSERT_EQ(0, post(initiator, IBV_WR_RDMA_READ, srqn, 2, 16384, 2048, 8192, mr_->rkey));
  uint64_t* word = reinterpret_cast<uint64_t*>(buffer_.data() + 24576);
  *word = 37;
  ASSERT_EQ(0, post(initiator, IBV_WR_ATOMIC_FETCH_AND_ADD, srqn, 3, 28672, 8, 24576,
                    mr_->rkey));
  const std::vector<ibv_wc> done = poll(send_cq_.get(), 3);
  ASSERT_EQ(done.size(), 3u);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 8192, 2048));
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 16384, 2048));
  EXPECT_EQ(*word, 42u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(buffer_.data() + 28672), 37u);
}

// Where xrc_odp_caps names them, SENDs into an SRQ and one-sided operations
// work with on-demand MRs on both sides.
TEST_F(XrcTest, OnDemandMemoryServesWhatXrcOdpCapsNames) {
  ibv_device_attr_ex attr{};
  ASSERT_EQ(0, ibv_query_device_ex(context_.get(), nullptr, &attr));
  constexpr uint32_t kNeeded = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV |
                               IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                               IBV_ODP_SUPPORT_ATOMIC;
  if (!(attr.odp_caps.general_caps & IBV_ODP_SUPPORT) ||
      (attr.xrc_odp_caps & kNeeded) != kNeeded)
    GTEST_SKIP() << "no ODP for XRC";
  mr_.reset();
  mr_.reset(ibv_reg_mr(pd_.get(), buffer_.data(), buffer_.size(),
                       IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
  ASSERT_TRUE(mr_) << strerror(errno);
  ibv_cq* cq = make_cq();
  ibv_srq* srq = make_srq(xrcd_.get(), cq);
  ASSERT_NE(srq, nullptr);
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  for (int i = 0; i < 4096; ++i) buffer_[i] = static_cast<uint8_t>(i * 3 + 1);
  const uint32_t srqn = srq_number(srq);
  ASSERT_EQ(0, post_srq(srq, 7, 32768, 4096));
  ASSERT_EQ(0, post(initiator, IBV_WR_SEND, srqn, 1, 0, 4096));
  ASSERT_EQ(0, post(initiator, IBV_WR_RDMA_WRITE, srqn, 2, 0, 2048, 8192, mr_->rkey));
  ASSERT_EQ(0, post(initiator, IBV_WR_RDMA_READ, srqn, 3, 16384, 2048, 8192, mr_->rkey));
  uint64_t* word = reinterpret_cast<uint64_t*>(buffer_.data() + 24576);
  *word = 10;
  ASSERT_EQ(0, post(initiator, IBV_WR_ATOMIC_FETCH_AND_ADD, srqn, 4, 28672, 8, 24576,
                    mr_->rkey));
  const std::vector<ibv_wc> done = poll(send_cq_.get(), 4);
  ASSERT_EQ(done.size(), 4u);
  for (const ibv_wc& wc : done) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  const std::vector<ibv_wc> received = poll(cq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].byte_len, 4096u);
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 32768, 4096));
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 16384, 2048));
  EXPECT_EQ(*word, 15u);
  EXPECT_EQ(*reinterpret_cast<uint64_t*>(buffer_.data() + 28672), 10u);
}

TEST_F(XrcTest, AnRkeyOutsideTheSrqsProtectionDomainIsARemoteAccessError) {
  PdPtr other_pd(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(other_pd);
  ibv_srq* srq = make_srq(xrcd_.get(), make_cq(), other_pd.get());
  ASSERT_NE(srq, nullptr);
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  ASSERT_EQ(0, post(initiator, IBV_WR_RDMA_WRITE, srq_number(srq), 1, 0, 64, 8192, mr_->rkey));
  const std::vector<ibv_wc> done = poll(send_cq_.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(done[0].status);
  qps_.clear();  // before other_pd's SRQ goes
  srqs_.clear();
}

TEST_F(XrcTest, AnSrqOfAnotherDomainIsAnInvalidRequest) {
  XrcdPtr other = open_xrcd(-1, 0);
  ASSERT_TRUE(other);
  ibv_srq* elsewhere = make_srq(other.get(), make_cq());
  ASSERT_NE(elsewhere, nullptr);
  ASSERT_EQ(0, post_srq(elsewhere, 1, 32768, 4096));
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  ASSERT_EQ(0, post(initiator, IBV_WR_SEND, srq_number(elsewhere), 1, 0, 64));
  const std::vector<ibv_wc> done = poll(send_cq_.get(), 1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, IBV_WC_REM_INV_REQ_ERR) << ibv_wc_status_str(done[0].status);
  qps_.clear();
  srqs_.clear();
}

TEST_F(XrcTest, AnEmptySrqAnswersWithRnrUntilAWqeIsPosted) {
  ibv_cq* cq = make_cq();
  ibv_srq* srq = make_srq(xrcd_.get(), cq);
  ASSERT_NE(srq, nullptr);
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  ASSERT_EQ(0, post(initiator, IBV_WR_SEND, srq_number(srq), 1, 0, 64));
  std::vector<ibv_wc> early;
  poll_completions(send_cq_.get(), 1, early, std::chrono::milliseconds(200));
  EXPECT_TRUE(early.empty()) << "completed with no WQE posted";
  ASSERT_EQ(0, post_srq(srq, 7, 32768, 4096));
  const std::vector<ibv_wc> received = poll(cq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 7u);
  const std::vector<ibv_wc> sent = poll(send_cq_.get(), 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, IBV_WC_SUCCESS);
}

TEST_F(XrcTest, NeitherHalfHasAReceiveQueueAndTheTargetSendsNothing) {
  ibv_srq* srq = make_srq(xrcd_.get(), make_cq());
  ASSERT_NE(srq, nullptr);
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.data()), 64, mr_->lkey};
  ibv_recv_wr recv{};
  recv.sg_list = &sge;
  recv.num_sge = 1;
  ibv_recv_wr* bad_recv = nullptr;
  EXPECT_EQ(EINVAL, ibv_post_recv(initiator, &recv, &bad_recv));
  EXPECT_EQ(EINVAL, ibv_post_recv(target, &recv, &bad_recv));
  EXPECT_EQ(EINVAL, post(target, IBV_WR_SEND, srq_number(srq), 1, 0, 64));
}

TEST_F(XrcTest, APrivateDomainInUseCannotBeClosed) {
  ibv_srq* srq = make_srq(xrcd_.get(), make_cq());
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(EBUSY, ibv_close_xrcd(xrcd_.get()));
  srqs_.clear();
  EXPECT_EQ(0, ibv_close_xrcd(xrcd_.release()));
}

TEST_F(XrcTest, OpenQpGivesASecondHandleThatOutlivesTheFirst) {
  ibv_cq* cq = make_cq();
  ibv_srq* srq = make_srq(xrcd_.get(), cq);
  ASSERT_NE(srq, nullptr);
  auto [initiator, target] = connection(xrcd_.get());
  ASSERT_TRUE(initiator && target);
  ibv_qp_open_attr open = target_open_attr(xrcd_.get(), target->qp_num);
  QpPtr opened(ibv_open_qp(context_.get(), &open));
  ASSERT_TRUE(opened) << strerror(errno);
  EXPECT_EQ(opened->qp_num, target->qp_num);
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(0, ibv_query_qp(opened.get(), &attr, IBV_QP_STATE, &init));
  EXPECT_EQ(attr.qp_state, IBV_QPS_RTS);
  // The creator's handle goes; the target stays for the opened one.
  std::erase_if(qps_, [target = target](const QpPtr& qp) { return qp.get() == target; });
  ASSERT_EQ(0, post_srq(srq, 9, 32768, 4096));
  ASSERT_EQ(0, post(initiator, IBV_WR_SEND, srq_number(srq), 1, 0, 64));
  const std::vector<ibv_wc> received = poll(cq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(received[0].qp_num, opened->qp_num);
  // Another domain, a wrong type, an unknown number: EINVAL.
  XrcdPtr other = open_xrcd(-1, 0);
  open.xrcd = other.get();
  errno = 0;
  EXPECT_EQ(ibv_open_qp(context_.get(), &open), nullptr);
  EXPECT_EQ(errno, EINVAL);
  open.xrcd = xrcd_.get();
  open.qp_type = IBV_QPT_RC;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(context_.get(), &open), nullptr);
  EXPECT_EQ(errno, EINVAL);
  opened.reset();
  qps_.clear();
}

TEST_F(XrcTest, TheBuilderNamesTheSrqAsThePostedWrDoes) {
  ibv_cq* cq = make_cq();
  ibv_srq* srq = make_srq(xrcd_.get(), cq);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr_ex init{};
  init.qp_type = IBV_QPT_XRC_SEND;
  init.send_cq = send_cq_.get();
  init.cap.max_send_wr = 8;
  init.cap.max_send_sge = 1;
  init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  init.pd = pd_.get();
  init.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ibv_qp* initiator = ibv_create_qp_ex(context_.get(), &init);
  ASSERT_NE(initiator, nullptr) << strerror(errno);
  qps_.emplace_back(initiator);
  ibv_qp* target = make_target(xrcd_.get());
  ASSERT_NE(target, nullptr);
  connect(initiator, target->qp_num, false);
  connect(target, initiator->qp_num, true);
  ASSERT_EQ(0, post_srq(srq, 5, 32768, 4096));
  std::memset(buffer_.data(), 0x5a, 256);
  ibv_qp_ex* qpx = ibv_qp_to_qp_ex(initiator);
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = 11;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_xrc_srqn(qpx, srq_number(srq));
  ibv_wr_set_sge(qpx, mr_->lkey, reinterpret_cast<uintptr_t>(buffer_.data()), 256);
  ASSERT_EQ(0, ibv_wr_complete(qpx));
  const std::vector<ibv_wc> received = poll(cq, 1);
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].wr_id, 5u);
  EXPECT_EQ(received[0].byte_len, 256u);
  EXPECT_EQ(0, std::memcmp(buffer_.data(), buffer_.data() + 32768, 256));
}

}  // namespace
}  // namespace softverbs::conformance
