// Connections that are refused (rdma_reject(3)): a request to a port
// nobody listens on, a server that rejects with private data, and a server
// that destroys the request's id unanswered all end in REJECTED on the
// client, with the IBTA reject reason as status and the REJ's private data;
// librdmacm then moves the client's QP to ERR. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §3.2, §3.10, §4.2 "Failure cases".
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_sides.h"
#include "conformance/cm/forked_peer.h"
#include "conformance/cm/rc_connection.h"

namespace softverbs::conformance::cm {
namespace {

// IBTA 12.6.7.2 reject reasons, as REJECTED's status.
constexpr int kInvalidServiceId = 8;
constexpr int kConsumerReject = 28;
// A REJ's private data: the event reports all of it, zero-padded.
constexpr size_t kRejectPrivateDataBytes = 148;

const std::vector<uint8_t> kRejectData = bytes_of("not today, thank you");

// Client: connects to `port` and returns the event that answered.
CmEvent connect_to(ActiveSide& side, uint16_t port) {
  CmEvent none;
  resolve_to_test_address(side, RDMA_PS_TCP, port);
  if (::testing::Test::HasFatalFailure()) return none;
  add_qp_and_buffer(side.id.get(), side.buffer, 1);
  if (::testing::Test::HasFatalFailure()) return none;
  const Greeting greeting = make_greeting(side.buffer, kClientMarker);
  rdma_conn_param param = client_param(greeting);
  if (rdma_connect(side.id.get(), &param) != 0) {
    ADD_FAILURE() << "rdma_connect: " << strerror(errno);
    return none;
  }
  return next_event(side.channel.get());
}

void expect_rejected(const CmEvent& event, const ActiveSide& side, int reason,
                     const std::vector<uint8_t>& data) {
  EXPECT_TRUE(is_event(event, RDMA_CM_EVENT_REJECTED, reason));
  EXPECT_EQ(side.id.get(), event.id);
  EXPECT_EQ(kRejectPrivateDataBytes, event.private_data.size());
  EXPECT_TRUE(is_padded_copy(event.private_data, data));
  EXPECT_EQ(IBV_QPS_ERR, qp_state(side.id.get())) << "librdmacm moves the QP to ERR on REJECTED";
}

TEST(CmReject, RequestToAPortNobodyListensOnIsRejectedWithReason8) {
  run_in_fresh_process([] {
    const uint16_t port = unused_port(RDMA_PS_TCP);
    ASSERT_NE(0, port);
    ActiveSide side;
    const CmEvent event = connect_to(side, port);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    expect_rejected(event, side, kInvalidServiceId, {});
  });
}

enum RejectStep : uint32_t { kRejected = 10 };

void server_rejecting(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(listen_on_test_address(side, RDMA_PS_TCP));
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(side.port));
  ASSERT_NO_FATAL_FAILURE(take_request(side));
  ASSERT_EQ(0, rdma_reject(side.conn.get(), kRejectData.data(),
                           static_cast<uint8_t>(kRejectData.size())))
      << strerror(errno);
  // The rejecting side gets no event for it.
  EXPECT_TRUE(no_event_within(side.channel.get(), 500ms));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmReject, ConsumerRejectArrivesWithReason28AndItsPrivateData) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_rejecting);
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    ActiveSide side;
    const CmEvent event = connect_to(side, port);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    expect_rejected(event, side, kConsumerReject, kRejectData);
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

void server_dropping_request(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(listen_on_test_address(side, RDMA_PS_TCP));
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(side.port));
  ASSERT_NO_FATAL_FAILURE(take_request(side));
  side.conn.reset();  // rdma_destroy_id on an unanswered request
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmReject, DestroyingAnUnansweredRequestRejectsItWithReason28) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_dropping_request);
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    ActiveSide side;
    const CmEvent event = connect_to(side, port);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    expect_rejected(event, side, kConsumerReject, {});
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
