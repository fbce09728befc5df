#include "conformance/peer_pair.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace softverbs::conformance {
namespace {

bool turned_off(const char* variable) {
  const char* value = std::getenv(variable);
  return value && std::string_view(value) == "0";
}

}  // namespace

bool direct_execution_on() { return !turned_off("SOFTVERBS_DIRECT"); }
bool mr_pages_shared() { return !turned_off("SOFTVERBS_SHARE_MR_PAGES"); }

PeerOutcome run_connected_pair(const PairOptions& options, const PairBody& body) {
  return run_with_endpoint_peer(
      [&](PeerChannel& channel) {
        RemoteEndpoint remote(channel);
        Endpoint local;
        ASSERT_EQ(0, local.open(options.local)) << "open the local endpoint";
        EndpointInfo remote_info;
        Errno err = remote.open(options.remote, remote_info);
        ASSERT_EQ(0, err) << "open the peer's endpoint: " << remote.why();
        // The peer first: a QP that sends must find its peer at least in RTR.
        err = remote.connect(local.info(), options.remote_params, options.remote_final_state);
        ASSERT_EQ(0, err) << "connect the peer's QP: " << remote.why();
        err = local.connect(remote_info, options.local_params, options.local_final_state);
        ASSERT_EQ(0, err) << "connect the local QP: " << describe_errno(err);
        body(local, remote, remote_info);
      },
      options.deadline);
}

void with_connected_pair(const PairOptions& options, const PairBody& body) {
  const PeerOutcome peer = run_connected_pair(options, body);
  EXPECT_TRUE(peer.passed) << "peer process: " << peer.message;
}

PairOptions symmetric_options(const RcParameters& params, ibv_qp_type qp_type) {
  PairOptions options;
  options.local.qp_type = options.remote.qp_type = qp_type;
  options.local.psn = 0xfffff0;  // close to 2^24: long runs cross the PSN wrap
  options.remote.psn = 0x000200;
  options.local_params = options.remote_params = params;
  return options;
}

void kill_peer(RemoteEndpoint& remote, const EndpointInfo& info) {
  if (peer_is_remote()) {
    ASSERT_EQ(0, remote.kill()) << remote.why();
    return;
  }
  ASSERT_EQ(0, ::kill(info.pid, SIGKILL));
  // kill() returns before the process is gone, and an adapter that places
  // WRITEs without the target's CPU may still place them until it is. The
  // peer is this process's child: wait for its death without reaping it.
  siginfo_t died{};
  ASSERT_EQ(0, waitid(P_PID, static_cast<id_t>(info.pid), &died, WEXITED | WNOWAIT))
      << std::strerror(errno);
}

void expect_completion(const ibv_wc& wc, uint64_t wr_id, ibv_wc_status status,
                       const std::string& what) {
  EXPECT_EQ(wr_id, wc.wr_id) << what << ": " << describe_completion(wc);
  EXPECT_EQ(status, wc.status) << what << ": expected " << ibv_wc_status_str(status) << ", got "
                               << describe_completion(wc);
}

}  // namespace softverbs::conformance
