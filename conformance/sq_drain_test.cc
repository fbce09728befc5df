// The Send Queue Drain state between two processes (IBTA 10.3.1.4, 11.6.3;
// ibv_modify_qp(3), ibv_query_qp(3)): on RTS -> SQD the messages already
// in progress are carried to completion, those stuck behind an RNR NAK and
// the RDMA WRITEs behind them included; once the last of them has
// completed, IBV_EVENT_SQ_DRAINED is raised, once, and ibv_query_qp stops
// reporting sq_draining. A WR that had not begun when SQD was entered (or
// is posted in SQD) waits for SQD -> RTS.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr uint8_t kInfiniteRnrRetry = 7;
constexpr uint8_t kRnrTimer1ms = 14;  // IBTA table 45
constexpr auto kEventWait = 10s;
// Long enough that what could go out would have; nothing is asserted about time.
constexpr auto kQuietPeriod = 200ms;

constexpr uint32_t kSendLength = 2000;
constexpr uint32_t kWriteLength = 3000;
constexpr uint64_t kSlot = 4096;
constexpr int kWrites = 3;
constexpr uint64_t kHeldSendOffset = 8 * kSlot;  // the WR posted in SQD
constexpr uint64_t kSeed = 90;

PairOptions drain_options() {
  RcParameters params;
  params.rnr_retry = kInfiniteRnrRetry;
  params.min_rnr_timer = kRnrTimer1ms;
  PairOptions options = symmetric_options(params);
  options.local.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  return options;
}

// One SEND (wr_id 1, nobody has a receive for it yet) and kWrites RDMA
// WRITEs behind it (wr_id 2...), posted as one batch so that all of them
// are on the wire before the RNR NAK comes back.
void post_send_and_writes(Endpoint& local, const EndpointInfo& remote_info) {
  ibv_qp_ex* qpx = local.qp_ex();
  const uint32_t lkey = local.buffer().mr()->lkey;
  const uint64_t base = reinterpret_cast<uint64_t>(local.buffer().data());
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(qpx);
  ibv_wr_set_sge(qpx, lkey, base, kSendLength);
  for (int i = 1; i <= kWrites; ++i) {
    qpx->wr_id = 1 + i;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, remote_info.qp.rkey, remote_info.qp.addr + i * kSlot);
    ibv_wr_set_sge(qpx, lkey, base + i * kSlot, kWriteLength);
  }
  ASSERT_EQ(0, ibv_wr_complete(qpx));
}

ibv_qp_attr query_qp(ibv_qp* qp) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(0, ibv_query_qp(qp, &attr, IBV_QP_STATE, &init));
  return attr;
}

void expect_no_send_completion(Endpoint& local, const std::string& why) {
  std::vector<ibv_wc> sent;
  EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, sent, kQuietPeriod)) << why;
  for (const ibv_wc& wc : sent) ADD_FAILURE() << why << ": " << describe_completion(wc);
}

void expect_no_sq_drained(Endpoint& local, const std::string& why) {
  auto drained = local.wait_for_async_event(IBV_EVENT_SQ_DRAINED, kQuietPeriod, nullptr);
  EXPECT_FALSE(drained) << why;
}

// What the drain carried: the SEND (once its receive came) and the WRITEs.
void expect_drained_data(RemoteEndpoint& remote) {
  std::vector<ibv_wc> received;
  ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
  expect_completion(received[0], 100, IBV_WC_SUCCESS, "the receive posted during the drain");
  EXPECT_EQ(kSendLength, received[0].byte_len);
  for (int i = 0; i <= kWrites; ++i) {
    std::optional<ByteMismatch> wrong;
    const uint32_t length = i == 0 ? kSendLength : kWriteLength;
    ASSERT_EQ(0, remote.check(i * kSlot, length, kSeed + i, wrong)) << remote.why();
    EXPECT_FALSE(wrong) << "message " << i << ": " << describe_mismatch(*wrong);
  }
}

// The SEND is RNR-NAKed (rnr_retry 7: retried for ever) and the WRITEs
// behind it wait for it; SQD is entered meanwhile. Nothing completes and
// no event comes until the peer posts its receive; then the SEND and the
// WRITEs complete in order, IBV_EVENT_SQ_DRAINED follows the last of them,
// and a WR posted in SQD goes out only after SQD -> RTS.
TEST(SqDrain, RnrNakedSendAndWritesBehindItCompleteThenSqDrainedThenHeldWrWaitsForRts) {
  with_connected_pair(drain_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                           const EndpointInfo& remote_info) {
    for (int i = 0; i <= kWrites; ++i) local.fill(i * kSlot, kWriteLength, kSeed + i);
    local.fill(kHeldSendOffset, kSendLength, kSeed + 10);
    post_send_and_writes(local, remote_info);
    ASSERT_EQ(0, local.move_to(IBV_QPS_SQD, /*sqd_notify=*/true));

    expect_no_send_completion(local, "the SEND waits for a receive, the WRITEs wait behind it");
    expect_no_sq_drained(local, "messages in progress are not done");
    ibv_qp_attr draining = query_qp(local.qp());
    EXPECT_EQ(IBV_QPS_SQD, draining.qp_state) << qp_state_name(draining.qp_state);
    EXPECT_EQ(1, draining.sq_draining) << "ibv_query_qp while messages are in progress";
    if (soft_control_available()) {
      std::string stats;
      ASSERT_EQ(0, soft_control("stats", stats));
      EXPECT_LE(1u, qp_counter(stats, local.qp()->qp_num, "rnr_naks_received").value_or(0))
          << "the SEND was to be RNR-NAKed: " << stats;
    }

    ASSERT_EQ(0, remote.post_recv({100, 0, kSlot})) << remote.why();
    std::vector<AsyncEventRecord> others;
    auto drained = local.wait_for_async_event(IBV_EVENT_SQ_DRAINED, kEventWait, &others);
    ASSERT_TRUE(drained) << "no IBV_EVENT_SQ_DRAINED"
                         << (others.empty() ? "" : "; got " + describe_async_event(others[0]));
    EXPECT_EQ(local.qp()->qp_num, drained->qp_num);
    // The event follows the completions: they are all there already.
    std::vector<ibv_wc> sent;
    ASSERT_EQ(kWrites + 1, drain_completions(local.send_cq(), sent))
        << "completions present when IBV_EVENT_SQ_DRAINED was read";
    for (int i = 0; i <= kWrites; ++i)
      expect_completion(sent[i], 1 + i, IBV_WC_SUCCESS, "message " + std::to_string(i));
    ibv_qp_attr done = query_qp(local.qp());
    EXPECT_EQ(IBV_QPS_SQD, done.qp_state) << qp_state_name(done.qp_state);
    EXPECT_EQ(0, done.sq_draining) << "ibv_query_qp once drained";
    expect_drained_data(remote);

    ASSERT_EQ(0, remote.post_recv({101, kHeldSendOffset, kSlot})) << remote.why();
    SendSpec held;
    held.wr_id = 9;
    held.length = kSendLength;
    held.local_offset = kHeldSendOffset;
    ASSERT_EQ(0, local.post_send(held)) << "posting in SQD is allowed";
    expect_no_send_completion(local, "a WR posted in SQD waits for SQD -> RTS");
    expect_no_sq_drained(local, "IBV_EVENT_SQ_DRAINED comes once");
    std::vector<ibv_wc> received;
    EXPECT_EQ(ETIMEDOUT, remote.poll(Queue::kRecv, 1, received, kQuietPeriod))
        << "the WR posted in SQD reached the peer before SQD -> RTS";

    ASSERT_EQ(0, local.move_to(IBV_QPS_RTS)) << "SQD -> RTS";
    sent.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 9, IBV_WC_SUCCESS, "the WR posted in SQD");
    received.clear();
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 101, IBV_WC_SUCCESS, "its receive");
    std::optional<ByteMismatch> wrong;
    ASSERT_EQ(0, remote.check(kHeldSendOffset, kSendLength, kSeed + 10, wrong)) << remote.why();
    EXPECT_FALSE(wrong) << describe_mismatch(*wrong);
  });
}

}  // namespace
}  // namespace softverbs::conformance
