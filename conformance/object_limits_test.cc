// The device's object limits are real (ibv_query_device(3): max_pd, max_cq,
// max_qp, max_mr, max_srq, max_ah): creating objects up to the limit works,
// one more fails with ENOMEM (an HCA whose resource tables are full) and
// crashes nothing, and destroying one makes room for one again.
//
// Exhausting a device takes as many creations as its limit, so a limit above
// kQuickLimit is skipped; on softverbs, SOFTVERBS_MAX_PD, _CQ, _QP, _MR, _SRQ
// and _AH lower the limits (ctest runs these tests so, as
// conformance_object_limits). Every test opens its own context and expects
// nothing else of the device to be held by this process.
#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/device.h"

namespace softverbs::conformance {
namespace {

constexpr int kQuickLimit = 4096;

std::string too_many(int limit, const char* name) {
  return std::string(name) + " = " + std::to_string(limit) +
         ": too many to create in a test (on softverbs, SOFTVERBS_MAX_* lower it)";
}

struct SrqDestroyer {
  void operator()(ibv_srq* srq) const { ibv_destroy_srq(srq); }
};
struct AhDestroyer {
  void operator()(ibv_ah* ah) const { ibv_destroy_ah(ah); }
};

// Creates objects with `create` (nullptr and errno on failure) until it
// fails: exactly `limit` succeed and the next is ENOMEM. Then one destroyed
// makes room for exactly one more.
template <class Ptr>
void expect_limit_enforced(int limit, const std::function<Ptr()>& create) {
  std::vector<Ptr> made;
  made.reserve(static_cast<size_t>(limit));
  for (int i = 0; i < limit; ++i) {
    Ptr object = create();
    ASSERT_TRUE(object) << "object " << i << " of " << limit << ": " << describe_errno(errno);
    made.push_back(std::move(object));
  }
  errno = 0;
  Ptr extra = create();
  EXPECT_FALSE(extra) << "one past the limit of " << limit << " was created";
  EXPECT_EQ(ENOMEM, errno) << describe_errno(errno);
  made.pop_back();
  Ptr again = create();
  EXPECT_TRUE(again) << "no room after destroying one: " << describe_errno(errno);
  errno = 0;
  EXPECT_FALSE(create()) << "the limit moved";
  EXPECT_EQ(ENOMEM, errno) << describe_errno(errno);
}

class ObjectLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    Errno err = 0;
    context_ = open_test_device(err);
    ASSERT_TRUE(context_) << describe_errno(err);
    ASSERT_EQ(0, ibv_query_device(context_.get(), &attr_));
  }
  PdPtr alloc_pd() { return PdPtr(ibv_alloc_pd(context_.get())); }
  CqPtr create_cq() { return CqPtr(ibv_create_cq(context_.get(), 1, nullptr, nullptr, 0)); }

  ContextPtr context_;
  ibv_device_attr attr_{};
};

TEST_F(ObjectLimits, PdsPastMaxPdAreEnomem) {
  if (attr_.max_pd > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_pd, "max_pd");
  expect_limit_enforced<PdPtr>(attr_.max_pd, [&] { return alloc_pd(); });
}

TEST_F(ObjectLimits, CqsPastMaxCqAreEnomem) {
  if (attr_.max_cq > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_cq, "max_cq");
  expect_limit_enforced<CqPtr>(attr_.max_cq, [&] { return create_cq(); });
}

TEST_F(ObjectLimits, MrsPastMaxMrAreEnomem) {
  if (attr_.max_mr > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_mr, "max_mr");
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  std::vector<uint8_t> bytes(4096);
  expect_limit_enforced<MrPtr>(attr_.max_mr, [&] {
    return MrPtr(ibv_reg_mr(pd.get(), bytes.data(), bytes.size(), IBV_ACCESS_LOCAL_WRITE));
  });
}

TEST_F(ObjectLimits, QpsPastMaxQpAreEnomem) {
  if (attr_.max_qp > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_qp, "max_qp");
  PdPtr pd = alloc_pd();
  CqPtr cq = create_cq();
  ASSERT_TRUE(pd && cq);
  expect_limit_enforced<QpPtr>(attr_.max_qp, [&] {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq.get();
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    return QpPtr(ibv_create_qp(pd.get(), &init));
  });
}

TEST_F(ObjectLimits, SrqsPastMaxSrqAreEnomem) {
  if (attr_.max_srq > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_srq, "max_srq");
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  using SrqPtr = std::unique_ptr<ibv_srq, SrqDestroyer>;
  expect_limit_enforced<SrqPtr>(attr_.max_srq, [&] {
    ibv_srq_init_attr init{};
    init.attr.max_wr = 1;
    init.attr.max_sge = 1;
    return SrqPtr(ibv_create_srq(pd.get(), &init));
  });
}

TEST_F(ObjectLimits, AhsPastMaxAhAreEnomem) {
  if (attr_.max_ah > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_ah, "max_ah");
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  PortAddress port;
  ASSERT_EQ(0, query_test_port_address(context_.get(), port));
  QpEndpoint self;
  self.lid = port.lid;
  std::copy(std::begin(port.gid.raw), std::end(port.gid.raw), self.gid);
  ibv_ah_attr attr = address_vector_to(port, self);
  using AhPtr = std::unique_ptr<ibv_ah, AhDestroyer>;
  expect_limit_enforced<AhPtr>(attr_.max_ah, [&] { return AhPtr(ibv_create_ah(pd.get(), &attr)); });
}

// The limit is the device's, not the context's: a second context of the
// same device in this process shares it, as contexts of one HCA do.
TEST_F(ObjectLimits, ContextsOfOneDeviceShareTheLimit) {
  if (attr_.max_pd > kQuickLimit) GTEST_SKIP() << too_many(attr_.max_pd, "max_pd");
  Errno err = 0;
  ContextPtr second = open_test_device(err);
  ASSERT_TRUE(second) << describe_errno(err);
  std::vector<PdPtr> here;
  for (int i = 0; i + 1 < attr_.max_pd; ++i) {
    here.emplace_back(alloc_pd());
    ASSERT_TRUE(here.back()) << describe_errno(errno);
  }
  PdPtr last(ibv_alloc_pd(second.get()));
  ASSERT_TRUE(last) << "the last PD, in the second context: " << describe_errno(errno);
  errno = 0;
  EXPECT_FALSE(PdPtr(ibv_alloc_pd(second.get())));
  EXPECT_EQ(ENOMEM, errno) << describe_errno(errno);
  errno = 0;
  EXPECT_FALSE(alloc_pd());
  EXPECT_EQ(ENOMEM, errno) << describe_errno(errno);
}

}  // namespace
}  // namespace softverbs::conformance
