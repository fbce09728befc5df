// Affiliated and unaffiliated asynchronous events between two processes,
// read the way ibv_get_async_event(3) says an application may: by poll(2)
// on the context's async_fd (made non-blocking), then ibv_get_async_event
// and ibv_ack_async_event.
//
//   RTS -> SQD with IBV_QP_EN_SQD_ASYNC_NOTIFY: IBV_EVENT_SQ_DRAINED once the
//   send queue is drained, then SQD -> RTS (IBTA 10.3.1 "Send Queue Drain",
//   11.6.3; ibv_modify_qp(3))
//   first packet received in RTR: IBV_EVENT_COMM_EST (IBTA 11.6.3,
//   "Communication Established")
//   port down / up: IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE, and
//   ibv_query_port(3) follows (IBTA 11.6.3 unaffiliated events)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr auto kEventWait = 10s;
constexpr auto kQuietPeriod = 200ms;

SendSpec send_of(uint64_t wr_id, uint32_t length, uint64_t local_offset) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.length = length;
  spec.local_offset = local_offset;
  return spec;
}

void expect_received_in_order(RemoteEndpoint& remote, uint64_t first_wr_id, size_t count,
                              uint32_t length, uint64_t first_seed) {
  std::vector<ibv_wc> received;
  ASSERT_EQ(0, remote.poll(Queue::kRecv, count, received)) << remote.why();
  for (size_t i = 0; i < count; ++i) {
    expect_completion(received[i], first_wr_id + i, IBV_WC_SUCCESS, "receive " + std::to_string(i));
    EXPECT_EQ(length, received[i].byte_len);
    std::optional<ByteMismatch> wrong;
    ASSERT_EQ(0, remote.check(i * 4096, length, first_seed + i, wrong)) << remote.why();
    EXPECT_FALSE(wrong) << "message " << i << ": " << describe_mismatch(*wrong);
  }
}

// ibv_modify_qp(3) RTS -> SQD with IBV_QP_EN_SQD_ASYNC_NOTIFY: the send
// queue stops taking new WRs and, once the ones already started are done,
// IBV_EVENT_SQ_DRAINED is raised on the QP. A WR posted in SQD waits; SQD ->
// RTS resumes it and later WRs, in order.
TEST(QpEvents, SqdWithNotifyRaisesSqDrainedAndSqdToRtsResumes) {
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    for (uint64_t i = 0; i < 6; ++i) {
      ASSERT_EQ(0, remote.post_recv({100 + i, i * 4096, 4096})) << remote.why();
      local.fill(i * 4096, 2000, 50 + i);
    }
    for (uint64_t i = 0; i < 4; ++i) ASSERT_EQ(0, local.post_send(send_of(1 + i, 2000, i * 4096)));
    ASSERT_EQ(0, local.move_to(IBV_QPS_SQD, /*sqd_notify=*/true));

    std::vector<AsyncEventRecord> others;
    auto drained = local.wait_for_async_event(IBV_EVENT_SQ_DRAINED, kEventWait, &others);
    ASSERT_TRUE(drained) << "no IBV_EVENT_SQ_DRAINED"
                         << (others.empty() ? "" : "; got " + describe_async_event(others[0]));
    EXPECT_EQ(local.qp()->qp_num, drained->qp_num);
    EXPECT_EQ(IBV_QPS_SQD, local.state()) << qp_state_name(local.state());
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 4, sent));
    for (uint64_t i = 0; i < 4; ++i) expect_completion(sent[i], 1 + i, IBV_WC_SUCCESS, "before SQD");

    ASSERT_EQ(0, local.post_send(send_of(5, 2000, 4 * 4096))) << "posting in SQD is allowed";
    ASSERT_EQ(0, local.move_to(IBV_QPS_RTS)) << "SQD -> RTS";
    EXPECT_EQ(IBV_QPS_RTS, local.state()) << qp_state_name(local.state());
    ASSERT_EQ(0, local.post_send(send_of(6, 2000, 5 * 4096)));
    sent.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent));
    expect_completion(sent[0], 5, IBV_WC_SUCCESS, "posted in SQD");
    expect_completion(sent[1], 6, IBV_WC_SUCCESS, "posted after SQD -> RTS");
    expect_received_in_order(remote, 100, 6, 2000, 50);
  });
}

// IBTA 11.6.3 / o11-5: the first packet a QP receives in RTR raises
// IBV_EVENT_COMM_EST (the responder learns the connection is up before any
// ACK of its own). Real HCAs deliver it; a device that does not is skipped.
TEST(QpEvents, FirstPacketInRtrRaisesCommEst) {
  PairOptions options = symmetric_options();
  options.remote_final_state = IBV_QPS_RTR;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& info) {
    ASSERT_EQ(IBV_QPS_RTR, remote.state());
    ASSERT_EQ(0, remote.post_recv({100, 0, 4096})) << remote.why();
    local.fill(0, 300, 61);
    ASSERT_EQ(0, local.post_send(send_of(1, 300, 0)));

    std::optional<AsyncEventRecord> established;
    std::vector<AsyncEventRecord> others;
    ASSERT_EQ(0, remote.wait_for_async_event(IBV_EVENT_COMM_EST, kEventWait, established, &others))
        << remote.why();
    if (!established && !soft_control_available()) {
      GTEST_SKIP() << "this device does not deliver IBV_EVENT_COMM_EST";
    }
    ASSERT_TRUE(established) << "no IBV_EVENT_COMM_EST"
                             << (others.empty() ? "" : "; got " + describe_async_event(others[0]));
    EXPECT_EQ(info.qp.qpn, established->qp_num);

    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "the SEND to a QP in RTR");
    expect_received_in_order(remote, 100, 1, 300, 61);
    EXPECT_EQ(IBV_QPS_RTR, remote.state()) << "COMM_EST changes no state";
  });
}

// A port that goes down raises IBV_EVENT_PORT_ERR and ibv_query_port(3)
// reports IBV_PORT_DOWN; nothing gets through. Up again: IBV_EVENT_PORT_ACTIVE,
// IBV_PORT_ACTIVE, and the SEND held meanwhile is retransmitted and lands,
// followed by new traffic. The async fd is not readable before the event
// and becomes readable with it (poll(2), bounded).
TEST(QpEvents, PortDownRaisesPortErrAndPortUpRaisesPortActiveAndTrafficResumes) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const std::string device = test_config().device_name;
  SoftControlReset reset(device);
  RcParameters params;
  params.timeout = 16;  // 268 ms; 7 retries ride out the downtime below
  with_connected_pair(symmetric_options(params), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo&) {
    const uint8_t port = local.port().port;
    for (uint64_t i = 0; i < 2; ++i) {
      ASSERT_EQ(0, remote.post_recv({100 + i, i * 4096, 4096})) << remote.why();
      local.fill(i * 4096, 1000, 70 + i);
    }
    EXPECT_FALSE(async_fd_readable(local.context(), 0ms)) << "an event before any happened";

    std::string reply;
    ASSERT_EQ(0, soft_control("port " + device + " down", reply)) << reply;
    ASSERT_TRUE(async_fd_readable(local.context(), kEventWait))
        << "the async fd did not become readable after the port went down";
    auto down = local.next_async_event(0ms);
    ASSERT_TRUE(down);
    EXPECT_EQ(IBV_EVENT_PORT_ERR, down->type) << describe_async_event(*down);
    EXPECT_EQ(port, down->port);
    ibv_port_attr attr{};
    ASSERT_EQ(0, ibv_query_port(local.context(), port, &attr));
    EXPECT_EQ(IBV_PORT_DOWN, attr.state) << ibv_port_state_str(attr.state);

    ASSERT_EQ(0, local.post_send(send_of(1, 1000, 0)));
    std::vector<ibv_wc> sent;
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, sent, kQuietPeriod))
        << "a SEND completed over a port that is down: " << describe_completion(sent[0]);
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 0, received)) << remote.why();
    EXPECT_TRUE(received.empty()) << "received over a port that is down";

    ASSERT_EQ(0, soft_control("port " + device + " up", reply)) << reply;
    auto up = local.wait_for_async_event(IBV_EVENT_PORT_ACTIVE, kEventWait, nullptr);
    ASSERT_TRUE(up) << "no IBV_EVENT_PORT_ACTIVE";
    EXPECT_EQ(port, up->port);
    ASSERT_EQ(0, ibv_query_port(local.context(), port, &attr));
    EXPECT_EQ(IBV_PORT_ACTIVE, attr.state) << ibv_port_state_str(attr.state);

    ASSERT_EQ(0, local.post_send(send_of(2, 1000, 4096)));
    sent.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "the SEND held while the port was down");
    expect_completion(sent[1], 2, IBV_WC_SUCCESS, "a SEND after the port came up");
    expect_received_in_order(remote, 100, 2, 1000, 70);
    EXPECT_EQ(IBV_QPS_RTS, local.state()) << qp_state_name(local.state());
  });
}

}  // namespace
}  // namespace softverbs::conformance
