// An RC connection through the CM between two processes (rdma_connect(3),
// rdma_listen(3), rdma_accept(3)): the request carries the client's
// parameters and private data to the listener's channel on a new id, the
// answer carries the server's back, and the QPs librdmacm moved to RTS
// carry SENDs both ways and an RDMA WRITE. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §4.2, §4.3.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_sides.h"
#include "conformance/cm/cm_test_config.h"
#include "conformance/cm/forked_peer.h"
#include "conformance/cm/rc_connection.h"

namespace softverbs::conformance::cm {
namespace {

// Private data lengths the kernel reports: the most the CM message can
// carry, not what the peer sent; the rest is zeros (reference §0.2).
constexpr size_t kRequestPrivateDataBytes = 56;  // REQ 92 less the 36-byte CMA header
constexpr size_t kReplyPrivateDataBytes = 196;   // REP

// What the client tells the server before it connects, for checks.
struct ClientFacts {
  uint32_t qp_num;
  uint16_t port;  // its source port, host byte order
};

// Server: checks everything a CONNECT_REQUEST carries.
void check_request(PassiveSide& side, const ClientFacts& client) {
  const CmEvent& request = side.request;
  EXPECT_EQ(side.listener.get(), request.listen_id);
  EXPECT_NE(side.listener.get(), request.id);
  // The new id inherits the listener's context, port space and channel.
  EXPECT_EQ(RDMA_PS_TCP, request.id->ps);
  EXPECT_EQ(IBV_QPT_RC, request.id->qp_type);
  EXPECT_EQ(side.channel.get(), request.id->channel);
  EXPECT_NE(nullptr, request.id->verbs);
  // The initiator's depth is the responder's resources, and the reverse.
  EXPECT_EQ(kClientInitiatorDepth, request.conn.responder_resources);
  EXPECT_EQ(kClientResponderResources, request.conn.initiator_depth);
  EXPECT_EQ(kClientRetryCount, request.conn.retry_count);
  EXPECT_EQ(kClientRnrRetryCount, request.conn.rnr_retry_count);
  EXPECT_EQ(client.qp_num, request.conn.qp_num);
  EXPECT_EQ(0, request.conn.srq);
  EXPECT_EQ(kRequestPrivateDataBytes, request.private_data.size());
  const Greeting got = greeting_in(request);
  EXPECT_STREQ(kClientMarker, got.marker);
  EXPECT_TRUE(is_padded_copy(request.private_data, greeting_bytes(got)));
}

// Server: the new id's addresses are the two ends of the connection.
void check_request_addresses(PassiveSide& side, const ClientFacts& client) {
  rdma_cm_id* conn = side.request.id;
  const auto* peer = reinterpret_cast<const sockaddr_in*>(rdma_get_peer_addr(conn));
  const auto* local = reinterpret_cast<const sockaddr_in*>(rdma_get_local_addr(conn));
  EXPECT_EQ(AF_INET, peer->sin_family);
  EXPECT_EQ(test_address().sin_addr.s_addr, peer->sin_addr.s_addr);
  EXPECT_EQ(client.port, ntohs(peer->sin_port));
  EXPECT_EQ(client.port, ntohs(rdma_get_dst_port(conn)));
  EXPECT_EQ(test_address().sin_addr.s_addr, local->sin_addr.s_addr);
  EXPECT_EQ(side.port, ntohs(rdma_get_src_port(conn)));
}

void server_checking_request(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(listen_on_test_address(side, RDMA_PS_TCP));
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(side.port));
  ClientFacts client{};
  ASSERT_TRUE(link.receive(client));
  ASSERT_NO_FATAL_FAILURE(take_request(side));
  check_request(side, client);
  check_request_addresses(side, client);
  ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.conn.get(), side.buffer, 1));
  const Greeting greeting = make_greeting(side.buffer, kServerMarker);
  rdma_conn_param param = server_param(greeting);
  ASSERT_EQ(0, rdma_accept(side.conn.get(), &param)) << strerror(errno);
  // The passive side's ESTABLISHED carries nothing.
  CmEvent established = next_event(side.channel.get());
  ASSERT_TRUE(is_event(established, RDMA_CM_EVENT_ESTABLISHED));
  EXPECT_EQ(side.conn.get(), established.id);
  EXPECT_EQ(0u, established.private_data.size());
  EXPECT_EQ(IBV_QPS_RTS, qp_state(side.conn.get()));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmConnect, RequestCarriesTheClientsParametersAndPrivateData) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_checking_request);
    ActiveSide side;
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    ASSERT_NO_FATAL_FAILURE(resolve_to_test_address(side, RDMA_PS_TCP, port));
    ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.id.get(), side.buffer, 1));
    ASSERT_TRUE(server.link().send(ClientFacts{side.id->qp->qp_num, local_port(side.id.get())}));
    const Greeting greeting = make_greeting(side.buffer, kClientMarker);
    rdma_conn_param param = client_param(greeting);
    ASSERT_EQ(0, rdma_connect(side.id.get(), &param)) << strerror(errno);
    ASSERT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_ESTABLISHED));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

void server_accepting(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_TRUE(link.send(side.conn->qp->qp_num));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

// Client: what ESTABLISHED carries, and the QP librdmacm brought to RTS.
void check_established(const CmEvent& established, const ActiveSide& side, uint32_t server_qpn) {
  EXPECT_EQ(side.id.get(), established.id);
  EXPECT_EQ(kServerInitiatorDepth, established.conn.responder_resources);
  EXPECT_EQ(kServerResponderResources, established.conn.initiator_depth);
  EXPECT_EQ(kServerRnrRetryCount, established.conn.rnr_retry_count);
  EXPECT_EQ(server_qpn, established.conn.qp_num);
  EXPECT_EQ(kReplyPrivateDataBytes, established.private_data.size());
  const Greeting got = greeting_in(established);
  EXPECT_STREQ(kServerMarker, got.marker);
  EXPECT_TRUE(is_padded_copy(established.private_data, greeting_bytes(got)));

  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(0, ibv_query_qp(side.id->qp, &attr, IBV_QP_STATE | IBV_QP_DEST_QPN, &init));
  EXPECT_EQ(IBV_QPS_RTS, attr.qp_state);
  EXPECT_EQ(server_qpn, attr.dest_qp_num);
}

TEST(CmConnect, EstablishedCarriesTheServersParametersAndPrivateData) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_accepting);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    uint32_t server_qpn = 0;
    ASSERT_TRUE(server.link().receive(server_qpn));
    check_established(established, side, server_qpn);
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

constexpr uint32_t kSendSlot = 8;
constexpr uint32_t kMessageBytes = 1000;
constexpr uint8_t kClientSeed = 0x11;
constexpr uint8_t kServerSeed = 0x77;

// Either side: the SEND it got in slot 0 has `seed`'s pattern.
void expect_message(rdma_cm_id* id, RegisteredBuffer& buffer, uint8_t seed) {
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(id->recv_cq, IBV_WC_RECV, wc));
  EXPECT_EQ(0u, wc.wr_id);
  EXPECT_EQ(kMessageBytes, wc.byte_len);
  EXPECT_TRUE(has_pattern(buffer.slot(0), kMessageBytes, seed));
}

void send_message(rdma_cm_id* id, RegisteredBuffer& buffer, uint8_t seed) {
  fill_pattern(buffer.slot(kSendSlot), kMessageBytes, seed);
  ASSERT_TRUE(post_send(id->qp, buffer, kSendSlot, kMessageBytes));
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(id->send_cq, IBV_WC_SEND, wc));
}

void server_echoing(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_NO_FATAL_FAILURE(expect_message(side.conn.get(), side.buffer, kClientSeed));
  ASSERT_NO_FATAL_FAILURE(send_message(side.conn.get(), side.buffer, kServerSeed));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmConnect, SendsTravelBothWays) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_echoing);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    ASSERT_NO_FATAL_FAILURE(send_message(side.id.get(), side.buffer, kClientSeed));
    ASSERT_NO_FATAL_FAILURE(expect_message(side.id.get(), side.buffer, kServerSeed));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

constexpr uint8_t kWriteSeed = 0x3c;

// Server: after the client's SEND (which follows its WRITE on the same QP),
// the WRITE's bytes are in the slot its Greeting named.
void server_written_to(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(side.conn->recv_cq, IBV_WC_RECV, wc));
  EXPECT_TRUE(has_pattern(side.buffer.slot(kWriteSlot), kSlotBytes, kWriteSeed));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmConnect, RdmaWriteReachesTheBufferNamedInPrivateData) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_written_to);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 0, established));
    const Greeting target = greeting_in(established);
    fill_pattern(side.buffer.slot(kSendSlot), kSlotBytes, kWriteSeed);
    ASSERT_TRUE(post_write(side.id->qp, side.buffer, kSendSlot, kSlotBytes, target.buffer));
    ibv_wc wc{};
    ASSERT_TRUE(wait_success(side.id->send_cq, IBV_WC_RDMA_WRITE, wc));
    ASSERT_TRUE(post_send(side.id->qp, side.buffer, kSendSlot, 8));
    ASSERT_TRUE(wait_success(side.id->send_cq, IBV_WC_SEND, wc));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
