// The two ends of a CM test, set up the way every test needs them: a
// passive side listening on the test address, an active side with its
// address and route resolved to it, and the QP and buffer either one adds
// once its id has a device. The helpers assert; call them through
// ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>

#include "conformance/cm/cm_data_path.h"
#include "conformance/cm/cm_events.h"
#include "conformance/cm/cm_handles.h"

namespace softverbs::conformance::cm {

// Members in creation order: destroyed in reverse, the buffer first.
struct PassiveSide {
  Channel channel;
  CmId listener;
  CmId conn;  // the id a CONNECT_REQUEST brought; its events come on `channel`
  RegisteredBuffer buffer;  // on conn's PD
  uint16_t port = 0;        // the listener's, host byte order
  CmEvent request;
};

struct ActiveSide {
  Channel channel;
  CmId id;
  RegisteredBuffer buffer;
};

// A channel and an id in `ps` bound to the test address (port chosen by the
// CM) and listening.
void listen_on_test_address(PassiveSide& side, rdma_port_space ps, int backlog = 0);

// The next event must be CONNECT_REQUEST: it is kept in side.request and its
// new id in side.conn.
void take_request(PassiveSide& side);

// A channel and an id in `ps`, with ADDR_RESOLVED and ROUTE_RESOLVED to the
// test address at `port`.
void resolve_to_test_address(ActiveSide& side, rdma_port_space ps, uint16_t port);

// The id's QP (rdma_create_qp), the buffer on the id's PD, and receives
// posted into slots 0 .. receives-1.
void add_qp_and_buffer(rdma_cm_id* id, RegisteredBuffer& buffer, uint32_t receives);

// A port no id of `ps` is bound to on the test address: one the CM chose
// for a bind, then released.
uint16_t unused_port(rdma_port_space ps);

// Port of an id's address, host byte order.
uint16_t local_port(rdma_cm_id* id);

}  // namespace softverbs::conformance::cm
