#include "conformance/cm/cm_sides.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "conformance/cm/cm_test_config.h"

namespace softverbs::conformance::cm {

uint16_t local_port(rdma_cm_id* id) { return ntohs(rdma_get_src_port(id)); }

void listen_on_test_address(PassiveSide& side, rdma_port_space ps, int backlog) {
  side.channel = make_channel();
  ASSERT_TRUE(side.channel);
  side.listener = make_id(side.channel.get(), ps);
  ASSERT_TRUE(side.listener);
  sockaddr_in address = test_address(0);
  ASSERT_EQ(0, rdma_bind_addr(side.listener.get(), reinterpret_cast<sockaddr*>(&address)))
      << "rdma_bind_addr " << test_address_text() << ": " << strerror(errno);
  ASSERT_EQ(0, rdma_listen(side.listener.get(), backlog)) << "rdma_listen: " << strerror(errno);
  side.port = local_port(side.listener.get());
  ASSERT_NE(0, side.port) << "the CM chose no port";
}

void take_request(PassiveSide& side) {
  side.request = next_event(side.channel.get());
  ASSERT_TRUE(is_event(side.request, RDMA_CM_EVENT_CONNECT_REQUEST));
  ASSERT_NE(nullptr, side.request.id);
  side.conn.reset(side.request.id);
}

void resolve_to_test_address(ActiveSide& side, rdma_port_space ps, uint16_t port) {
  side.channel = make_channel();
  ASSERT_TRUE(side.channel);
  side.id = make_id(side.channel.get(), ps);
  ASSERT_TRUE(side.id);
  sockaddr_in destination = test_address(port);
  ASSERT_EQ(0, rdma_resolve_addr(side.id.get(), nullptr, reinterpret_cast<sockaddr*>(&destination),
                                 2000))
      << "rdma_resolve_addr " << test_address_text() << ": " << strerror(errno);
  ASSERT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(0, rdma_resolve_route(side.id.get(), 2000)) << "rdma_resolve_route: " << strerror(errno);
  ASSERT_TRUE(is_event(next_event(side.channel.get()), RDMA_CM_EVENT_ROUTE_RESOLVED));
}

void add_qp_and_buffer(rdma_cm_id* id, RegisteredBuffer& buffer, uint32_t receives) {
  ASSERT_TRUE(create_qp(id));
  ASSERT_TRUE(buffer.register_on(id->pd));
  for (uint32_t slot = 0; slot < receives; ++slot) ASSERT_TRUE(post_receive(id->qp, buffer, slot));
}

uint16_t unused_port(rdma_port_space ps) {
  CmId id = make_id(nullptr, ps);
  if (!id) return 0;
  sockaddr_in address = test_address(0);
  if (rdma_bind_addr(id.get(), reinterpret_cast<sockaddr*>(&address)) != 0) {
    ADD_FAILURE() << "rdma_bind_addr: " << strerror(errno);
    return 0;
  }
  return local_port(id.get());
}

}  // namespace softverbs::conformance::cm
