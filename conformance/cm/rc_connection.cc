#include "conformance/cm/rc_connection.h"

#include <cerrno>
#include <cstring>

namespace softverbs::conformance::cm {

Greeting make_greeting(RegisteredBuffer& buffer, const char (&marker)[8]) {
  Greeting greeting;
  greeting.buffer = buffer.remote_slot(kWriteSlot);
  std::memcpy(greeting.marker, marker, sizeof greeting.marker);
  return greeting;
}

std::vector<uint8_t> greeting_bytes(const Greeting& greeting) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&greeting);
  return std::vector<uint8_t>(bytes, bytes + sizeof greeting);
}

rdma_conn_param client_param(const Greeting& greeting) {
  rdma_conn_param param{};
  param.private_data = &greeting;
  param.private_data_len = sizeof greeting;
  param.responder_resources = kClientResponderResources;
  param.initiator_depth = kClientInitiatorDepth;
  param.retry_count = kClientRetryCount;
  param.rnr_retry_count = kClientRnrRetryCount;
  return param;
}

rdma_conn_param server_param(const Greeting& greeting) {
  rdma_conn_param param{};
  param.private_data = &greeting;
  param.private_data_len = sizeof greeting;
  param.responder_resources = kServerResponderResources;
  param.initiator_depth = kServerInitiatorDepth;
  param.rnr_retry_count = kServerRnrRetryCount;
  return param;
}

Greeting greeting_in(const CmEvent& event) {
  Greeting greeting{};
  if (event.private_data.size() >= sizeof greeting)
    std::memcpy(&greeting, event.private_data.data(), sizeof greeting);
  return greeting;
}

void serve_one_rc(PassiveSide& side, PeerLink& link, uint32_t receives) {
  ASSERT_NO_FATAL_FAILURE(listen_on_test_address(side, RDMA_PS_TCP));
  ASSERT_TRUE(link.signal(kListening));
  ASSERT_TRUE(link.send(side.port));
  ASSERT_NO_FATAL_FAILURE(take_request(side));
  ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.conn.get(), side.buffer, receives));
  const Greeting greeting = make_greeting(side.buffer, kServerMarker);
  rdma_conn_param param = server_param(greeting);
  ASSERT_EQ(0, rdma_accept(side.conn.get(), &param)) << "rdma_accept: " << strerror(errno);
  ASSERT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_ESTABLISHED));
}

void connect_rc(ActiveSide& side, PeerLink& link, uint32_t receives, CmEvent& established) {
  uint16_t port = 0;
  ASSERT_TRUE(link.wait_for(kListening));
  ASSERT_TRUE(link.receive(port));
  ASSERT_NO_FATAL_FAILURE(resolve_to_test_address(side, RDMA_PS_TCP, port));
  ASSERT_NO_FATAL_FAILURE(add_qp_and_buffer(side.id.get(), side.buffer, receives));
  const Greeting greeting = make_greeting(side.buffer, kClientMarker);
  rdma_conn_param param = client_param(greeting);
  ASSERT_EQ(0, rdma_connect(side.id.get(), &param)) << "rdma_connect: " << strerror(errno);
  established = next_event(side.channel.get());
  ASSERT_TRUE(is_event(established, RDMA_CM_EVENT_ESTABLISHED));
}

}  // namespace softverbs::conformance::cm
