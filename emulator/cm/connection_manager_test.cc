// The connection manager on its own: two managers (a client's and a
// server's, as two processes have) on one engine over the in-memory wire,
// their agents exchanging real CM MADs.
#include "emulator/cm/connection_manager.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "emulator/cm/cm_messages.h"
#include "emulator/engine/engine.h"
#include "emulator/wire/loopback_wire.h"

namespace softverbs::cm {
namespace {

using namespace std::chrono_literals;

constexpr uint16_t kPortSpaceTcp = 0x0106;
constexpr uint16_t kPortSpaceUdp = 0x0111;
constexpr uint16_t kPortSpaceIb = 0x013f;

class SequentialQpns final : public QpnSource {
 public:
  Errno allocate(uint32_t, uint32_t& qpn) override {
    std::lock_guard lock(mutex_);
    qpn = next_++;
    return 0;
  }
  void release(uint32_t, uint32_t) override {}

 private:
  std::mutex mutex_;
  uint32_t next_ = 0x100;
};

// Records the events of the ids it is given.
class RecordingSink final : public EventSink {
 public:
  void on_cm_event(const Event& event) override {
    {
      std::lock_guard lock(mutex_);
      events_.push_back(event);
    }
    arrived_.notify_all();
  }

  // The next event, or a kDeviceRemoval with status -ETIMEDOUT after `wait`.
  Event next(std::chrono::milliseconds wait = 5s) {
    std::unique_lock lock(mutex_);
    if (!arrived_.wait_for(lock, wait, [&] { return !events_.empty(); })) {
      Event timed_out;
      timed_out.type = EventType::kDeviceRemoval;
      timed_out.status = -ETIMEDOUT;
      return timed_out;
    }
    Event event = events_.front();
    events_.pop_front();
    return event;
  }

  bool empty() {
    std::lock_guard lock(mutex_);
    return events_.empty();
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<Event> events_;
};

IpEndpoint ipv4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port) {
  IpEndpoint endpoint;
  endpoint.address[10] = endpoint.address[11] = 0xff;
  endpoint.address[12] = a;
  endpoint.address[13] = b;
  endpoint.address[14] = c;
  endpoint.address[15] = d;
  endpoint.port = port;
  return endpoint;
}

const IpEndpoint kServer = ipv4(127, 0, 0, 1, 7000);

class ConnectionManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Engine::Config config;
    auto wire = std::make_unique<LoopbackWire>();
    config.doorbell = wire.get();
    config.wire = std::move(wire);
    config.qpns = std::make_unique<SequentialQpns>();
    engine_ = std::make_unique<Engine>(std::move(config));
    server_ = std::make_unique<ConnectionManager>(*engine_, ports_);
    client_ = std::make_unique<ConnectionManager>(*engine_, ports_);
  }

  void TearDown() override {
    client_.reset();
    server_.reset();
  }

  uint32_t listen(uint16_t port_space = kPortSpaceTcp, QpType type = QpType::kRc) {
    const uint32_t id = server_->create_id(server_events_, port_space, type);
    EXPECT_EQ(server_->bind(id, kServer), 0);
    EXPECT_EQ(server_->listen(id, 0), 0);
    return id;
  }

  // A client id with its route to the server resolved.
  uint32_t routed_client(uint16_t port_space = kPortSpaceTcp, QpType type = QpType::kRc,
                         IpEndpoint server = kServer) {
    const uint32_t id = client_->create_id(client_events_, port_space, type);
    EXPECT_EQ(client_->resolve_address(id, nullptr, server), 0);
    EXPECT_EQ(client_events_.next().type, EventType::kAddrResolved);
    EXPECT_EQ(client_->resolve_route(id), 0);
    EXPECT_EQ(client_events_.next().type, EventType::kRouteResolved);
    return id;
  }

  static ConnectionParams params(uint32_t qpn, std::vector<uint8_t> private_data = {}) {
    ConnectionParams p;
    p.qpn = qpn;
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.retry_count = 5;
    p.rnr_retry_count = 6;
    p.private_data = std::move(private_data);
    return p;
  }

  // Client connects, server accepts: the ids of both ends, established.
  void connect(uint32_t& client, uint32_t& server) {
    listen();
    client = routed_client();
    ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
    const Event request = server_events_.next();
    ASSERT_EQ(request.type, EventType::kConnectRequest);
    server = request.id;
    ASSERT_EQ(server_->accept(server, params(0x2222)), 0);
    ASSERT_EQ(client_events_.next().type, EventType::kConnectResponse);
    ASSERT_EQ(client_->establish(client), 0);
    ASSERT_EQ(server_events_.next().type, EventType::kEstablished);
  }

  std::unique_ptr<Engine> engine_;
  LocalCmPortDirectory ports_;
  std::unique_ptr<ConnectionManager> server_;
  std::unique_ptr<ConnectionManager> client_;
  RecordingSink server_events_;
  RecordingSink client_events_;
};

TEST_F(ConnectionManagerTest, RequestReplyAndReadyToUseCarryParametersAndPrivateData) {
  const uint32_t listener = listen();
  const uint32_t client = routed_client();
  ASSERT_EQ(client_->connect(client, params(0x1111, {1, 2, 3})), 0);

  const Event request = server_events_.next();
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  EXPECT_EQ(request.listen_id, listener);
  EXPECT_NE(request.id, listener);
  EXPECT_EQ(request.params.qpn, 0x1111u);
  // The receiver's view: what the client serves is what the server may issue.
  EXPECT_EQ(request.params.responder_resources, 2);
  EXPECT_EQ(request.params.initiator_depth, 4);
  EXPECT_EQ(request.params.retry_count, 5);
  EXPECT_EQ(request.params.rnr_retry_count, 6);
  ASSERT_EQ(request.params.private_data.size(), 56u);  // a REQ's, after the IP header
  EXPECT_EQ(request.params.private_data[0], 1);
  EXPECT_EQ(request.params.private_data[2], 3);
  EXPECT_EQ(request.params.private_data[3], 0);

  IdAddressing passive;
  ASSERT_EQ(server_->query(request.id, passive), 0);
  EXPECT_EQ(passive.source, kServer);
  IdAddressing active;
  ASSERT_EQ(client_->query(client, active), 0);
  EXPECT_EQ(passive.destination, active.source);

  ASSERT_EQ(server_->accept(request.id, params(0x2222, {9})), 0);
  const Event response = client_events_.next();
  ASSERT_EQ(response.type, EventType::kConnectResponse);
  EXPECT_EQ(response.params.qpn, 0x2222u);
  ASSERT_EQ(response.params.private_data.size(), 196u);
  EXPECT_EQ(response.params.private_data[0], 9);

  ASSERT_EQ(client_->establish(client), 0);
  const Event established = server_events_.next();
  EXPECT_EQ(established.type, EventType::kEstablished);
  EXPECT_EQ(established.id, request.id);
  EXPECT_TRUE(established.params.private_data.empty());
}

// The REQ names the initiator's transport (IBTA 12.6.5), and the passive id
// takes the matching type: RC and UC as they are, an XRC initiator's
// request (extended transport type XRC) an XRC target.
TEST_F(ConnectionManagerTest, TheRequestNamesTheTransportAndThePassiveIdTakesIt) {
  const uint32_t listener = server_->create_id(server_events_, kPortSpaceIb, QpType::kRc);
  ASSERT_EQ(server_->bind(listener, kServer), 0);
  ASSERT_EQ(server_->listen(listener, 0), 0);
  for (auto [active, passive] : {std::pair{QpType::kRc, QpType::kRc},
                                 std::pair{QpType::kUc, QpType::kUc},
                                 std::pair{QpType::kXrcSend, QpType::kXrcRecv}}) {
    const uint32_t client = routed_client(kPortSpaceIb, active);
    ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
    const Event request = server_events_.next();
    ASSERT_EQ(request.type, EventType::kConnectRequest);
    EXPECT_EQ(request.qp_type, passive) << to_string(active);
    EXPECT_EQ(server_->reject(request.id, {}, 28), 0);
    EXPECT_EQ(client_events_.next().type, EventType::kRejected);
  }
}

TEST_F(ConnectionManagerTest, QpAttributesPairThePsnsAndQpnsOfBothEnds) {
  uint32_t client = 0, server = 0;
  connect(client, server);
  QpAttributes c, s;
  uint32_t mask = 0;
  ASSERT_EQ(client_->qp_attributes(client, QpState::kRtr, c, mask), 0);
  EXPECT_TRUE(mask & kQpAttrDestQpn);
  ASSERT_EQ(server_->qp_attributes(server, QpState::kRtr, s, mask), 0);
  EXPECT_EQ(c.dest_qp_num, 0x2222u);
  EXPECT_EQ(s.dest_qp_num, 0x1111u);
  QpAttributes c_rts, s_rts;
  ASSERT_EQ(client_->qp_attributes(client, QpState::kRts, c_rts, mask), 0);
  ASSERT_EQ(server_->qp_attributes(server, QpState::kRts, s_rts, mask), 0);
  EXPECT_EQ(c_rts.sq_psn, s.rq_psn);
  EXPECT_EQ(s_rts.sq_psn, c.rq_psn);
  EXPECT_EQ(c_rts.retry_cnt, 5);
  EXPECT_EQ(s_rts.retry_cnt, 5);
  EXPECT_EQ(s_rts.rnr_retry, 6);  // what the client asked of the server
  EXPECT_EQ(c_rts.max_rd_atomic, 4);   // the server serves 4
  EXPECT_EQ(s.max_dest_rd_atomic, 4);
  QpAttributes init;
  ASSERT_EQ(client_->qp_attributes(client, QpState::kInit, init, mask), 0);
  EXPECT_EQ(init.access_flags, kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
}

TEST_F(ConnectionManagerTest, RtrAttributesBeforeTheReplyAreRefused) {
  listen();
  const uint32_t client = routed_client();
  QpAttributes attributes;
  uint32_t mask = 0;
  ASSERT_EQ(client_->qp_attributes(client, QpState::kInit, attributes, mask), 0);
  ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
  EXPECT_EQ(client_->qp_attributes(client, QpState::kRtr, attributes, mask), EINVAL);
  ASSERT_EQ(server_events_.next().type, EventType::kConnectRequest);
}

TEST_F(ConnectionManagerTest, NoListenerIsRejectedWithInvalidServiceId) {
  const uint32_t client = routed_client();
  ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
  const Event event = client_events_.next();
  EXPECT_EQ(event.type, EventType::kRejected);
  EXPECT_EQ(event.status, 8);
  EXPECT_EQ(event.params.private_data.size(), 148u);
}

TEST_F(ConnectionManagerTest, AConsumerRejectReachesTheClientWithItsPrivateData) {
  listen();
  const uint32_t client = routed_client();
  ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
  const Event request = server_events_.next();
  const uint8_t why[] = {'n', 'o'};
  ASSERT_EQ(server_->reject(request.id, why, 28), 0);
  const Event event = client_events_.next();
  EXPECT_EQ(event.type, EventType::kRejected);
  EXPECT_EQ(event.status, 28);
  ASSERT_EQ(event.params.private_data.size(), 148u);
  EXPECT_EQ(event.params.private_data[0], 'n');
  EXPECT_EQ(event.params.private_data[1], 'o');
  EXPECT_EQ(server_->reject(request.id, why, 28), EINVAL);  // nothing left to refuse
}

TEST_F(ConnectionManagerTest, DestroyingAnUnansweredRequestRejectsTheClient) {
  listen();
  const uint32_t client = routed_client();
  ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
  server_->destroy_id(server_events_.next().id);
  const Event event = client_events_.next();
  EXPECT_EQ(event.type, EventType::kRejected);
  EXPECT_EQ(event.status, 28);
}

TEST_F(ConnectionManagerTest, ADisconnectEndsBothSidesAndTimewaitEnds) {
  uint32_t client = 0, server = 0;
  connect(client, server);
  ASSERT_EQ(client_->disconnect(client), 0);
  EXPECT_EQ(server_events_.next().type, EventType::kDisconnected);
  // The client learns it is over from the server's DREP.
  EXPECT_TRUE(client_events_.empty());
  ASSERT_EQ(server_->disconnect(server), 0);
  const Event disconnected = client_events_.next();
  EXPECT_EQ(disconnected.type, EventType::kDisconnected);
  EXPECT_EQ(disconnected.status, 0);
  // Timewait: 4.096 us * 2^19 / 256 = 2 s.
  EXPECT_EQ(client_events_.next(4s).type, EventType::kTimewaitExit);
  EXPECT_EQ(server_events_.next(4s).type, EventType::kTimewaitExit);
  QpAttributes attributes;
  uint32_t mask = 0;
  EXPECT_EQ(client_->qp_attributes(client, QpState::kRtr, attributes, mask), EINVAL);
}

TEST_F(ConnectionManagerTest, DestroyingAConnectedIdDisconnectsThePeer) {
  uint32_t client = 0, server = 0;
  connect(client, server);
  server_->destroy_id(server);
  EXPECT_EQ(client_events_.next().type, EventType::kDisconnected);
  // Its answer (DREP) goes to a peer that no longer has the id: nothing
  // more happens there, and here the connection is over.
  ASSERT_EQ(client_->disconnect(client), 0);
  QpAttributes attributes;
  uint32_t mask = 0;
  EXPECT_EQ(client_->qp_attributes(client, QpState::kRts, attributes, mask), EINVAL);
}

TEST_F(ConnectionManagerTest, SidrGivesTheServersQpnAndQkey) {
  listen(kPortSpaceUdp, QpType::kUd);
  const uint32_t client = routed_client(kPortSpaceUdp, QpType::kUd);
  ASSERT_EQ(client_->connect(client, params(0x1111, {7})), 0);
  const Event request = server_events_.next();
  ASSERT_EQ(request.type, EventType::kConnectRequest);
  EXPECT_TRUE(request.datagram);
  ASSERT_EQ(request.params.private_data.size(), 180u);
  EXPECT_EQ(request.params.private_data[0], 7);
  ASSERT_EQ(server_->accept(request.id, params(0x3333)), 0);
  const Event established = client_events_.next();
  ASSERT_EQ(established.type, EventType::kEstablished);
  EXPECT_TRUE(established.datagram);
  EXPECT_EQ(established.params.qpn, 0x3333u);
  EXPECT_EQ(established.params.qkey, kRdmaUdpQkey);
  EXPECT_EQ(established.params.private_data.size(), 136u);
  EXPECT_TRUE(server_events_.empty());
}

TEST_F(ConnectionManagerTest, SidrWithoutListenerOrRejectedIsUnreachable) {
  const uint32_t lonely = routed_client(kPortSpaceUdp, QpType::kUd);
  ASSERT_EQ(client_->connect(lonely, params(0x1111)), 0);
  Event event = client_events_.next();
  EXPECT_EQ(event.type, EventType::kUnreachable);
  EXPECT_EQ(event.status, 1);  // SIDR: service ID not supported

  listen(kPortSpaceUdp, QpType::kUd);
  const uint32_t client = routed_client(kPortSpaceUdp, QpType::kUd);
  ASSERT_EQ(client_->connect(client, params(0x1111)), 0);
  const uint8_t why[] = {'x'};
  ASSERT_EQ(server_->reject(server_events_.next().id, why, 28), 0);
  event = client_events_.next();
  EXPECT_EQ(event.type, EventType::kUnreachable);
  EXPECT_EQ(event.status, 2);  // SIDR: rejected
  EXPECT_EQ(event.params.private_data[0], 'x');
}

TEST_F(ConnectionManagerTest, BindRefusesAddressesNoDeviceOwnsAndPortsHeld) {
  const uint32_t first = server_->create_id(server_events_, kPortSpaceTcp, QpType::kRc);
  const uint32_t second = client_->create_id(client_events_, kPortSpaceTcp, QpType::kRc);
  EXPECT_EQ(client_->bind(second, ipv4(198, 51, 100, 7, 7000)), EADDRNOTAVAIL);
  ASSERT_EQ(server_->bind(first, kServer), 0);
  // Loopback binds as the any address does (the kernel's rule): no device,
  // and a clash is "not available".
  IdAddressing bound;
  ASSERT_EQ(server_->query(first, bound), 0);
  EXPECT_FALSE(bound.has_device);
  EXPECT_EQ(client_->bind(second, kServer), EADDRNOTAVAIL);
  EXPECT_EQ(server_->bind(first, kServer), EINVAL);  // bound already
  const uint32_t udp = client_->create_id(client_events_, kPortSpaceUdp, QpType::kUd);
  EXPECT_EQ(client_->bind(udp, kServer), 0);  // another port space
  const uint32_t any_port = client_->create_id(client_events_, kPortSpaceTcp, QpType::kRc);
  ASSERT_EQ(client_->bind(any_port, ipv4(127, 0, 0, 1, 0)), 0);
  IdAddressing addressing;
  ASSERT_EQ(client_->query(any_port, addressing), 0);
  EXPECT_GE(addressing.source.port, kFirstEphemeralCmPort);
  server_->destroy_id(first);
  EXPECT_EQ(client_->bind(second, kServer), 0);  // free again
}

TEST_F(ConnectionManagerTest, AnAddressNoDeviceOwnsFailsResolution) {
  const uint32_t id = client_->create_id(client_events_, kPortSpaceTcp, QpType::kRc);
  ASSERT_EQ(client_->resolve_address(id, nullptr, ipv4(198, 51, 100, 7, 7000)), 0);
  const Event event = client_events_.next();
  EXPECT_EQ(event.type, EventType::kAddrError);
  EXPECT_EQ(event.status, -EHOSTUNREACH);
  EXPECT_EQ(client_->resolve_route(id), EINVAL);
}

TEST_F(ConnectionManagerTest, AMulticastJoinGivesTheGroupsAddress) {
  const uint32_t id = client_->create_id(client_events_, kPortSpaceUdp, QpType::kUd);
  const IpEndpoint group = ipv4(239, 1, 2, 3, 0);
  EXPECT_EQ(client_->join_multicast(id, group, 77), EINVAL);  // not bound yet
  ASSERT_EQ(client_->resolve_address(id, nullptr, group), 0);
  ASSERT_EQ(client_events_.next().type, EventType::kAddrResolved);
  ASSERT_EQ(client_->join_multicast(id, group, 77), 0);
  const Event joined = client_events_.next();
  ASSERT_EQ(joined.type, EventType::kMulticastJoin);
  EXPECT_EQ(joined.multicast, 77u);
  EXPECT_EQ(joined.params.qpn, kMulticastQpn);
  EXPECT_EQ(joined.params.qkey, kRdmaUdpQkey);
  EXPECT_TRUE(joined.av.is_global);
  EXPECT_TRUE(is_multicast_gid(joined.av.dgid));
  EXPECT_EQ(joined.av.dgid[15], 3);
}

}  // namespace
}  // namespace softverbs::cm
