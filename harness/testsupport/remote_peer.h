// The peer side of two-process tests on another host. One host runs
// `conformance_tests --serve-peers PORT` (serve_remote_peers); the other
// runs the tests with `--peer HOST:PORT`. Each test's peer is then a fresh
// process on the serving host, forked per TCP connection, that runs the
// peer service the test names (serve_endpoint() for most) on its own
// device, as a forked peer does here.
//
// Both hosts run the same build on the same architecture: the channel
// carries plain structs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "harness/testsupport/forked_peer.h"
#include "harness/testsupport/peer_outcome.h"

namespace softverbs::testsupport {

// The peer side of a test, run by name so that another host's build can run
// it too: what it does with its channel, given the test's argument.
using PeerService = PeerOutcome (*)(PeerChannel& channel, uint32_t argument);

// Registers `service` under `name` (at most 31 characters), from a static
// initializer. Returns true so that it can initialize a constant.
bool register_peer_service(const char* name, PeerService service);

// Runs the service `name` with `argument` as the peer (forked here, or on
// the host --peer names) and `parent` here; returns the peer's outcome, or
// why there was none (no server, an unknown service, the deadline).
PeerOutcome run_with_peer_service(const char* name, uint32_t argument, const ParentBody& parent,
                                  std::chrono::seconds deadline = kDefaultPeerDeadline);

// The peer that serves an Endpoint (serve_endpoint), forked or remote.
PeerOutcome run_with_endpoint_peer(const ParentBody& parent,
                                   std::chrono::seconds deadline = kDefaultPeerDeadline);

// Accepts test runs on `port` (every address, IPv4 and IPv6) for `lifetime`,
// forking one peer process per connection; each peer dies at its test's
// deadline at the latest. Returns 0, or 1 with the reason on stderr when
// the port cannot be had. Prints a line per peer served.
int serve_remote_peers(uint16_t port, std::chrono::seconds lifetime);

}  // namespace softverbs::testsupport
