// The RC connection most CM tests start from: a server process listens on
// the test address and accepts one request, a client resolves, connects and
// sees ESTABLISHED. Each side names its buffer in its private data (a
// Greeting), so an RDMA WRITE needs nothing else. The two sides ask for
// different responder resources, initiator depths and RNR retry counts, so
// that a CM which swaps (or fails to swap) them shows it.
#pragma once

#include <rdma/rdma_cma.h>

#include <cstdint>
#include <vector>

#include "conformance/cm/cm_sides.h"
#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {

// Steps the two processes of an RC test signal each other.
enum RcStep : uint32_t {
  kListening = 1,  // followed by the port (uint16_t)
  kClientDone = 2,
  kServerDone = 3,
};

// Private data of the connect (client) and of the accept (server).
struct Greeting {
  RemoteBuffer buffer;  // the sender's slot kWriteSlot
  char marker[8];
};

inline constexpr uint32_t kWriteSlot = 12;
inline constexpr char kClientMarker[8] = "client!";
inline constexpr char kServerMarker[8] = "server!";

// What the client asks for in rdma_connect.
inline constexpr uint8_t kClientResponderResources = 2;
inline constexpr uint8_t kClientInitiatorDepth = 3;
inline constexpr uint8_t kClientRetryCount = 5;
inline constexpr uint8_t kClientRnrRetryCount = 6;
// What the server gives in rdma_accept.
inline constexpr uint8_t kServerResponderResources = 4;
inline constexpr uint8_t kServerInitiatorDepth = 1;
inline constexpr uint8_t kServerRnrRetryCount = 3;

Greeting make_greeting(RegisteredBuffer& buffer, const char (&marker)[8]);
std::vector<uint8_t> greeting_bytes(const Greeting& greeting);

// `greeting` must stay alive while the parameter is used.
rdma_conn_param client_param(const Greeting& greeting);
rdma_conn_param server_param(const Greeting& greeting);

// Server: listens, sends kListening and the port, takes the request, adds a
// QP with `receives` receives posted, accepts with its Greeting and waits
// for ESTABLISHED.
void serve_one_rc(PassiveSide& side, PeerLink& link, uint32_t receives);

// Client: waits for kListening and the port, resolves, adds a QP with
// `receives` receives posted, connects with its Greeting; `established` is
// the event that answered (ESTABLISHED, asserted).
void connect_rc(ActiveSide& side, PeerLink& link, uint32_t receives, CmEvent& established);

// The Greeting in an event's private data.
Greeting greeting_in(const CmEvent& event);

}  // namespace softverbs::conformance::cm
