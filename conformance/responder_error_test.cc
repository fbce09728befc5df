// Errors the responder detects, as an application sees them on both sides
// (two processes): the responder NAKs the request, the requester's WR
// completes with the status that NAK maps to and its QP enters ERR (IBTA
// 9.7.5.2.x, 10.7.3.x; ibv_poll_cq(3) for the statuses), later WRs are
// flushed, and the responder's QP fails too, with the async event of the
// IBTA class of error (ibv_get_async_event(3), read here through a poll(2)
// on the context's async_fd).
//
//   remote access violation (rkey unknown, range outside the MR, MR without
//   the access right)       -> requester IBV_WC_REM_ACCESS_ERR, responder
//                              IBV_EVENT_QP_ACCESS_ERR (IBTA 9.7.5.2.4,
//                              11.6.3 "Local access violation WQ error")
//   receive buffer too small -> receiver IBV_WC_LOC_LEN_ERR, sender
//                              IBV_WC_REM_INV_REQ_ERR (IBTA 9.7.5.2.3)
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr auto kEventWait = 10s;
constexpr uint8_t kUntouched = 0x5a;

enum class Violation { kUnknownRkey, kOutsideTheRegion, kRegionWithoutTheRight };

struct AccessParam {
  ibv_wr_opcode opcode;
  Violation violation;
};

std::string param_name(const AccessParam& param) {
  std::string name = param.opcode == IBV_WR_RDMA_WRITE ? "RdmaWrite" : "RdmaRead";
  switch (param.violation) {
    case Violation::kUnknownRkey: return name + "WithUnknownRkey";
    case Violation::kOutsideTheRegion: return name + "PastTheEndOfTheRegion";
    case Violation::kRegionWithoutTheRight: return name + "ToRegionWithoutTheRight";
  }
  return name;
}

void PrintTo(const AccessParam& param, std::ostream* out) { *out << param_name(param); }

class RemoteAccessViolation : public ::testing::TestWithParam<AccessParam> {};

// IBTA 9.7.5.2.4 / o9-53: a request that fails the R_Key, bounds or access
// check is answered with a Remote Access Error NAK: the requester's WR
// completes with IBV_WC_REM_ACCESS_ERR, its QP enters ERR and every later WR
// is flushed. The responder raises IBV_EVENT_QP_ACCESS_ERR (IBTA 11.6.3),
// its QP enters ERR too and flushes its receive queue. Nothing is written.
TEST_P(RemoteAccessViolation, RequesterGetsRemAccessErrAndBothQpsEnterErr) {
  const AccessParam param = GetParam();
  PairOptions options = symmetric_options();
  const uint64_t region_length = options.remote.buffer_length;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& info) {
    constexpr uint32_t kLength = 64;
    local.fill(0, 4096, 11);
    ASSERT_EQ(0, remote.fill_constant(0, region_length, kUntouched)) << remote.why();
    ASSERT_EQ(0, remote.post_recv({500, 0, 4096})) << remote.why();

    SendSpec bad;
    bad.wr_id = 1;
    bad.opcode = param.opcode;
    bad.length = kLength;
    switch (param.violation) {
      case Violation::kUnknownRkey: bad.target = RemoteTarget::kUnknownRkey; break;
      case Violation::kOutsideTheRegion:
        bad.remote_offset = info.qp.length - kLength / 2;  // half of it past the end
        break;
      case Violation::kRegionWithoutTheRight:
        bad.target = RemoteTarget::kRestrictedRegion;  // registered LOCAL_WRITE only
        break;
    }
    SendSpec behind;
    behind.wr_id = 2;
    behind.opcode = IBV_WR_RDMA_WRITE;
    behind.length = kLength;
    behind.remote_offset = 4096;
    behind.send_flags = 0;  // unsignaled: flushed completions are reported all the same
    ASSERT_EQ(0, local.post_send(bad));
    ASSERT_EQ(0, local.post_send(behind));

    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent)) << "got " << sent.size() << " completions";
    expect_completion(sent[0], 1, IBV_WC_REM_ACCESS_ERR, "the violating WR");
    EXPECT_EQ(local.qp()->qp_num, sent[0].qp_num);
    expect_completion(sent[1], 2, IBV_WC_WR_FLUSH_ERR, "the WR behind it");
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << "requester QP in " << qp_state_name(local.state());

    std::optional<AsyncEventRecord> event;
    std::vector<AsyncEventRecord> others;
    ASSERT_EQ(0, remote.wait_for_async_event(IBV_EVENT_QP_ACCESS_ERR, kEventWait, event, &others))
        << remote.why();
    ASSERT_TRUE(event) << "the responder got no IBV_EVENT_QP_ACCESS_ERR"
                       << (others.empty() ? "" : "; it got " + describe_async_event(others[0]));
    EXPECT_EQ(info.qp.qpn, event->qp_num) << describe_async_event(*event);
    EXPECT_EQ(IBV_QPS_ERR, remote.state());

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 500, IBV_WC_WR_FLUSH_ERR, "the responder's posted receive");

    std::optional<ByteMismatch> changed;
    ASSERT_EQ(0, remote.check_constant(0, region_length, kUntouched, changed)) << remote.why();
    EXPECT_FALSE(changed) << "the responder's memory was written: " << describe_mismatch(*changed);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Violations, RemoteAccessViolation,
    ::testing::Values(AccessParam{IBV_WR_RDMA_WRITE, Violation::kUnknownRkey},
                      AccessParam{IBV_WR_RDMA_WRITE, Violation::kOutsideTheRegion},
                      AccessParam{IBV_WR_RDMA_WRITE, Violation::kRegionWithoutTheRight},
                      AccessParam{IBV_WR_RDMA_READ, Violation::kUnknownRkey},
                      AccessParam{IBV_WR_RDMA_READ, Violation::kOutsideTheRegion},
                      AccessParam{IBV_WR_RDMA_READ, Violation::kRegionWithoutTheRight}),
    [](const auto& info) { return param_name(info.param); });

// IBTA 9.7.5.2.3 (o9-47) and ibv_poll_cq(3): a SEND longer than the receive
// WQE's buffers completes that receive with IBV_WC_LOC_LEN_ERR and is
// answered with an Invalid Request NAK, so the sender's WR completes with
// IBV_WC_REM_INV_REQ_ERR. Both QPs end in ERR; the WRs behind on either side
// are flushed.
TEST(ResponderError, SendLargerThanTheReceiveBufferIsLocLenErrAndRemInvReqErr) {
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    ASSERT_EQ(0, remote.post_recv({7, 0, 16})) << remote.why();
    ASSERT_EQ(0, remote.post_recv({8, 4096, 4096})) << remote.why();
    local.fill(0, 4096, 3);
    SendSpec too_long;
    too_long.wr_id = 1;
    too_long.length = 64;
    SendSpec behind = too_long;
    behind.wr_id = 2;
    ASSERT_EQ(0, local.post_send(too_long));
    ASSERT_EQ(0, local.post_send(behind));

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 2, received)) << remote.why();
    expect_completion(received[0], 7, IBV_WC_LOC_LEN_ERR, "the 16-byte receive");
    expect_completion(received[1], 8, IBV_WC_WR_FLUSH_ERR, "the receive behind it");

    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent));
    expect_completion(sent[0], 1, IBV_WC_REM_INV_REQ_ERR, "the 64-byte SEND");
    expect_completion(sent[1], 2, IBV_WC_WR_FLUSH_ERR, "the SEND behind it");

    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());
    EXPECT_EQ(IBV_QPS_ERR, remote.state());
  });
}

}  // namespace
}  // namespace softverbs::conformance
