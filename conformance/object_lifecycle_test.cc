// Object lifecycle: ibv_alloc_pd(3), ibv_reg_mr(3), ibv_create_cq(3),
// ibv_create_qp(3) and their destroy verbs. The IBTA verbs refuse to destroy
// a resource that another one still refers to.
#include <algorithm>
#include <array>
#include <cerrno>
#include <string>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/registered_buffer.h"

namespace softverbs::conformance {
namespace {

enum class Object { kPd, kCq, kMr, kQp };

const char* name_of(Object object) {
  switch (object) {
    case Object::kPd: return "PD";
    case Object::kCq: return "CQ";
    case Object::kMr: return "MR";
    case Object::kQp: return "QP";
  }
  return "?";
}

std::string describe(const std::array<Object, 4>& order) {
  std::string text;
  for (Object o : order) text += std::string(text.empty() ? "" : ",") + name_of(o);
  return text;
}

size_t position(const std::array<Object, 4>& order, Object object) {
  return static_cast<size_t>(std::find(order.begin(), order.end(), object) - order.begin());
}

// Every permutation of the four objects in which each `before` precedes its
// `after`.
std::vector<std::array<Object, 4>> orders_where(
    const std::vector<std::pair<Object, Object>>& before_after) {
  std::array<Object, 4> order = {Object::kPd, Object::kCq, Object::kMr, Object::kQp};
  std::sort(order.begin(), order.end());
  std::vector<std::array<Object, 4>> result;
  do {
    bool legal = std::all_of(before_after.begin(), before_after.end(), [&](const auto& rule) {
      return position(order, rule.first) < position(order, rule.second);
    });
    if (legal) result.push_back(order);
  } while (std::next_permutation(order.begin(), order.end()));
  return result;
}

class ObjectLifecycle : public DeviceTest {};

// ibv_dealloc_pd(3), ibv_destroy_cq(3), ibv_destroy_qp(3), ibv_dereg_mr(3):
// any creation order that has the parents first and any destruction order
// that has the children first succeeds, every verb returning 0.
TEST_F(ObjectLifecycle, CreateAndDestroyInEveryLegalOrder) {
  const auto create_orders = orders_where(
      {{Object::kPd, Object::kMr}, {Object::kPd, Object::kQp}, {Object::kCq, Object::kQp}});
  const auto destroy_orders = orders_where(
      {{Object::kMr, Object::kPd}, {Object::kQp, Object::kPd}, {Object::kQp, Object::kCq}});
  ASSERT_FALSE(create_orders.empty());
  ASSERT_FALSE(destroy_orders.empty());
  std::vector<uint8_t> memory(8192);

  for (const auto& create_order : create_orders) {
    for (const auto& destroy_order : destroy_orders) {
      SCOPED_TRACE("create " + describe(create_order) + " / destroy " + describe(destroy_order));
      ibv_pd* pd = nullptr;
      ibv_cq* cq = nullptr;
      ibv_mr* mr = nullptr;
      ibv_qp* qp = nullptr;
      for (Object object : create_order) {
        switch (object) {
          case Object::kPd: pd = ibv_alloc_pd(context()); ASSERT_NE(nullptr, pd); break;
          case Object::kCq:
            cq = ibv_create_cq(context(), 16, nullptr, nullptr, 0);
            ASSERT_NE(nullptr, cq);
            break;
          case Object::kMr:
            mr = ibv_reg_mr(pd, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE);
            ASSERT_NE(nullptr, mr);
            break;
          case Object::kQp: {
            ibv_qp_init_attr init{};
            init.send_cq = cq;
            init.recv_cq = cq;
            init.cap = small_qp_cap();
            init.qp_type = IBV_QPT_RC;
            qp = ibv_create_qp(pd, &init);
            ASSERT_NE(nullptr, qp);
            break;
          }
        }
      }
      for (Object object : destroy_order) {
        switch (object) {
          case Object::kPd: EXPECT_EQ(0, ibv_dealloc_pd(pd)); break;
          case Object::kCq: EXPECT_EQ(0, ibv_destroy_cq(cq)); break;
          case Object::kMr: EXPECT_EQ(0, ibv_dereg_mr(mr)); break;
          case Object::kQp: EXPECT_EQ(0, ibv_destroy_qp(qp)); break;
        }
      }
    }
  }
}

// ibv_dealloc_pd(3): fails while an MR is associated with the PD (EBUSY),
// and the failed call leaves the PD usable.
TEST_F(ObjectLifecycle, DeallocPdWithLiveMrFailsWithEbusyAndPdStillWorks) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  std::vector<uint8_t> memory(4096);
  MrPtr mr(ibv_reg_mr(pd.get(), memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(mr);

  EXPECT_EQ(EBUSY, ibv_dealloc_pd(pd.get()));

  MrPtr second(ibv_reg_mr(pd.get(), memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE));
  EXPECT_TRUE(second) << "PD unusable after the refused dealloc: " << describe_errno(errno);
  CqPtr cq = create_cq(16);
  ASSERT_TRUE(cq);
  QpPtr qp = create_qp(pd.get(), cq.get(), cq.get());
  EXPECT_TRUE(qp) << describe_errno(last_error_);
  qp.reset();
  second.reset();
  mr.reset();
  EXPECT_EQ(0, ibv_dealloc_pd(pd.release()));
}

// ibv_dealloc_pd(3): fails while a QP is associated with the PD (EBUSY).
TEST_F(ObjectLifecycle, DeallocPdWithLiveQpFailsWithEbusyAndPdStillWorks) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  CqPtr cq = create_cq(16);
  ASSERT_TRUE(cq);
  QpPtr qp = create_qp(pd.get(), cq.get(), cq.get());
  ASSERT_TRUE(qp) << describe_errno(last_error_);

  EXPECT_EQ(EBUSY, ibv_dealloc_pd(pd.get()));

  EXPECT_EQ(0, modify_rc_to_init(qp.get(), port(), RcParameters{}))
      << "QP unusable after the refused dealloc";
  std::vector<uint8_t> memory(4096);
  MrPtr mr(ibv_reg_mr(pd.get(), memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE));
  EXPECT_TRUE(mr) << "PD unusable after the refused dealloc: " << describe_errno(errno);
  mr.reset();
  EXPECT_EQ(0, ibv_destroy_qp(qp.release()));
  EXPECT_EQ(0, ibv_dealloc_pd(pd.release()));
}

// ibv_destroy_cq(3): "fails if any queue pair is still associated with this
// CQ" (EBUSY); the CQ stays usable.
TEST_F(ObjectLifecycle, DestroyCqUsedByQpFailsWithEbusy) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  CqPtr send_cq = create_cq(16);
  CqPtr recv_cq = create_cq(16);
  ASSERT_TRUE(send_cq && recv_cq);
  QpPtr qp = create_qp(pd.get(), send_cq.get(), recv_cq.get());
  ASSERT_TRUE(qp) << describe_errno(last_error_);

  EXPECT_EQ(EBUSY, ibv_destroy_cq(send_cq.get()));
  EXPECT_EQ(EBUSY, ibv_destroy_cq(recv_cq.get()));

  ibv_wc wc{};
  EXPECT_EQ(0, ibv_poll_cq(send_cq.get(), 1, &wc)) << "CQ unusable after the refused destroy";
  EXPECT_EQ(0, ibv_destroy_qp(qp.release()));
  EXPECT_EQ(0, ibv_destroy_cq(send_cq.release()));
  EXPECT_EQ(0, ibv_destroy_cq(recv_cq.release()));
}

// ibv_reg_mr(3) and the IBTA's memory access rules: Remote Write or Remote
// Atomic access requires Local Write; asking for it without is EINVAL.
TEST_F(ObjectLifecycle, RemoteWriteOrAtomicWithoutLocalWriteIsEinval) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  std::vector<uint8_t> memory(4096);
  const int refused[] = {IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
                         IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ};
  for (int access : refused) {
    SCOPED_TRACE("access=0x" + std::to_string(access));
    errno = 0;
    MrPtr mr(ibv_reg_mr(pd.get(), memory.data(), memory.size(), access));
    EXPECT_FALSE(mr);
    EXPECT_EQ(EINVAL, errno) << describe_errno(errno);
  }
  // The legal combinations around them register.
  const int accepted[] = {0, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ};
  for (int access : accepted) {
    SCOPED_TRACE("access=0x" + std::to_string(access));
    MrPtr mr(ibv_reg_mr(pd.get(), memory.data(), memory.size(), access));
    EXPECT_TRUE(mr) << describe_errno(errno);
  }
}

// ibv_reg_mr(3): the MR describes the registered range (addr, length, pd,
// context as passed) and each registration gets its own keys.
TEST_F(ObjectLifecycle, RegMrReportsTheRangeAsPassedAndDistinctKeys) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  std::vector<uint8_t> memory(3 * 4096 + 123);
  uint8_t* start = memory.data() + 17;  // deliberately not page aligned
  const size_t length = memory.size() - 17 - 5;
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  MrPtr first(ibv_reg_mr(pd.get(), start, length, access));
  ASSERT_TRUE(first) << describe_errno(errno);
  EXPECT_EQ(static_cast<void*>(start), first->addr);
  EXPECT_EQ(length, first->length);
  EXPECT_EQ(pd.get(), first->pd);
  EXPECT_EQ(context(), first->context);

  // The same range registered twice is two MRs with two sets of keys.
  MrPtr second(ibv_reg_mr(pd.get(), start, length, access));
  ASSERT_TRUE(second) << describe_errno(errno);
  EXPECT_NE(first->lkey, second->lkey);
  EXPECT_NE(first->rkey, second->rkey);
}

// ibv_create_cq(3): cqe must be at least 1 and at most max_cqe (EINVAL);
// the CQ granted holds at least what was asked.
TEST_F(ObjectLifecycle, CreateCqRejectsZeroAndAboveMaxCqe) {
  CqPtr zero = create_cq(0);
  EXPECT_FALSE(zero);
  EXPECT_EQ(EINVAL, last_error_) << describe_errno(last_error_);

  CqPtr too_big = create_cq(device_attr().max_cqe + 1);
  EXPECT_FALSE(too_big);
  EXPECT_EQ(EINVAL, last_error_) << describe_errno(last_error_);

  CqPtr fine = create_cq(100);
  ASSERT_TRUE(fine) << describe_errno(last_error_);
  EXPECT_GE(fine->cqe, 100);
}

// ibv_create_qp(3): capabilities above the device's limits (max_qp_wr,
// max_sge) are refused with EINVAL.
TEST_F(ObjectLifecycle, CreateQpRejectsCapabilitiesAboveDeviceLimits) {
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  CqPtr cq = create_cq(16);
  ASSERT_TRUE(cq);
  const uint32_t max_wr = static_cast<uint32_t>(device_attr().max_qp_wr);
  const uint32_t max_sge = static_cast<uint32_t>(device_attr().max_sge);
  struct Case {
    const char* what;
    ibv_qp_cap cap;
  };
  const Case cases[] = {
      {"max_send_wr = max_qp_wr + 1", {max_wr + 1, 1, 1, 1, 0}},
      {"max_recv_wr = max_qp_wr + 1", {1, max_wr + 1, 1, 1, 0}},
      {"max_send_sge = max_sge + 1", {1, 1, max_sge + 1, 1, 0}},
      {"max_recv_sge = max_sge + 1", {1, 1, 1, max_sge + 1, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    QpPtr qp = create_qp(pd.get(), cq.get(), cq.get(), c.cap);
    EXPECT_FALSE(qp);
    EXPECT_EQ(EINVAL, last_error_) << describe_errno(last_error_);
  }
  // Each limit on its own is granted (together they may exceed a device's
  // WQE size, which the verbs allow it to refuse).
  ibv_qp_cap granted{};
  QpPtr deep = create_qp(pd.get(), cq.get(), cq.get(), {max_wr, max_wr, 1, 1, 0}, false, &granted);
  EXPECT_TRUE(deep) << "max_send_wr = max_recv_wr = max_qp_wr: " << describe_errno(last_error_);
  if (deep) {
    EXPECT_GE(granted.max_send_wr, max_wr);
  }
  QpPtr wide = create_qp(pd.get(), cq.get(), cq.get(), {1, 1, max_sge, max_sge, 0}, false, &granted);
  EXPECT_TRUE(wide) << "max_send_sge = max_recv_sge = max_sge: " << describe_errno(last_error_);
  if (wide) {
    EXPECT_GE(granted.max_send_sge, max_sge);
  }
}

}  // namespace
}  // namespace softverbs::conformance
