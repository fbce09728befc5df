// A QP brought back from ERR through RESET (IBTA 10.3.1; ibv_modify_qp(3))
// starts afresh: nothing of its earlier life (WRs flushed but not polled,
// the responder's position, a completion made late) reaches its new one.
// Programs written for mlx5 count on it: after ibv_rereg_mr(3) moved a
// buffer to another PD and the traffic failed as it should, they restart
// both QPs, move the MR back and expect the next exchange to succeed.
// mlx5 also removes the QP's completions still in its CQs at RESET.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

TEST(QpRestart, AfterAnErrorFromARereggedMrTheRestartedPairExchangesAgain) {
  const PairOptions options = symmetric_options();
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& remote_info) {
    PdPtr other_pd(ibv_alloc_pd(local.context()));
    ASSERT_TRUE(other_pd);
    ibv_mr* mr = local.buffer().mr();
    for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(0, local.post_recv({1 + i, i * 4096, 4096}));
    const int moved = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, other_pd.get(), nullptr, 0, 0);
    if (moved != 0) GTEST_SKIP() << "ibv_rereg_mr(IBV_REREG_MR_CHANGE_PD): " << moved;

    // The receive buffers are now in another PD than the QP's: the SEND
    // fails at the responder, and what follows on both sides is flushed.
    // Only the first completion of each side is polled, as a program that
    // stops at the first error does.
    for (uint64_t i = 0; i < 2; ++i) {
      SendSpec send;
      send.wr_id = 10 + i;
      send.length = 64;
      ASSERT_EQ(0, remote.post_send(send)) << remote.why();
    }
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, remote.poll(Queue::kSend, 1, wc)) << remote.why();
    EXPECT_NE(IBV_WC_SUCCESS, wc[0].status) << "a SEND into another PD's buffer";
    wc.clear();
    ASSERT_EQ(0, local.poll(Queue::kRecv, 1, wc));
    EXPECT_NE(IBV_WC_SUCCESS, wc[0].status) << "a receive into another PD's buffer";

    // Both QPs through RESET and up again; the MR back in its PD.
    for (ibv_qp_state state : {IBV_QPS_ERR, IBV_QPS_RESET}) {
      ASSERT_EQ(0, local.move_to(state));
      ASSERT_EQ(0, remote.move_to(state)) << remote.why();
    }
    ASSERT_EQ(0, ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, local.pd(), nullptr, 0, 0));
    ASSERT_EQ(0, local.connect(remote_info, options.local_params));
    ASSERT_EQ(0, remote.connect(local.info(), options.remote_params)) << remote.why();

    ASSERT_EQ(0, local.post_recv({3, 0, 4096}));
    ASSERT_EQ(0, remote.fill(8192, 64, 21)) << remote.why();
    SendSpec send;
    send.wr_id = 12;
    send.local_offset = 8192;
    send.length = 64;
    ASSERT_EQ(0, remote.post_send(send)) << remote.why();
    wc.clear();
    ASSERT_EQ(0, remote.poll(Queue::kSend, 1, wc)) << remote.why();
    expect_completion(wc[0], 12, IBV_WC_SUCCESS, "the first SEND after the restart");
    wc.clear();
    ASSERT_EQ(0, local.poll(Queue::kRecv, 1, wc));
    expect_completion(wc[0], 3, IBV_WC_SUCCESS, "the first receive after the restart");
    EXPECT_EQ(64u, wc[0].byte_len);
    EXPECT_FALSE(local.check(0, 64, 21)) << "the SEND after the restart did not land";
    wc.clear();
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kRecv, 1, wc, std::chrono::milliseconds(200)))
        << "a completion of the QP's earlier life came after the restart";
  });
}

}  // namespace
}  // namespace softverbs::conformance
