// Frames between QPs of one engine delivered by the sending thread, with no
// frame on the wire; and every frame on the wire again under a fault plan.
#include <thread>

#include "emulator/same_host/local_delivery.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

class LocalDeliveryTest : public Transport {
 protected:
  void SetUp() override {
    local_delivery_ = true;
    Transport::SetUp();
  }

  static Errno post_send_of(Endpoint& from, uint32_t offset, uint32_t length, uint64_t wr_id) {
    Sge s = sge(from, offset, length);
    return from.qp->post_send(send_of(wr_id, s));
  }
  static Errno post_recv_into(Endpoint& to, uint32_t offset, uint32_t length, uint64_t wr_id) {
    Sge s = sge(to, offset, length);
    return to.qp->post_recv({wr_id, {&s, 1}});
  }
  // Takes one completion without driving the engine: a local delivery is
  // done by the time the verb that sent it returns.
  static bool take(Cq& cq, Completion& out) { return cq.poll(std::span<Completion>(&out, 1)) == 1; }
};

TEST_F(LocalDeliveryTest, ASendIsDeliveredAndAcknowledgedBeforePostSendReturns) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 100, 200);
  fill(a.buffer, 3);
  ASSERT_EQ(post_recv_into(b, 0, 4096, 7), 0);
  const EngineCounters before = engine_->counters();
  ASSERT_EQ(post_send_of(a, 0, 2500, 9), 0);

  Completion c;
  ASSERT_TRUE(take(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.byte_len, 2500u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 2500, b.buffer.begin()));
  ASSERT_TRUE(take(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.wr_id, 9u);
  // Nothing touched the wire; the engine counted the 10 segments at a
  // 256-byte MTU and the ACKs (one per segment at most) both ways.
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(wire_->queued(), 0u);
  const EngineCounters after = engine_->counters();
  EXPECT_GE(after.frames_sent - before.frames_sent, 11u);
  EXPECT_EQ(after.frames_sent - before.frames_sent, after.frames_received - before.frames_received);
}

TEST_F(LocalDeliveryTest, AMessageOfManyChunksOfFramesArrivesIntact) {
  // 300 KiB at a 256-byte MTU: 1200 segments, more frames than one pass
  // of kept frames holds in its first chunk.
  const uint32_t bytes = 300 * 1024;
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 0xfffff0, 5);
  fill(a.buffer, 41);
  ASSERT_EQ(post_recv_into(b, 0, bytes, 1), 0);
  ASSERT_EQ(post_send_of(a, 0, bytes, 2), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, bytes);
  EXPECT_TRUE(a.buffer == b.buffer);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(sent_.empty());
}

TEST_F(LocalDeliveryTest, AnRnrNakBacksOffAndTheRetryArrivesOnceAReceiveIsPosted) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 1, 2);
  fill(a.buffer, 9);
  ASSERT_EQ(post_send_of(a, 0, 64, 5), 0);
  Completion c;
  EXPECT_FALSE(take(*a.send_cq, c));  // RNR NAKed: waits for its timer
  EXPECT_EQ(a.qp->counters().rnr_naks_received, 1u);
  ASSERT_EQ(post_recv_into(b, 0, 4096, 6), 0);
  advance(1'000'000'000);  // past any RNR timer: the retry is delivered
  ASSERT_TRUE(take(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 64, b.buffer.begin()));
  ASSERT_TRUE(take(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 5u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(sent_.empty());
}

// Each thread streams on a pair of its own; they share the engine, its QP
// table and the kept-frame machinery, nothing else (ThreadSanitizer checks
// the locks in the sanitizer tree).
TEST_F(LocalDeliveryTest, ThreadsWithPairsOfTheirOwnExchangeIntactMessages) {
  constexpr int kThreads = 3, kMessages = 2000;
  std::vector<Endpoint> senders, receivers;
  for (int t = 0; t < kThreads; ++t) {
    senders.push_back(make_endpoint(256));
    receivers.push_back(make_endpoint(256));
    connect(senders.back(), receivers.back(), 10u * t, 20u * t);
  }
  std::vector<int> intact(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Endpoint& a = senders[t];
      Endpoint& b = receivers[t];
      for (int m = 0; m < kMessages; ++m) {
        const uint8_t stamp = static_cast<uint8_t>(m * 13 + t);
        std::fill(a.buffer.begin(), a.buffer.end(), stamp);
        if (post_recv_into(b, 0, 256, m) != 0 || post_send_of(a, 0, 200, m) != 0) return;
        Completion c;
        if (!take(*b.recv_cq, c) || c.status != WcStatus::kSuccess) return;
        if (c.wr_id != uint64_t(m)) return;
        if (!take(*a.send_cq, c) || c.status != WcStatus::kSuccess) return;
        if (std::count(b.buffer.begin(), b.buffer.begin() + 200, stamp) == 200) ++intact[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(intact[t], kMessages) << "thread " << t;
  EXPECT_TRUE(sent_.empty());
}

class LocalDeliveryUnderFaultPlan : public LocalDeliveryTest {
 protected:
  void SetUp() override {
    fault_plan_ = "drop:qp=0xfffff0";  // a rule that matches no QP here
    LocalDeliveryTest::SetUp();
  }
};

TEST_F(LocalDeliveryUnderFaultPlan, EveryFrameTakesTheWireWhereTheRulesSeeIt) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 100, 200);
  ASSERT_EQ(post_recv_into(b, 0, 4096, 1), 0);
  ASSERT_EQ(post_send_of(a, 0, 600, 2), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(count_opcode(Opcode::kRcSendFirst), 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcSendMiddle), 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcSendLast), 1u);
}

}  // namespace
}  // namespace softverbs
