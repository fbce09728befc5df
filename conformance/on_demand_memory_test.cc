// On-demand paging (IBV_ACCESS_ON_DEMAND, ibv_reg_mr(3)) and prefetch
// (ibv_advise_mr(3)), on a loopback pair of RC QPs in one process. Tests
// skip where the device reports no ODP (odp_caps of ibv_query_device_ex).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/completion_polling.h"

namespace softverbs::conformance {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

class OnDemandMemory : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_EQ(0, ibv_query_device_ex(context(), nullptr, &attr_));
    if (!(attr_.odp_caps.general_caps & IBV_ODP_SUPPORT)) GTEST_SKIP() << "no ODP";
    pd_ = alloc_pd();
    cq_ = create_cq(64);
    a_ = create_qp(pd_.get(), cq_.get(), cq_.get());
    b_ = create_qp(pd_.get(), cq_.get(), cq_.get());
    ASSERT_TRUE(a_ && b_) << describe_errno(last_error_);
    ASSERT_EQ(0, connect_pair(a_.get(), b_.get()));
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  }

  ibv_wc_status rdma(ibv_wr_opcode opcode, ibv_sge sge, uint64_t remote, uint32_t rkey) {
    ibv_send_wr wr{};
    wr.wr_id = 7;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(0, ibv_post_send(a_.get(), &wr, &bad));
    std::vector<ibv_wc> wc;
    EXPECT_EQ(0, poll_completions(cq_.get(), 1, wc));
    return wc.empty() ? IBV_WC_GENERAL_ERR : wc[0].status;
  }

  ibv_device_attr_ex attr_{};
  PdPtr pd_;
  CqPtr cq_;
  QpPtr a_, b_;
  size_t page_ = 4096;
};

// What a device that reports ODP must take: RC's operations on it.
TEST_F(OnDemandMemory, CapabilitiesAreConsistentPerTransport) {
  const auto& t = attr_.odp_caps.per_transport_caps;
  EXPECT_NE(0u, t.rc_odp_caps & (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV));
  // UC has neither READ nor atomics, UD only SEND (IBTA 9.8.2, 9.8.3).
  EXPECT_EQ(0u, t.uc_odp_caps & (IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC));
  EXPECT_EQ(0u, t.ud_odp_caps & (IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
                                 IBV_ODP_SUPPORT_ATOMIC));
}

// Nothing is mapped at registration; the HCA's access brings the pages in,
// and an access to a page that is gone is an access error, not a signal.
TEST_F(OnDemandMemory, ExplicitMrFaultsPagesInAndFailsOnHoles) {
  const size_t length = 16 * page_;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(MAP_FAILED, p);
  auto* bytes = static_cast<uint8_t*>(p);
  MrPtr mr(ibv_reg_mr(pd_.get(), p, length, kAllAccess | IBV_ACCESS_ON_DEMAND));
  ASSERT_TRUE(mr) << describe_errno(errno);
  const auto base = reinterpret_cast<uint64_t>(p);
  std::memset(bytes, 0x42, 64);
  EXPECT_EQ(IBV_WC_SUCCESS, rdma(IBV_WR_RDMA_WRITE, {base, 64, mr->lkey}, base + 9 * page_,
                                 mr->rkey));
  EXPECT_EQ(0x42, bytes[9 * page_ + 63]);
  munmap(bytes + 12 * page_, page_);
  EXPECT_EQ(IBV_WC_REM_ACCESS_ERR,
            rdma(IBV_WR_RDMA_WRITE, {base, 64, mr->lkey}, base + 12 * page_, mr->rkey));
  munmap(p, length);
}

// ibv_reg_mr(3): addr 0 and length SIZE_MAX make an implicit ODP MR that
// covers the whole address space.
TEST_F(OnDemandMemory, ImplicitMrCoversAnyAddress) {
  if (!(attr_.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT)) GTEST_SKIP() << "no implicit ODP";
  MrPtr all(ibv_reg_mr(pd_.get(), nullptr, SIZE_MAX, kAllAccess | IBV_ACCESS_ON_DEMAND));
  ASSERT_TRUE(all) << describe_errno(errno);
  std::vector<uint8_t> from(256, 0x17), to(256, 0);
  EXPECT_EQ(IBV_WC_SUCCESS,
            rdma(IBV_WR_RDMA_WRITE, {reinterpret_cast<uint64_t>(from.data()), 256, all->lkey},
                 reinterpret_cast<uint64_t>(to.data()), all->rkey));
  EXPECT_EQ(from, to);
}

// ibv_advise_mr(3): prefetch of ODP ranges, and its errors (mlx5's codes
// where the man page lists several).
TEST_F(OnDemandMemory, AdviseMrPrefetchAndItsErrors) {
  const size_t length = 4 * page_;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(MAP_FAILED, p);
  const auto base = reinterpret_cast<uint64_t>(p);
  MrPtr mr(ibv_reg_mr(pd_.get(), p, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
  MrPtr read_only(ibv_reg_mr(pd_.get(), p, length, IBV_ACCESS_ON_DEMAND));
  ASSERT_TRUE(mr && read_only) << describe_errno(errno);
  ibv_sge sge{base, static_cast<uint32_t>(length), mr->lkey};
  for (auto advice : {IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                      IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT}) {
    EXPECT_EQ(0, ibv_advise_mr(pd_.get(), advice, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1)) << advice;
    EXPECT_EQ(0, ibv_advise_mr(pd_.get(), advice, 0, &sge, 1)) << advice;
  }
  EXPECT_EQ(EINVAL, ibv_advise_mr(pd_.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 7, &sge, 1));
  EXPECT_EQ(EINVAL, ibv_advise_mr(pd_.get(), IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0));
  EXPECT_EQ(EOPNOTSUPP, ibv_advise_mr(pd_.get(), static_cast<ibv_advise_mr_advice>(77),
                                      IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
  ibv_sge not_writable{base, 64, read_only->lkey};
  EXPECT_EQ(EPERM, ibv_advise_mr(pd_.get(), IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                                 IBV_ADVISE_MR_FLAG_FLUSH, &not_writable, 1));
  ibv_sge past_the_end{base + length - 64, 128, mr->lkey};
  EXPECT_EQ(EFAULT, ibv_advise_mr(pd_.get(), IBV_ADVISE_MR_ADVICE_PREFETCH,
                                  IBV_ADVISE_MR_FLAG_FLUSH, &past_the_end, 1));
  ibv_sge unknown_key{base, 64, mr->lkey ^ 0xff00};
  EXPECT_EQ(ENOENT, ibv_advise_mr(pd_.get(), IBV_ADVISE_MR_ADVICE_PREFETCH,
                                  IBV_ADVISE_MR_FLAG_FLUSH, &unknown_key, 1));
  munmap(p, length);
  EXPECT_EQ(EFAULT, ibv_advise_mr(pd_.get(), IBV_ADVISE_MR_ADVICE_PREFETCH,
                                  IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1));
}

}  // namespace
}  // namespace softverbs::conformance
