// Two-process tests in which the test process holds one Endpoint and drives
// another in a peer process (harness/testsupport/remote_endpoint.h), forked
// here or on the host --peer names (remote_peer.h): both are opened and
// connected to each other, then the test body runs with gtest assertions in
// the test process only.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "harness/testsupport/endpoint.h"
#include "harness/testsupport/forked_peer.h"
#include "harness/testsupport/remote_endpoint.h"
#include "harness/testsupport/remote_peer.h"
#include "harness/testsupport/soft_control.h"
#include "harness/testsupport/test_config.h"
#include "harness/testsupport/verbs_names.h"

namespace softverbs::conformance {

using namespace softverbs::testsupport;
using namespace std::chrono_literals;

struct PairOptions {
  EndpointConfig local{};
  EndpointConfig remote{};
  RcParameters local_params{};
  RcParameters remote_params{};
  // Where each QP stops on the way up: RTS, or RTR for a QP that only
  // receives (COMM_EST is raised there).
  ibv_qp_state local_final_state = IBV_QPS_RTS;
  ibv_qp_state remote_final_state = IBV_QPS_RTS;
  std::chrono::seconds deadline = kDefaultPeerDeadline;
};

// The local QP is connected to the remote one; `remote_info` describes the
// remote endpoint (its buffer, restricted region and process id).
using PairBody = std::function<void(Endpoint& local, RemoteEndpoint& remote,
                                    const EndpointInfo& remote_info)>;

// Runs `body` against a connected pair and returns the peer's outcome (a
// test that kills its peer inspects it).
PeerOutcome run_connected_pair(const PairOptions& options, const PairBody& body);

// The same, and the peer must have ended well.
void with_connected_pair(const PairOptions& options, const PairBody& body);

// Options with the same QP type on both sides and the same parameters.
PairOptions symmetric_options(const RcParameters& params = {},
                              ibv_qp_type qp_type = IBV_QPT_RC);

// Why fault tests skip where the control interface is absent.
inline constexpr const char* kNoSoftControl =
    "needs the softverbs control interface (softverbs_control): fault injection, forced RNR "
    "and port control exist only on soft devices";

// The same-host shortcuts softverbs' environment leaves on: initiators
// execute one-sided operations on a peer of this host (SOFTVERBS_DIRECT
// not 0), and MR pages are shared so that atomics and WRITE with immediate
// go that way too (SOFTVERBS_SHARE_MR_PAGES not 0). Tests expect their
// counters by these, so the suite holds with either turned off.
bool direct_execution_on();
bool mr_pages_shared();

// Kills the peer with SIGKILL, from outside and at once as any killer
// would (on another host, by the peer itself on request), and returns once
// it is gone; a peer of this host is this process's child and stays
// unreaped. Fails the test when it cannot.
void kill_peer(RemoteEndpoint& remote, const EndpointInfo& info);

// Fails with the first wrong completion's description; `what` names it.
void expect_completion(const ibv_wc& wc, uint64_t wr_id, ibv_wc_status status,
                       const std::string& what);

}  // namespace softverbs::conformance
