// Receiver Not Ready between two processes (IBTA 9.7.5.2.8, C9-150..152;
// ibv_modify_qp(3) rnr_retry and min_rnr_timer): a SEND that finds no
// receive WQE is answered with an RNR NAK carrying the responder's
// min_rnr_timer; the requester waits that long and tries again, rnr_retry
// times (7 = for ever), then completes the WR with
// IBV_WC_RNR_RETRY_EXC_ERR. The responder is not harmed by any of it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

// IBTA table 45: code 1 is 0.01 ms, code 14 is 1.28 ms.
constexpr uint8_t kShortestRnrTimer = 1;
constexpr uint8_t kRnrTimer1ms = 14;
constexpr uint8_t kInfiniteRnrRetry = 7;
// Long enough that a send which could complete would have; nothing is
// asserted about time.
constexpr auto kQuietPeriod = 200ms;

PairOptions rnr_options(uint8_t rnr_retry, uint8_t min_rnr_timer) {
  RcParameters params;
  params.rnr_retry = rnr_retry;
  params.min_rnr_timer = min_rnr_timer;
  return symmetric_options(params);
}

SendSpec send_of(uint64_t wr_id, uint32_t length, uint64_t local_offset = 0) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.length = length;
  spec.local_offset = local_offset;
  return spec;
}

class RnrRetryExhausted : public ::testing::TestWithParam<int> {};

// rnr_retry = N (0..6): the SEND is tried N + 1 times, then completes with
// IBV_WC_RNR_RETRY_EXC_ERR and the requester's QP enters ERR. On softverbs
// the counters show exactly N + 1 RNR NAKs.
TEST_P(RnrRetryExhausted, SendWithNoReceivePostedEndsInRnrRetryExcErr) {
  const auto rnr_retry = static_cast<uint8_t>(GetParam());
  with_connected_pair(rnr_options(rnr_retry, kShortestRnrTimer),
                      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    local.fill(0, 64, 1);
    ASSERT_EQ(0, local.post_send(send_of(1, 64)));
    ASSERT_EQ(0, local.post_send(send_of(2, 64)));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent)) << "got " << sent.size() << " of 2";
    expect_completion(sent[0], 1, IBV_WC_RNR_RETRY_EXC_ERR, "the SEND nobody receives");
    expect_completion(sent[1], 2, IBV_WC_WR_FLUSH_ERR, "the SEND behind it");
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());
    EXPECT_EQ(IBV_QPS_RTS, remote.state()) << "RNR is no error of the responder";

    if (soft_control_available()) {
      std::string stats;
      ASSERT_EQ(0, soft_control("stats", stats));
      EXPECT_EQ(uint64_t{rnr_retry} + 1u,
                qp_counter(stats, local.qp()->qp_num, "rnr_naks_received").value_or(0))
          << stats;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(RnrRetryCounts, RnrRetryExhausted, ::testing::Range(0, 7),
                         [](const auto& info) { return "rnr_retry_" + std::to_string(info.param); });

// rnr_retry = 7 means "retry for ever" (IBTA 9.7.5.2.8): the SEND waits
// while the peer has no receive posted, and completes once it posts one.
TEST(RnrRetry, InfiniteRnrRetrySendCompletesOnceThePeerPostsAReceive) {
  with_connected_pair(rnr_options(kInfiniteRnrRetry, kRnrTimer1ms),
                      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    local.fill(0, 3000, 77);
    ASSERT_EQ(0, local.post_send(send_of(1, 3000)));
    std::vector<ibv_wc> sent;
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, sent, kQuietPeriod))
        << "completed with no receive posted: " << describe_completion(sent[0]);

    ASSERT_EQ(0, remote.post_recv({40, 0, 4096})) << remote.why();
    sent.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "the SEND after the late receive");
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 40, IBV_WC_SUCCESS, "the late receive");
    EXPECT_EQ(3000u, received[0].byte_len);
    std::optional<ByteMismatch> wrong;
    ASSERT_EQ(0, remote.check(0, 3000, 77, wrong)) << remote.why();
    EXPECT_FALSE(wrong) << describe_mismatch(*wrong);

    if (soft_control_available()) {
      std::string stats;
      ASSERT_EQ(0, soft_control("stats", stats));
      EXPECT_LE(1u, qp_counter(stats, local.qp()->qp_num, "rnr_naks_received").value_or(0))
          << "the SEND was never refused, so this did not test RNR retry:\n" << stats;
    }
  });
}

// Forced RNR (softverbs control "rnr all" in the responder's process)
// refuses SENDs as if no receive were posted: with a finite rnr_retry the
// SEND ends in IBV_WC_RNR_RETRY_EXC_ERR although a receive is posted, and
// that receive is left untouched.
TEST(RnrRetry, ForcedRnrExhaustsRnrRetryThoughAReceiveIsPosted) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  with_connected_pair(rnr_options(2, kShortestRnrTimer),
                      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo& info) {
    ASSERT_EQ(0, remote.post_recv({40, 0, 4096})) << remote.why();
    std::string reply;
    ASSERT_EQ(0, remote.control("rnr all", reply)) << reply << remote.why();
    ASSERT_EQ(0, local.post_send(send_of(1, 64)));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_RNR_RETRY_EXC_ERR, "the SEND under forced RNR");
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());

    ASSERT_EQ(0, remote.control("rnr off", reply)) << reply << remote.why();
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 0, received)) << remote.why();
    EXPECT_TRUE(received.empty()) << "the posted receive was used: "
                                  << describe_completion(received[0]);
    EXPECT_EQ(IBV_QPS_RTS, remote.state());
    std::string stats;
    ASSERT_EQ(0, remote.control("stats", stats)) << remote.why();
    EXPECT_EQ(3u, qp_counter(stats, info.qp.qpn, "forced_rnr_naks").value_or(0)) << stats;
  });
}

// rnr_retry bounds the RNR NAKs of one stall: forward progress restores it
// (rxe and HCAs reset it with retry_cnt when an ACK moves on). With
// rnr_retry = 1, two SENDs that each meet one RNR NAK both complete. The
// RNR NAKs come from a fault plan's rnr rule in the responder's process
// (docs/faults.md), one per SEND.
TEST(RnrRetry, TheBudgetIsRestoredByEachMessageThatCompletes) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  with_connected_pair(rnr_options(1, kShortestRnrTimer),
                      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo& info) {
    std::string reply;
    for (uint64_t k = 1; k <= 3; ++k) {
      ASSERT_EQ(0, remote.post_recv({40 + k, 0, 4096})) << remote.why();
      // A new plan counts its nth afresh: the next SEND meets one RNR NAK.
      ASSERT_EQ(0, remote.control("fault set rnr:nth=1", reply)) << reply << remote.why();
      ASSERT_EQ(0, local.post_send(send_of(k, 64)));
      std::vector<ibv_wc> sent;
      ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
      expect_completion(sent[0], k, IBV_WC_SUCCESS, "a SEND refused once");
      std::vector<ibv_wc> received;
      ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
      expect_completion(received[0], 40 + k, IBV_WC_SUCCESS, "its receive");
    }
    remote.control("fault clear", reply);
    std::string stats;
    ASSERT_EQ(0, remote.control("stats", stats)) << remote.why();
    EXPECT_EQ(3u, qp_counter(stats, info.qp.qpn, "forced_rnr_naks").value_or(0)) << stats;
  });
}

// With rnr_retry = 7 a forced RNR only delays the SEND: once the responder's
// process turns it off ("rnr off"), the SEND lands in the posted receive.
TEST(RnrRetry, SendHeldByForcedRnrCompletesWhenRnrIsTurnedOff) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  with_connected_pair(rnr_options(kInfiniteRnrRetry, kRnrTimer1ms),
                      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    ASSERT_EQ(0, remote.post_recv({40, 0, 4096})) << remote.why();
    std::string reply;
    ASSERT_EQ(0, remote.control("rnr all", reply)) << reply << remote.why();
    local.fill(0, 512, 5);
    ASSERT_EQ(0, local.post_send(send_of(1, 512)));
    std::vector<ibv_wc> sent;
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, sent, kQuietPeriod))
        << "completed under forced RNR: " << describe_completion(sent[0]);

    ASSERT_EQ(0, remote.control("rnr off", reply)) << reply << remote.why();
    sent.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "the SEND after rnr off");
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 40, IBV_WC_SUCCESS, "the posted receive");
    EXPECT_EQ(512u, received[0].byte_len);
    std::optional<ByteMismatch> wrong;
    ASSERT_EQ(0, remote.check(0, 512, 5, wrong)) << remote.why();
    EXPECT_FALSE(wrong) << describe_mismatch(*wrong);
  });
}

}  // namespace
}  // namespace softverbs::conformance
