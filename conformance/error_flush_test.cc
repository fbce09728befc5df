// The ERR state as an application sees it, with a live peer in another
// process: once a QP enters ERR, by a local error in a completion or by
// ibv_modify_qp, every outstanding WR and every WR posted later completes
// with IBV_WC_WR_FLUSH_ERR, in the order posted, signaled or not (IBTA
// 10.3.1 "Error", 10.8.3.3, o10-34; ibv_poll_cq(3): "all outstanding work
// requests are flushed"), and ibv_query_qp(3) reports IBV_QPS_ERR.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

enum class LocalViolation { kLkeyOfAnotherPd, kLengthBeyondTheRegion };

class LocalProtectionError : public ::testing::TestWithParam<LocalViolation> {};

// IBTA 10.7.3.1 / C10-93 local protection checks: an L_Key of another PD, or
// an SGE reaching past its MR, completes that WR with IBV_WC_LOC_PROT_ERR
// (not an error of the post), the QP enters ERR, and every WR behind it is
// flushed in order, the unsignaled ones included. Nothing reaches the peer.
TEST_P(LocalProtectionError, LocProtErrThenEveryLaterWrIsFlushedInOrder) {
  const LocalViolation violation = GetParam();
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_EQ(0, remote.post_recv({100 + i, i * 4096, 4096})) << remote.why();
    }
    // The offending SGE, on memory that is mapped either way: only the
    // protection check can stop the transfer.
    PdPtr other_pd(ibv_alloc_pd(local.context()));
    ASSERT_TRUE(other_pd);
    RegisteredBuffer foreign;
    ASSERT_EQ(0, foreign.allocate(other_pd.get(), 4096, IBV_ACCESS_LOCAL_WRITE));
    std::vector<uint8_t> memory(8192, 1);
    MrPtr first_half(ibv_reg_mr(local.pd(), memory.data(), 4096, IBV_ACCESS_LOCAL_WRITE));
    ASSERT_TRUE(first_half);
    ibv_sge bad_sge{};
    if (violation == LocalViolation::kLkeyOfAnotherPd) {
      bad_sge = {foreign.address(), 64, foreign.lkey()};
    } else {
      bad_sge = {reinterpret_cast<uintptr_t>(memory.data()) + 4096 - 16, 64, first_half->lkey};
    }

    // One chain: the bad SEND, then SEND unsignaled, WRITE signaled, SEND
    // unsignaled.
    ibv_send_wr chain[4]{};
    ibv_sge sges[4]{};
    const ibv_wr_opcode opcodes[4] = {IBV_WR_SEND, IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_SEND};
    for (int i = 0; i < 4; ++i) {
      SendSpec spec;
      spec.wr_id = 1 + i;
      spec.opcode = opcodes[i];
      spec.length = 64;
      spec.local_offset = 4096 * i;
      spec.remote_offset = 4096 * i;
      spec.send_flags = (i % 2 == 0) ? IBV_SEND_SIGNALED : 0;
      chain[i] = local.make_send_wr(spec, sges[i]);
      if (i > 0) chain[i - 1].next = &chain[i];
    }
    chain[0].sg_list = &bad_sge;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(0, ibv_post_send(local.qp(), chain, &bad))
        << "the post itself failed; the error belongs in the completion";

    std::vector<ibv_wc> completions;
    ASSERT_EQ(0, local.poll(Queue::kSend, 4, completions))
        << "got " << completions.size() << " of 4 completions";
    expect_completion(completions[0], 1, IBV_WC_LOC_PROT_ERR, "the WR with the bad SGE");
    for (uint64_t i = 1; i < 4; ++i) {
      expect_completion(completions[i], 1 + i, IBV_WC_WR_FLUSH_ERR,
                        "WR " + std::to_string(1 + i) + " behind it");
      EXPECT_EQ(local.qp()->qp_num, completions[i].qp_num);
    }
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());

    // Posted after the error: flushed too (IBTA 10.8.3.3: the send queue
    // accepts WRs in ERR and completes them in error).
    SendSpec later;
    later.wr_id = 9;
    later.length = 64;
    later.send_flags = 0;
    ASSERT_EQ(0, local.post_send(later));
    completions.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, completions));
    expect_completion(completions[0], 9, IBV_WC_WR_FLUSH_ERR, "a WR posted in ERR");

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 0, received)) << remote.why();
    EXPECT_TRUE(received.empty()) << "the peer received " << describe_completion(received[0]);
    EXPECT_EQ(IBV_QPS_RTS, remote.state()) << "a local error of the sender harms no peer";
  });
}

INSTANTIATE_TEST_SUITE_P(Violations, LocalProtectionError,
                         ::testing::Values(LocalViolation::kLkeyOfAnotherPd,
                                           LocalViolation::kLengthBeyondTheRegion),
                         [](const auto& info) {
                           return info.param == LocalViolation::kLkeyOfAnotherPd
                                      ? std::string("LkeyOfAnotherPd")
                                      : std::string("LengthBeyondTheRegion");
                         });

// ibv_modify_qp(3) to IBV_QPS_ERR with WRs outstanding on both queues: every
// one completes with IBV_WC_WR_FLUSH_ERR, send and receive queue each in
// the order posted, unsignaled sends included (IBTA 10.3.1, o10-34).
// The peer posts no receive and RNR retries are infinite, so the SENDs stay
// outstanding until the flush.
TEST(ErrorFlush, ModifyToErrFlushesEveryOutstandingWrInOrder) {
  RcParameters params;
  params.rnr_retry = 7;
  params.min_rnr_timer = 14;  // 1.28 ms between RNR retries
  with_connected_pair(symmetric_options(params), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo&) {
    for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(0, local.post_recv({200 + i, 65536 + i * 4096, 4096}));
    const ibv_wr_opcode opcodes[5] = {IBV_WR_SEND, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
                                      IBV_WR_RDMA_READ, IBV_WR_SEND};
    for (uint64_t i = 0; i < 5; ++i) {
      SendSpec spec;
      spec.wr_id = 1 + i;
      spec.opcode = opcodes[i];
      spec.length = 256;
      spec.local_offset = i * 4096;
      spec.remote_offset = i * 4096;
      spec.send_flags = (i == 1 || i == 4) ? 0 : IBV_SEND_SIGNALED;
      ASSERT_EQ(0, local.post_send(spec)) << "WR " << spec.wr_id;
    }
    // Let the first SEND meet its RNR NAK (no assertion rides on this).
    std::this_thread::sleep_for(20ms);
    std::vector<ibv_wc> early;
    ASSERT_EQ(0, local.poll(Queue::kSend, 0, early));
    ASSERT_TRUE(early.empty()) << "completed without a receive at the peer: "
                               << describe_completion(early[0]);

    ASSERT_EQ(0, local.move_to(IBV_QPS_ERR));
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());

    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 5, sent)) << "got " << sent.size() << " of 5";
    for (uint64_t i = 0; i < 5; ++i) {
      expect_completion(sent[i], 1 + i, IBV_WC_WR_FLUSH_ERR, "send WR " + std::to_string(1 + i));
      EXPECT_EQ(local.qp()->qp_num, sent[i].qp_num);
    }
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, local.poll(Queue::kRecv, 3, received)) << "got " << received.size() << " of 3";
    for (uint64_t i = 0; i < 3; ++i) {
      expect_completion(received[i], 200 + i, IBV_WC_WR_FLUSH_ERR,
                        "receive WR " + std::to_string(200 + i));
      EXPECT_EQ(local.qp()->qp_num, received[i].qp_num);
    }
    std::vector<ibv_wc> extra;
    ASSERT_EQ(0, local.poll(Queue::kSend, 0, extra));
    ASSERT_EQ(0, local.poll(Queue::kRecv, 0, extra));
    EXPECT_TRUE(extra.empty()) << "more completions than WRs: " << describe_completion(extra[0]);

    // A receive posted in ERR is flushed at once as well.
    ASSERT_EQ(0, local.post_recv({299, 0, 64}));
    received.clear();
    ASSERT_EQ(0, local.poll(Queue::kRecv, 1, received));
    expect_completion(received[0], 299, IBV_WC_WR_FLUSH_ERR, "a receive posted in ERR");
    (void)remote;
  });
}

}  // namespace
}  // namespace softverbs::conformance
