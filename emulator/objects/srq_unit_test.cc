// The SRQ on its own: the order WQEs are taken in, a WQE given back comes
// first again, the limit event fires once per arming, and Modify SRQ's rules.
#include <gtest/gtest.h>

#include <vector>

#include "emulator/objects/hca_impl.h"
#include "emulator/objects/srq_impl.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

class EventLog final : public AsyncEventSink {
 public:
  void on_async_event(const AsyncEvent& event) override { events.push_back(event); }
  std::vector<AsyncEvent> events;
};

class SrqUnit : public Transport {
 protected:
  std::unique_ptr<Srq> make_srq(uint32_t max_wr) {
    pd_ = hca_->alloc_pd(err_);
    Hca::SrqInit init{max_wr, 2, 7};
    auto srq = hca_->create_srq(*pd_, init, err_);
    EXPECT_EQ(0u, init.limit) << "the limit given at creation is ignored";
    return srq;
  }
  Errno post(Srq& srq, uint64_t wr_id) {
    const Sge sge{0x1000, 64, 1};
    return srq.post_recv(RecvRequest{wr_id, std::span<const Sge>(&sge, 1)});
  }
  uint64_t take(Srq& srq) {
    ReceiveWqeRef wqe;
    if (!srq.impl().take(wqe, sges_)) return 0;
    return wqe.wr_id;
  }

  Errno err_ = 0;
  std::unique_ptr<Pd> pd_;
  std::vector<Sge> sges_ = std::vector<Sge>(2);
};

TEST_F(SrqUnit, WqesAreTakenInOrderAndOneGivenBackComesFirst) {
  auto srq = make_srq(4);
  ASSERT_TRUE(srq);
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_EQ(0, post(*srq, id));
  EXPECT_EQ(ENOMEM, post(*srq, 5));
  EXPECT_EQ(1u, take(*srq));
  ReceiveWqeRef second;
  ASSERT_TRUE(srq->impl().take(second, sges_));
  EXPECT_EQ(2u, second.wr_id);
  EXPECT_EQ(64u, second.length);
  srq->impl().give_back(second);
  EXPECT_EQ(2u, take(*srq));
  EXPECT_EQ(3u, take(*srq));
  EXPECT_EQ(4u, take(*srq));
  EXPECT_EQ(0u, take(*srq)) << "empty";
}

TEST_F(SrqUnit, TheLimitEventFiresOncePerArming) {
  EventLog log;
  hca_->set_async_event_sink(&log);
  auto srq = make_srq(8);
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_EQ(0, post(*srq, id));
  const uint32_t limit = 5;
  ASSERT_EQ(0, srq->modify(nullptr, &limit));
  take(*srq);  // 5 left: not below 5
  EXPECT_TRUE(log.events.empty());
  take(*srq);  // 4 left
  ASSERT_EQ(1u, log.events.size());
  EXPECT_EQ(AsyncEventType::kSrqLimitReached, log.events[0].type);
  EXPECT_EQ(srq.get(), log.events[0].srq);
  EXPECT_EQ(0u, srq->query().limit);
  take(*srq);
  EXPECT_EQ(1u, log.events.size()) << "disarmed until armed again";
  hca_->set_async_event_sink(nullptr);
}

TEST_F(SrqUnit, ModifyRefusesSizesThatDoNotFit) {
  auto srq = make_srq(8);
  for (uint64_t id = 1; id <= 6; ++id) ASSERT_EQ(0, post(*srq, id));
  uint32_t max_wr = 5, limit = 9;
  EXPECT_EQ(EINVAL, srq->modify(&max_wr, nullptr)) << "below the WQEs posted";
  EXPECT_EQ(EINVAL, srq->modify(nullptr, &limit)) << "a limit above max_wr";
  limit = 7;
  ASSERT_EQ(0, srq->modify(nullptr, &limit));
  max_wr = 6;
  EXPECT_EQ(EINVAL, srq->modify(&max_wr, nullptr)) << "below the armed limit";
  max_wr = 32;
  ASSERT_EQ(0, srq->modify(&max_wr, nullptr));
  EXPECT_EQ(32u, srq->query().max_wr);
  for (uint64_t id = 7; id <= 32; ++id) ASSERT_EQ(0, post(*srq, id));
  for (uint64_t id = 1; id <= 32; ++id) ASSERT_EQ(id, take(*srq));
}

}  // namespace
}  // namespace softverbs
