// Connections of the UDP port space (RDMA_PS_UDP, UD QPs): rdma_connect
// sends a SIDR request, which the listener gets as CONNECT_REQUEST; its
// rdma_accept answers with its QPN and Q_Key, which the client gets as
// ESTABLISHED with an address handle attribute; a datagram sent through an
// AH made from it reaches the server's QP. No listener, or a reject, is
// UNREACHABLE with the SIDR status. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §4.2 "UD".
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_sides.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {
namespace {

enum SidrStep : uint32_t { kListening = 1, kClientDone = 2, kDatagramArrived = 3 };

constexpr uint32_t kDefaultQkey = 0x01234567;  // RDMA_UDP_QKEY
// Private data lengths the kernel reports: the most each message can carry.
constexpr size_t kSidrRequestPrivateDataBytes = 180;  // 216 less the 36-byte CMA header
constexpr size_t kSidrReplyPrivateDataBytes = 136;
// IBTA SIDR_REP status values, as UNREACHABLE's status.
constexpr int kSidrUnsupported = 1;  // no listener for the service ID
constexpr int kSidrReject = 2;

constexpr uint32_t kSendSlot = 8;
constexpr uint32_t kDatagramBytes = 512;
constexpr uint8_t kDatagramSeed = 0x5a;

const std::vector<uint8_t> kRequestData = bytes_of("sidr request");
const std::vector<uint8_t> kAcceptData = bytes_of("sidr accepted");
const std::vector<uint8_t> kRejectData = bytes_of("sidr rejected");

void listen_and_take_request(PassiveSide& side, PeerLink& link) {
  ASSERT_NO_FATAL_FAILURE(listen_on_test_address(side, RDMA_PS_UDP));
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(side.port));
  ASSERT_NO_FATAL_FAILURE(take_request(side));
}

// Server: the request's UD parameters are empty but for the private data.
void check_sidr_request(const PassiveSide& side) {
  const CmEvent& request = side.request;
  EXPECT_EQ(side.listener.get(), request.listen_id);
  EXPECT_EQ(IBV_QPT_UD, request.id->qp_type);
  EXPECT_EQ(RDMA_PS_UDP, request.id->ps);
  EXPECT_EQ(0u, request.ud.qp_num);
  EXPECT_EQ(0u, request.ud.qkey);
  EXPECT_EQ(0, request.ud.ah_attr.is_global);
  EXPECT_EQ(kSidrRequestPrivateDataBytes, request.private_data.size());
  EXPECT_TRUE(is_padded_copy(request.private_data, kRequestData));
}

void sidr_server(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(listen_and_take_request(side, link));
  check_sidr_request(side);
  ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.conn.get(), side.buffer, 1));
  ASSERT_TRUE(link.send(side.conn->qp->qp_num));
  rdma_conn_param param{};
  param.private_data = kAcceptData.data();
  param.private_data_len = static_cast<uint8_t>(kAcceptData.size());
  ASSERT_EQ(0, rdma_accept(side.conn.get(), &param)) << strerror(errno);
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(side.conn->recv_cq, IBV_WC_RECV, wc));
  EXPECT_EQ(kGrhBytes + kDatagramBytes, wc.byte_len);
  EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
  EXPECT_TRUE(has_pattern(side.buffer.slot(0) + kGrhBytes, kDatagramBytes, kDatagramSeed));
  ASSERT_TRUE(link.signal(kDatagramArrived));
  // SIDR leaves nothing to report on the passive id.
  EXPECT_TRUE(no_event_within(side.channel.get(), 200ms));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

// Client: resolves to the server's port, adds a UD QP, sends the request.
CmEvent sidr_connect(ActiveSide& side, uint16_t port) {
  CmEvent none;
  resolve_to_test_address(side, RDMA_PS_UDP, port);
  if (::testing::Test::HasFatalFailure()) return none;
  add_qp_and_buffer(side.id.get(), side.buffer, 0);
  if (::testing::Test::HasFatalFailure()) return none;
  rdma_conn_param param{};
  param.private_data = kRequestData.data();
  param.private_data_len = static_cast<uint8_t>(kRequestData.size());
  if (rdma_connect(side.id.get(), &param) != 0) {
    ADD_FAILURE() << "rdma_connect: " << strerror(errno);
    return none;
  }
  return next_event(side.channel.get());
}

void check_sidr_established(const CmEvent& event, const ActiveSide& side, uint32_t server_qpn) {
  EXPECT_EQ(side.id.get(), event.id);
  EXPECT_EQ(server_qpn, event.ud.qp_num);
  EXPECT_EQ(kDefaultQkey, event.ud.qkey);
  EXPECT_EQ(kSidrReplyPrivateDataBytes, event.private_data.size());
  EXPECT_TRUE(is_padded_copy(event.private_data, kAcceptData));
  EXPECT_EQ(side.id->port_num, event.ud.ah_attr.port_num);
  ibv_port_attr port{};
  ASSERT_EQ(0, ibv_query_port(side.id->verbs, side.id->port_num, &port));
  if (port.link_layer == IBV_LINK_LAYER_ETHERNET) {
    EXPECT_EQ(1, event.ud.ah_attr.is_global);
  }
}

void send_datagram(ActiveSide& side, const CmEvent& established) {
  ibv_ah_attr ah_attr = established.ud.ah_attr;
  AddressHandle ah(ibv_create_ah(side.id->pd, &ah_attr));
  ASSERT_TRUE(ah) << "ibv_create_ah from the ESTABLISHED event: " << strerror(errno);
  fill_pattern(side.buffer.slot(kSendSlot), kDatagramBytes, kDatagramSeed);
  ASSERT_TRUE(post_ud_send(side.id->qp, side.buffer, kSendSlot, kDatagramBytes, ah.get(),
                           established.ud.qp_num, established.ud.qkey));
  ibv_wc wc{};
  ASSERT_TRUE(wait_success(side.id->send_cq, IBV_WC_SEND, wc));
}

TEST(CmSidr, ConnectGetsTheServersQpAndADatagramReachesIt) {
  run_in_fresh_process([] {
    ForkedPeer server("server", sidr_server);
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    ActiveSide side;
    const CmEvent established = sidr_connect(side, port);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    uint32_t server_qpn = 0;
    ASSERT_TRUE(server.link().receive(server_qpn));
    ASSERT_TRUE(is_event(established, RDMA_CM_EVENT_ESTABLISHED));
    check_sidr_established(established, side, server_qpn);
    ASSERT_NO_FATAL_FAILURE(send_datagram(side, established));
    ASSERT_TRUE(server.link().wait_for(kDatagramArrived));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

TEST(CmSidr, ConnectToAPortNobodyListensOnIsUnreachableWithStatus1) {
  run_in_fresh_process([] {
    const uint16_t port = unused_port(RDMA_PS_UDP);
    ASSERT_NE(0, port);
    ActiveSide side;
    const CmEvent event = sidr_connect(side, port);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_TRUE(is_event(event, RDMA_CM_EVENT_UNREACHABLE, kSidrUnsupported));
    EXPECT_EQ(kSidrReplyPrivateDataBytes, event.private_data.size());
    EXPECT_TRUE(is_padded_copy(event.private_data, {}));
  });
}

void sidr_rejecting_server(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(listen_and_take_request(side, link));
  ASSERT_EQ(0, rdma_reject(side.conn.get(), kRejectData.data(),
                           static_cast<uint8_t>(kRejectData.size())))
      << strerror(errno);
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmSidr, RejectIsUnreachableWithStatus2AndItsPrivateData) {
  run_in_fresh_process([] {
    ForkedPeer server("server", sidr_rejecting_server);
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    ActiveSide side;
    const CmEvent event = sidr_connect(side, port);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    EXPECT_TRUE(is_event(event, RDMA_CM_EVENT_UNREACHABLE, kSidrReject));
    EXPECT_EQ(kSidrReplyPrivateDataBytes, event.private_data.size());
    EXPECT_TRUE(is_padded_copy(event.private_data, kRejectData));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
