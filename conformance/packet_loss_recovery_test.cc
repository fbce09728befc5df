// Recovery from single lost, duplicated, reordered or damaged packets on RC, between
// two processes (IBTA 9.7.5 requester and responder PSN rules, 9.7.6.1.3
// local ACK timeout; a lost RDMA READ response is recovered by re-issuing
// the READ from the first missing response, either when the timer expires
// or when an ACK for a later PSN shows the responses went missing, the
// "implied NAK"): whatever one packet suffers, every WR completes
// successfully, once, in order, the data is intact, and the receiver sees
// each message exactly once. The faults come from softverbs' injector, set
// in the requester's process, each on one packet kind, so the test names
// the exact case it covers.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

struct LossCase {
  const char* name;
  const char* fault;       // the requester's fault plan
  ibv_wr_opcode first_op;  // the WR the fault hits
  uint32_t first_length;
  bool send_behind;        // a SEND follows, whose ACK covers the first WR's PSNs
  bool damages = false;    // the fault corrupts: the requester must drop a frame as malformed
};

// The requester's engine's count of received frames dropped as malformed,
// from `stats` (its "engine:" line).
uint64_t dropped_malformed(const std::string& stats) {
  const std::string key = " dropped_malformed=";
  const size_t at = stats.find(key, stats.find("engine:"));
  return at == std::string::npos ? 0 : std::stoull(stats.substr(at + key.size()));
}

void PrintTo(const LossCase& c, std::ostream* out) { *out << c.name; }

class SinglePacketFault : public ::testing::TestWithParam<LossCase> {};

TEST_P(SinglePacketFault, EveryWrCompletesOnceInOrderWithIntactData) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const LossCase c = GetParam();
  SoftControlReset reset(test_config().device_name);
  RcParameters params;
  params.timeout = 12;  // 16.8 ms: recovery by timeout stays quick
  params.retry_cnt = 7;
  with_connected_pair(symmetric_options(params), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo&) {
    // Remote layout: receives at 0 and kSecond (a spare one after it), the
    // READ source / WRITE target at kTarget, apart from every receive.
    constexpr uint64_t kSecond = 512 * 1024;
    constexpr uint64_t kTarget = 256 * 1024;
    ASSERT_EQ(0, remote.post_recv({100, 0, 65536})) << remote.why();
    ASSERT_EQ(0, remote.post_recv({101, kSecond, 65536})) << remote.why();
    ASSERT_EQ(0, remote.post_recv({102, kSecond + 65536, 4096})) << remote.why();
    if (c.first_op == IBV_WR_RDMA_READ) {
      ASSERT_EQ(0, remote.fill(kTarget, c.first_length, 21)) << remote.why();
      local.fill_constant(0, c.first_length, 0);
    } else {
      local.fill(0, c.first_length, 21);
    }
    local.fill(kSecond, 3000, 22);
    std::string reply;
    ASSERT_EQ(0, soft_control(std::string("fault set ") + c.fault, reply)) << reply;

    SendSpec first;
    first.wr_id = 1;
    first.opcode = c.first_op;
    first.length = c.first_length;
    first.remote_offset = kTarget;
    ASSERT_EQ(0, local.post_send(first));
    SendSpec second;
    second.wr_id = 2;
    second.length = 3000;
    second.local_offset = kSecond;
    if (c.send_behind) {
      ASSERT_EQ(0, local.post_send(second));
    }

    const size_t expected = c.send_behind ? 2 : 1;
    std::vector<ibv_wc> done;
    // Recovery takes a few local ACK timeouts (16.8 ms each); ten seconds
    // only guard against a WR that is never completed.
    ASSERT_EQ(0, local.poll(Queue::kSend, expected, done, 10s))
        << done.size() << " of " << expected << " WRs completed";
    expect_completion(done[0], 1, IBV_WC_SUCCESS, "the WR the fault hit");
    if (c.send_behind) expect_completion(done[1], 2, IBV_WC_SUCCESS, "the SEND behind it");
    ASSERT_EQ(0, soft_control("fault clear", reply)) << reply;

    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    std::optional<ByteMismatch> wrong;
    if (c.first_op == IBV_WR_RDMA_READ) {
      wrong = local.check(0, c.first_length, 21);
      EXPECT_FALSE(wrong) << "READ data " << describe_mismatch(*wrong);
    }
    // Receives: exactly one per SEND, in order; the spare one stays posted.
    const size_t sends = (c.first_op == IBV_WR_SEND ? 1 : 0) + (c.send_behind ? 1 : 0);
    std::vector<ibv_wc> received;
    if (sends) {
      ASSERT_EQ(0, remote.poll(Queue::kRecv, sends, received)) << remote.why();
    }
    std::vector<ibv_wc> extra;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 0, extra)) << remote.why();
    EXPECT_TRUE(extra.empty()) << "a message was delivered twice: " << describe_completion(extra[0]);
    size_t next = 0;
    if (c.first_op == IBV_WR_SEND) {
      expect_completion(received[next], 100, IBV_WC_SUCCESS, "the first SEND's receive");
      EXPECT_EQ(c.first_length, received[next].byte_len);
      ASSERT_EQ(0, remote.check(0, c.first_length, 21, wrong)) << remote.why();
      EXPECT_FALSE(wrong) << "first SEND " << describe_mismatch(*wrong);
      ++next;
    }
    if (c.first_op == IBV_WR_RDMA_WRITE) {
      ASSERT_EQ(0, remote.check(kTarget, c.first_length, 21, wrong)) << remote.why();
      EXPECT_FALSE(wrong) << "WRITE data " << describe_mismatch(*wrong);
    }
    if (c.send_behind) {
      expect_completion(received[next], 100 + next, IBV_WC_SUCCESS, "the second SEND's receive");
      EXPECT_EQ(3000u, received[next].byte_len);
      const uint64_t at = next == 0 ? 0 : kSecond;
      ASSERT_EQ(0, remote.check(at, 3000, 22, wrong)) << remote.why();
      EXPECT_FALSE(wrong) << "second SEND " << describe_mismatch(*wrong);
    }
    // A frame damaged on its way in is dropped by the requester's checks,
    // never taken: the WR completes from a retransmission.
    if (c.damages) EXPECT_GE(dropped_malformed(stats), 1u) << "the damaged frame was taken";
    if (HasFailure()) ADD_FAILURE() << "requester stats:\n" << stats;
  });
}

INSTANTIATE_TEST_SUITE_P(
    Faults, SinglePacketFault,
    ::testing::Values(
        LossCase{"SendRequestLost", "drop:dir=tx,op=SEND_ONLY,nth=1", IBV_WR_SEND, 100, true},
        LossCase{"MiddleWritePacketLost", "drop:dir=tx,op=RDMA_WRITE_MIDDLE,nth=1",
                 IBV_WR_RDMA_WRITE, 5 * 4096, true},
        LossCase{"LastWritePacketLost", "drop:dir=tx,op=RDMA_WRITE_LAST,nth=1", IBV_WR_RDMA_WRITE,
                 5 * 4096, false},
        LossCase{"AckLost", "drop:dir=rx,op=ACKNOWLEDGE,nth=1", IBV_WR_SEND, 100, false},
        LossCase{"ReadRequestLost", "drop:dir=tx,op=READ_REQUEST,nth=1", IBV_WR_RDMA_READ, 100,
                 true},
        LossCase{"OnlyReadResponseLost", "drop:dir=rx,op=READ_RESPONSE_ONLY,nth=1",
                 IBV_WR_RDMA_READ, 100, false},
        LossCase{"OnlyReadResponseLostWithSendBehind",
                 "drop:dir=rx,op=READ_RESPONSE_ONLY,nth=1", IBV_WR_RDMA_READ, 100, true},
        LossCase{"MiddleReadResponseLost", "drop:dir=rx,op=READ_RESPONSE_MIDDLE,nth=1",
                 IBV_WR_RDMA_READ, 5 * 4096, false},
        LossCase{"LastReadResponseLostWithSendBehind",
                 "drop:dir=rx,op=READ_RESPONSE_LAST,nth=1", IBV_WR_RDMA_READ, 5 * 4096, true},
        LossCase{"SendRequestDuplicated", "dup:dir=tx,op=SEND_ONLY", IBV_WR_SEND, 100, true},
        LossCase{"ReadRequestDuplicated", "dup:dir=tx,op=READ_REQUEST", IBV_WR_RDMA_READ,
                 5 * 4096, true},
        LossCase{"WritePacketsReordered", "reorder:dir=tx,op=RDMA_WRITE_MIDDLE,nth=1,depth=2",
                 IBV_WR_RDMA_WRITE, 5 * 4096, true},
        LossCase{"AckDamagedOnArrival", "corrupt:dir=rx,op=ACKNOWLEDGE,nth=1", IBV_WR_SEND, 100,
                 false, true},
        LossCase{"ReadResponseDamagedOnArrival", "corrupt:dir=rx,op=READ_RESPONSE_ONLY,nth=1",
                 IBV_WR_RDMA_READ, 100, true, true}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace softverbs::conformance
