// Thread domains and parent domains (ibv_alloc_td(3),
// ibv_alloc_parent_domain(3)): a parent domain stands for its PD wherever a
// PD goes and holds its PD and TD while it lives; QPs, CQs and SRQs made on
// it take their memory from its allocators (with IBV_ALLOCATOR_USE_DEFAULT
// meaning the provider's own, and NULL a failed create) and give it back at
// destroy; and a QP and CQs on one carry traffic between two processes.
// Skipped on devices without parent domains (EOPNOTSUPP).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/device.h"

namespace softverbs::conformance {
namespace {

// What the application's allocator saw, for checks.
struct AllocatorLog {
  struct Call {
    void* pointer;
    size_t size;
    size_t alignment;
    uint64_t resource_type;
  };
  std::vector<Call> allocated;
  std::vector<Call> freed;
  enum class Answer { kMemory, kUseDefault, kNothing } answer = Answer::kMemory;
};

void* log_alloc(ibv_pd*, void* context, size_t size, size_t alignment, uint64_t type) {
  auto& log = *static_cast<AllocatorLog*>(context);
  void* memory = nullptr;
  if (log.answer == AllocatorLog::Answer::kUseDefault) memory = IBV_ALLOCATOR_USE_DEFAULT;
  if (log.answer == AllocatorLog::Answer::kMemory)
    memory = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  log.allocated.push_back({memory, size, alignment, type});
  return memory;
}

void log_free(ibv_pd*, void* context, void* pointer, uint64_t type) {
  static_cast<AllocatorLog*>(context)->freed.push_back({pointer, 0, 0, type});
  std::free(pointer);
}

class ParentDomain : public ::testing::Test {
 protected:
  void SetUp() override {
    Errno err = 0;
    context_ = open_test_device(err);
    ASSERT_TRUE(context_) << strerror(err);
    pd_.reset(ibv_alloc_pd(context_.get()));
    ASSERT_TRUE(pd_);
    ibv_td_init_attr attr{};
    td_.reset(ibv_alloc_td(context_.get(), &attr));
    if (!td_ && errno == EOPNOTSUPP) GTEST_SKIP() << "the device has no thread domains";
    ASSERT_TRUE(td_) << strerror(errno);
  }

  ibv_pd* parent_domain(AllocatorLog* log, ibv_td* td) {
    ibv_parent_domain_init_attr attr{};
    attr.pd = pd_.get();
    attr.td = td;
    if (log) {
      attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
      attr.alloc = log_alloc;
      attr.free = log_free;
      attr.pd_context = log;
    }
    return ibv_alloc_parent_domain(context_.get(), &attr);
  }

  ibv_cq_ex* cq_on(ibv_pd* domain) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = 16;
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    attr.parent_domain = domain;
    return ibv_create_cq_ex(context_.get(), &attr);
  }

  ibv_qp* qp_on(ibv_pd* domain, ibv_cq* cq) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap = {8, 8, 1, 1, 0};
    return ibv_create_qp(domain, &init);
  }

  ContextPtr context_;
  PdPtr pd_;
  TdPtr td_;
};

TEST_F(ParentDomain, ThreadDomainsTakeNoUnknownMask) {
  ibv_td_init_attr attr{};
  attr.comp_mask = 1;
  EXPECT_EQ(nullptr, ibv_alloc_td(context_.get(), &attr));
  EXPECT_EQ(EINVAL, errno);
}

TEST_F(ParentDomain, HoldsItsPdAndTdWhileItLives) {
  ibv_pd* domain = parent_domain(nullptr, td_.get());
  ASSERT_TRUE(domain) << strerror(errno);
  EXPECT_EQ(context_.get(), domain->context);
  EXPECT_EQ(EBUSY, ibv_dealloc_pd(pd_.get())) << "the PD of a live parent domain";
  EXPECT_EQ(EBUSY, ibv_dealloc_td(td_.get())) << "the TD of a live parent domain";
  // It stands for its PD: an MR registered through it is an MR of the PD.
  std::vector<uint8_t> memory(4096);
  ibv_mr* mr = ibv_reg_mr(domain, memory.data(), memory.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_TRUE(mr) << strerror(errno);
  EXPECT_EQ(0, ibv_dereg_mr(mr));
  EXPECT_EQ(0, ibv_dealloc_pd(domain));
  EXPECT_EQ(0, ibv_dealloc_td(td_.release()));
}

TEST_F(ParentDomain, BadArgumentsAreEinval) {
  ibv_parent_domain_init_attr attr{};
  EXPECT_EQ(nullptr, ibv_alloc_parent_domain(context_.get(), &attr)) << "no PD";
  EXPECT_EQ(EINVAL, errno);
  attr.pd = pd_.get();
  attr.comp_mask = 1u << 7;
  EXPECT_EQ(nullptr, ibv_alloc_parent_domain(context_.get(), &attr)) << "unknown comp_mask";
  EXPECT_EQ(EINVAL, errno);
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  attr.alloc = log_alloc;
  EXPECT_EQ(nullptr, ibv_alloc_parent_domain(context_.get(), &attr)) << "alloc without free";
  EXPECT_EQ(EINVAL, errno);
  // A CQ's parent_domain must be a parent domain.
  EXPECT_EQ(nullptr, cq_on(pd_.get()));
  EXPECT_EQ(EINVAL, errno);
}

TEST_F(ParentDomain, ObjectsMadeOnItLiveInItsAllocatorsMemory) {
  AllocatorLog log;
  ibv_pd* domain = parent_domain(&log, td_.get());
  ASSERT_TRUE(domain) << strerror(errno);
  ibv_cq_ex* cq = cq_on(domain);
  ASSERT_TRUE(cq) << strerror(errno);
  ibv_qp* qp = qp_on(domain, ibv_cq_ex_to_cq(cq));
  ASSERT_TRUE(qp) << strerror(errno);
  ibv_srq_init_attr srq_attr{};
  srq_attr.attr = {8, 1, 0};
  ibv_srq* srq = ibv_create_srq(domain, &srq_attr);
  ASSERT_TRUE(srq) << strerror(errno);
  EXPECT_EQ(domain, qp->pd) << "the QP reports the parent domain it was made on";

  ASSERT_EQ(3u, log.allocated.size());
  const auto inside = [](const AllocatorLog::Call& call, const void* object) {
    const auto* begin = static_cast<const uint8_t*>(call.pointer);
    const auto* at = static_cast<const uint8_t*>(object);
    return at >= begin && at < begin + call.size;
  };
  EXPECT_TRUE(inside(log.allocated[0], cq)) << "the CQ is not in the memory allocated for it";
  EXPECT_TRUE(inside(log.allocated[1], qp)) << "the QP is not in the memory allocated for it";
  EXPECT_TRUE(inside(log.allocated[2], srq)) << "the SRQ is not in the memory allocated for it";
  for (const AllocatorLog::Call& call : log.allocated) {
    EXPECT_GT(call.size, 0u);
    EXPECT_EQ(0u, reinterpret_cast<uintptr_t>(call.pointer) % call.alignment);
  }
  EXPECT_EQ(EBUSY, ibv_dealloc_pd(domain)) << "objects still live on it";

  EXPECT_EQ(0, ibv_destroy_srq(srq));
  EXPECT_EQ(0, ibv_destroy_qp(qp));
  EXPECT_EQ(0, ibv_destroy_cq(ibv_cq_ex_to_cq(cq)));
  ASSERT_EQ(3u, log.freed.size()) << "memory not given back through the domain's free";
  EXPECT_EQ(log.allocated[2].pointer, log.freed[0].pointer);
  EXPECT_EQ(log.allocated[2].resource_type, log.freed[0].resource_type);
  EXPECT_EQ(log.allocated[1].pointer, log.freed[1].pointer);
  EXPECT_EQ(log.allocated[0].pointer, log.freed[2].pointer);
  EXPECT_EQ(0, ibv_dealloc_pd(domain));
}

TEST_F(ParentDomain, UseDefaultTakesTheProvidersMemoryAndNullFailsTheCreate) {
  AllocatorLog log;
  ibv_pd* domain = parent_domain(&log, nullptr);
  ASSERT_TRUE(domain) << strerror(errno);
  log.answer = AllocatorLog::Answer::kUseDefault;
  ibv_cq_ex* cq = cq_on(domain);
  ASSERT_TRUE(cq) << strerror(errno);
  EXPECT_EQ(0, ibv_destroy_cq(ibv_cq_ex_to_cq(cq)));
  EXPECT_TRUE(log.freed.empty()) << "the provider's own memory went to the application's free";

  log.answer = AllocatorLog::Answer::kNothing;
  EXPECT_EQ(nullptr, cq_on(domain));
  EXPECT_EQ(ENOMEM, errno);
  EXPECT_EQ(0, ibv_dealloc_pd(domain)) << "a failed create left a use of the domain behind";
}

TEST(ParentDomainTraffic, AQpAndCqsOnAParentDomainCarryDataBetweenProcesses) {
  PairOptions options = symmetric_options();
  options.local.on_parent_domain = true;
  options.remote.on_parent_domain = true;
  Errno err = 0;
  {
    ContextPtr context = open_test_device(err);
    ASSERT_TRUE(context);
    ibv_td_init_attr attr{};
    TdPtr td(ibv_alloc_td(context.get(), &attr));
    if (!td) GTEST_SKIP() << "the device has no thread domains";
  }
  with_connected_pair(options, [](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    constexpr uint32_t kLength = 8192;
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_EQ(0, remote.post_recv({10 + i, i * kLength, kLength})) << remote.why();
      local.fill(i * kLength, kLength, 40 + i);
      SendSpec send;
      send.wr_id = 20 + i;
      send.local_offset = i * kLength;
      send.length = kLength;
      ASSERT_EQ(0, local.post_send(send));
    }
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, local.poll(Queue::kSend, 4, wc));
    for (uint64_t i = 0; i < 4; ++i) expect_completion(wc[i], 20 + i, IBV_WC_SUCCESS, "SEND");
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 4, received)) << remote.why();
    for (uint64_t i = 0; i < 4; ++i) {
      expect_completion(received[i], 10 + i, IBV_WC_SUCCESS, "receive");
      std::optional<ByteMismatch> mismatch;
      ASSERT_EQ(0, remote.check(i * kLength, kLength, 40 + i, mismatch)) << remote.why();
      EXPECT_FALSE(mismatch) << "message " << i;
    }
  });
}

}  // namespace
}  // namespace softverbs::conformance
