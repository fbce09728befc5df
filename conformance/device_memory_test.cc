// Device memory (ibv_alloc_dm(3)): allocation within max_dm_size, the
// copies in and out, ibv_reg_dm_mr's zero-based MRs as a local SGE and as
// an RDMA target (loopback pair here; a peer process in memory_peer_test).
// Tests skip where max_dm_size is 0.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/registered_buffer.h"

namespace softverbs::conformance {
namespace {

struct DmDeleter {
  void operator()(ibv_dm* dm) const { ibv_free_dm(dm); }
};
using DmPtr = std::unique_ptr<ibv_dm, DmDeleter>;

constexpr unsigned kDmAccess = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
                               IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

class DeviceMemory : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    ibv_device_attr_ex attr{};
    ASSERT_EQ(0, ibv_query_device_ex(context(), nullptr, &attr));
    max_ = attr.max_dm_size;
    if (max_ == 0) GTEST_SKIP() << "max_dm_size is 0: no device memory";
    pd_ = alloc_pd();
    ASSERT_TRUE(pd_);
  }
  DmPtr alloc(size_t length, uint32_t log_align = 0, uint32_t comp_mask = 0) {
    ibv_alloc_dm_attr attr{length, log_align, comp_mask};
    errno = 0;
    return DmPtr(ibv_alloc_dm(context(), &attr));
  }
  uint64_t max_ = 0;
  PdPtr pd_;
};

TEST_F(DeviceMemory, AllocationLimits) {
  EXPECT_FALSE(alloc(max_ + 1));
  EXPECT_EQ(EINVAL, errno) << "more than max_dm_size";
  EXPECT_FALSE(alloc(0));
  EXPECT_EQ(EINVAL, errno) << "zero bytes";
  EXPECT_FALSE(alloc(64, 0, 1));
  EXPECT_EQ(EINVAL, errno) << "an unknown comp_mask bit";
  // Allocations add up to at most max_dm_size, then ENOMEM.
  std::vector<DmPtr> held;
  for (uint64_t i = 0; i <= max_ / 4096 + 1; ++i) {
    DmPtr dm = alloc(4096);
    if (!dm) {
      EXPECT_EQ(ENOMEM, errno);
      break;
    }
    held.push_back(std::move(dm));
  }
  EXPECT_LE(held.size() * 4096, max_);
  EXPECT_FALSE(held.empty());
}

TEST_F(DeviceMemory, CopiesInAndOutAndTheirBounds) {
  DmPtr dm = alloc(256);
  ASSERT_TRUE(dm) << describe_errno(errno);
  std::vector<uint8_t> in(64), out(64, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 3);
  ASSERT_EQ(0, ibv_memcpy_to_dm(dm.get(), 192, in.data(), in.size()));
  ASSERT_EQ(0, ibv_memcpy_from_dm(out.data(), dm.get(), 192, out.size()));
  EXPECT_EQ(in, out);
  EXPECT_EQ(EFAULT, ibv_memcpy_to_dm(dm.get(), 224, in.data(), in.size()));
  EXPECT_EQ(EFAULT, ibv_memcpy_from_dm(out.data(), dm.get(), 256, 4));
}

// libibverbs: DM MRs are zero-based; the range must lie inside the DM; a DM
// with an MR on it is not freed (EBUSY).
TEST_F(DeviceMemory, RegistrationRules) {
  DmPtr dm = alloc(4096);
  ASSERT_TRUE(dm);
  errno = 0;
  EXPECT_EQ(nullptr, ibv_reg_dm_mr(pd_.get(), dm.get(), 0, 4096,
                                   kDmAccess & ~IBV_ACCESS_ZERO_BASED));
  EXPECT_EQ(EINVAL, errno) << "without IBV_ACCESS_ZERO_BASED";
  errno = 0;
  EXPECT_EQ(nullptr, ibv_reg_dm_mr(pd_.get(), dm.get(), 2048, 4096, kDmAccess));
  EXPECT_EQ(EINVAL, errno) << "past the end of the DM";
  MrPtr mr(ibv_reg_dm_mr(pd_.get(), dm.get(), 1024, 2048, kDmAccess));
  ASSERT_TRUE(mr) << describe_errno(errno);
  EXPECT_EQ(EBUSY, ibv_free_dm(dm.get()));
  mr.reset();
  EXPECT_EQ(0, ibv_free_dm(dm.release()));
}

// A DM MR of length 0 is registered (as mlx5 does): it covers no byte, and
// it holds its DM like any other.
TEST_F(DeviceMemory, AnMrOfLengthZeroIsRegistered) {
  DmPtr dm = alloc(4);
  ASSERT_TRUE(dm) << describe_errno(errno);
  MrPtr mr(ibv_reg_dm_mr(pd_.get(), dm.get(), 0, 0,
                         IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(mr) << describe_errno(errno);
  EXPECT_EQ(0u, mr->length);
  EXPECT_EQ(EBUSY, ibv_free_dm(dm.get()));
  mr.reset();
  EXPECT_EQ(0, ibv_free_dm(dm.release()));
}

// A DM MR is addressed from 0, as a local SGE and as an RDMA target.
TEST_F(DeviceMemory, ZeroBasedMrIsALocalSgeAndAnRdmaTarget) {
  DmPtr dm = alloc(4096);
  ASSERT_TRUE(dm);
  MrPtr dm_mr(ibv_reg_dm_mr(pd_.get(), dm.get(), 0, 4096, kDmAccess));
  ASSERT_TRUE(dm_mr) << describe_errno(errno);
  CqPtr cq = create_cq(16);
  QpPtr a = create_qp(pd_.get(), cq.get(), cq.get()), b = create_qp(pd_.get(), cq.get(), cq.get());
  ASSERT_TRUE(a && b);
  ASSERT_EQ(0, connect_pair(a.get(), b.get()));
  RegisteredBuffer host;
  ASSERT_EQ(0, host.allocate(pd_.get(), 4096, IBV_ACCESS_LOCAL_WRITE));
  for (int i = 0; i < 128; ++i) host.data()[i] = static_cast<uint8_t>(200 - i);
  auto post = [&](ibv_wr_opcode op, ibv_sge sge, uint64_t remote, uint32_t rkey) {
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(0, ibv_post_send(a.get(), &wr, &bad));
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, poll_completions(cq.get(), 1, wc));
    EXPECT_EQ(IBV_WC_SUCCESS, wc[0].status) << describe_completion(wc[0]);
  };
  post(IBV_WR_RDMA_WRITE, {host.address(), 128, host.lkey()}, 512, dm_mr->rkey);
  std::vector<uint8_t> back(128);
  ASSERT_EQ(0, ibv_memcpy_from_dm(back.data(), dm.get(), 512, back.size()));
  EXPECT_EQ(0, std::memcmp(back.data(), host.data(), 128));
  // READ the DM's bytes 512.. into host memory through the DM MR's rkey.
  post(IBV_WR_RDMA_READ, {host.address() + 1024, 128, host.lkey()}, 512, dm_mr->rkey);
  EXPECT_EQ(0, std::memcmp(host.data() + 1024, host.data(), 128));
  // And as a local SGE: WRITE from DM bytes 512.. into host memory.
  MrPtr host_remote(ibv_reg_mr(pd_.get(), host.data(), 4096,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  ASSERT_TRUE(host_remote);
  post(IBV_WR_RDMA_WRITE, {512, 128, dm_mr->lkey}, host.address() + 2048, host_remote->rkey);
  EXPECT_EQ(0, std::memcmp(host.data() + 2048, host.data(), 128));
}

}  // namespace
}  // namespace softverbs::conformance
