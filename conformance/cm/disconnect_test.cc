// rdma_disconnect(3) on a connection: the side that disconnects has its QP
// in ERR at once (librdmacm does it; outstanding receives are flushed); the
// other side gets DISCONNECTED as soon as the DREQ arrives; the side that
// disconnected gets DISCONNECTED only when the other answers (its own
// rdma_disconnect or rdma_destroy_id sends the DREP); both then get
// TIMEWAIT_EXIT when the timewait ends. Kernel behaviour:
// docs/rdmacm-kernel-reference.md §0.4, §3.11, §4.2 "Disconnect".
#include <gtest/gtest.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_sides.h"
#include "conformance/cm/forked_peer.h"
#include "conformance/cm/rc_connection.h"

namespace softverbs::conformance::cm {
namespace {

enum DisconnectStep : uint32_t { kSawDisconnected = 20, kCheckedQuiet = 21, kWatching = 22 };

// rxe shows the timewait as about 2 s (2^(timeout 19 - 8) ms); a soft CM
// may take longer, not forever.
constexpr std::chrono::milliseconds kTimewaitTimeout = 20s;

// The side that calls rdma_disconnect first: its QP goes to ERR at once
// and the receive it had posted completes flushed.
void disconnect_first(rdma_cm_id* id) {
  ASSERT_EQ(0, rdma_disconnect(id)) << strerror(errno);
  EXPECT_EQ(IBV_QPS_ERR, qp_state(id));
  ibv_wc wc{};
  ASSERT_TRUE(wait_completion(id->recv_cq, wc));
  EXPECT_EQ(IBV_WC_WR_FLUSH_ERR, wc.status) << ibv_wc_status_str(wc.status);
}

void expect_disconnected(rdma_event_channel* channel, rdma_cm_id* id) {
  const CmEvent event = next_event(channel);
  ASSERT_TRUE(is_event(event, RDMA_CM_EVENT_DISCONNECTED));
  EXPECT_EQ(id, event.id);
  EXPECT_EQ(0u, event.private_data.size());
}

void expect_timewait_exit(rdma_event_channel* channel, rdma_cm_id* id) {
  const CmEvent event = next_event(channel, kTimewaitTimeout);
  ASSERT_TRUE(is_event(event, RDMA_CM_EVENT_TIMEWAIT_EXIT));
  EXPECT_EQ(id, event.id);
}

// The side that is told: DISCONNECTED, then its own rdma_disconnect (the
// answer), then TIMEWAIT_EXIT.
void answer_disconnect(rdma_event_channel* channel, rdma_cm_id* id) {
  ASSERT_NO_FATAL_FAILURE(expect_disconnected(channel, id));
  ASSERT_EQ(0, rdma_disconnect(id)) << strerror(errno);
  EXPECT_EQ(IBV_QPS_ERR, qp_state(id));
  ASSERT_NO_FATAL_FAILURE(expect_timewait_exit(channel, id));
}

// The side that started: DISCONNECTED once answered, then TIMEWAIT_EXIT;
// a second rdma_disconnect changes nothing and succeeds.
void finish_disconnect(rdma_event_channel* channel, rdma_cm_id* id) {
  ASSERT_NO_FATAL_FAILURE(expect_disconnected(channel, id));
  ASSERT_NO_FATAL_FAILURE(expect_timewait_exit(channel, id));
  EXPECT_EQ(0, rdma_disconnect(id)) << strerror(errno);
}

void server_answering_disconnect(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_NO_FATAL_FAILURE(answer_disconnect(side.channel.get(), side.conn.get()));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmDisconnect, ClientDisconnectReachesBothSides) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_answering_disconnect);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    ASSERT_NO_FATAL_FAILURE(disconnect_first(side.id.get()));
    ASSERT_NO_FATAL_FAILURE(finish_disconnect(side.channel.get(), side.id.get()));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

void server_disconnecting(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_NO_FATAL_FAILURE(disconnect_first(side.conn.get()));
  ASSERT_NO_FATAL_FAILURE(finish_disconnect(side.channel.get(), side.conn.get()));
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmDisconnect, ServerDisconnectReachesBothSides) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_disconnecting);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    ASSERT_NO_FATAL_FAILURE(answer_disconnect(side.channel.get(), side.id.get()));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

// Server: told of the disconnect, it waits before answering.
void server_answering_late(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_NO_FATAL_FAILURE(expect_disconnected(side.channel.get(), side.conn.get()));
  ASSERT_TRUE(link.signal(kSawDisconnected));
  ASSERT_TRUE(link.wait_for(kCheckedQuiet));
  ASSERT_EQ(0, rdma_disconnect(side.conn.get())) << strerror(errno);
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmDisconnect, DisconnectingSideWaitsForThePeersAnswer) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_answering_late);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    ASSERT_NO_FATAL_FAILURE(disconnect_first(side.id.get()));
    ASSERT_TRUE(server.link().wait_for(kSawDisconnected));
    EXPECT_TRUE(no_event_within(side.channel.get(), 1s))
        << "DISCONNECTED must wait for the DREP, which the server has not sent";
    ASSERT_TRUE(server.link().signal(kCheckedQuiet));
    ASSERT_NO_FATAL_FAILURE(expect_disconnected(side.channel.get(), side.id.get()));
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

// Server: connected, then it waits to be killed.
void server_killed(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_TRUE(link.signal(kWatching));
  link.wait_for(kClientDone);
}

// A peer process killed: its kernel tears its ids down (a DREQ), so the
// survivor gets DISCONNECTED; a killed soft-device process sends nothing,
// and softverbs' CM notices the dead process instead.
TEST(CmDisconnect, AKilledPeerProcessDisconnects) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_killed);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    ASSERT_TRUE(server.link().wait_for(kWatching));
    server.kill_now();
    ASSERT_NO_FATAL_FAILURE(expect_disconnected(side.channel.get(), side.id.get()));
    ASSERT_EQ(0, rdma_disconnect(side.id.get())) << strerror(errno);
  });
}

void server_destroying_connection(PeerLink& link) {
  PassiveSide side;
  ASSERT_NO_FATAL_FAILURE(serve_one_rc(side, link, 1));
  ASSERT_TRUE(link.wait_for(kWatching));
  side.buffer.deregister();
  side.conn.reset();  // rdma_destroy_qp + rdma_destroy_id on a connected id
  ASSERT_TRUE(link.wait_for(kClientDone));
}

TEST(CmDisconnect, DestroyingAConnectedIdDisconnectsThePeer) {
  run_in_fresh_process([] {
    ForkedPeer server("server", server_destroying_connection);
    ActiveSide side;
    CmEvent established;
    ASSERT_NO_FATAL_FAILURE(connect_rc(side, server.link(), 1, established));
    ASSERT_TRUE(server.link().signal(kWatching));
    ASSERT_NO_FATAL_FAILURE(expect_disconnected(side.channel.get(), side.id.get()));
    EXPECT_EQ(0, rdma_disconnect(side.id.get())) << strerror(errno);
    ASSERT_TRUE(server.link().signal(kClientDone));
    EXPECT_TRUE(server.join());
  });
}

}  // namespace
}  // namespace softverbs::conformance::cm
