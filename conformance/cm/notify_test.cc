// rdma_notify(3): a QP that sees traffic before its CM saw the RTU raises
// IBV_EVENT_COMM_EST, and the application hands that on; the passive side
// is then established as if the RTU had come (RDMA_CM_EVENT_ESTABLISHED),
// and a late RTU changes nothing. Events other than COMM_EST and PATH_MIG
// are EINVAL, as are ids not waiting for an RTU; an established one is
// EISCONN (the kernel's ib_cm_notify).
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

enum NotifyStep : uint32_t {
  kGotResponse = 10,  // the client holds the REP and has not sent the RTU
  kNotified = 11,
};

// Server: accepts, and is established by rdma_notify before any RTU.
void server_notified(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(listen_on_test_address(side, RDMA_PS_TCP));
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(side.port));
  ASSERT_NO_FATAL_FAILURE(take_request(side));
  EXPECT_EQ(-1, rdma_notify(side.listener.get(), IBV_EVENT_COMM_EST));
  EXPECT_EQ(EINVAL, errno) << "a listener waits for no RTU";
  ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.conn.get(), side.buffer, 1));
  const Greeting greeting = make_greeting(side.buffer, kServerMarker);
  rdma_conn_param param = server_param(greeting);
  ASSERT_EQ(0, rdma_accept(side.conn.get(), &param)) << strerror(errno);
  ASSERT_TRUE(link.wait_for(kGotResponse));

  EXPECT_EQ(-1, rdma_notify(side.conn.get(), IBV_EVENT_SQ_DRAINED));
  EXPECT_EQ(EINVAL, errno) << "the CM takes COMM_EST and PATH_MIG only";
  ASSERT_EQ(0, rdma_notify(side.conn.get(), IBV_EVENT_COMM_EST)) << strerror(errno);
  CmEvent established = next_event(side.channel.get());
  ASSERT_TRUE(is_event(established, RDMA_CM_EVENT_ESTABLISHED));
  EXPECT_EQ(side.conn.get(), established.id);
  EXPECT_EQ(-1, rdma_notify(side.conn.get(), IBV_EVENT_COMM_EST));
  EXPECT_EQ(EISCONN, errno) << "established already";
  EXPECT_EQ(0, rdma_notify(side.conn.get(), IBV_EVENT_PATH_MIG)) << strerror(errno);
  ASSERT_TRUE(link.signal(kNotified));

  // The late RTU brings no second ESTABLISHED; the disconnect comes next.
  CmEvent next = next_event(side.channel.get());
  EXPECT_TRUE(is_event(next, RDMA_CM_EVENT_DISCONNECTED));
  rdma_disconnect(side.conn.get());
}

TEST(CmNotify, CommEstablishedStandsInForALateRtu) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_notified);
    ActiveSide side;
    uint16_t port = 0;
    ASSERT_TRUE(server.link().wait_for(kListening));
    ASSERT_TRUE(server.link().receive(port));
    ASSERT_NO_FATAL_FAILURE(resolve_to_test_address(side, RDMA_PS_TCP, port));
    // No QP on the id: librdmacm hands over the REP as CONNECT_RESPONSE and
    // leaves the RTU (rdma_establish) to the application.
    rdma_conn_param param{};
    param.responder_resources = 1;
    param.initiator_depth = 1;
    param.retry_count = 5;
    param.qp_num = 0x4242;
    ASSERT_EQ(0, rdma_connect(side.id.get(), &param)) << strerror(errno);
    ASSERT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_CONNECT_RESPONSE));
    ASSERT_TRUE(server.link().signal(kGotResponse));
    ASSERT_TRUE(server.link().wait_for(kNotified));
    ASSERT_EQ(0, rdma_establish(side.id.get())) << strerror(errno);
    ASSERT_EQ(0, rdma_disconnect(side.id.get())) << strerror(errno);
    EXPECT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_DISCONNECTED));
    EXPECT_TRUE(server.join());
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
