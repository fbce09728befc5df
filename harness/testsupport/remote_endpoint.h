// An Endpoint (endpoint.h) living in a forked peer process and driven from
// the test process by request over the PeerChannel: the child runs
// serve_endpoint(), the parent holds a RemoteEndpoint whose calls mirror
// Endpoint's. Assertions stay in the test process, where GoogleTest sees
// them; the child only executes and reports.
//
//   run_with_forked_peer(serve_endpoint, [&](PeerChannel& channel) {
//     RemoteEndpoint responder(channel);
//     EndpointInfo info;
//     ASSERT_EQ(0, responder.open(config, info)) << responder.why();
//     ...
//   });
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/testsupport/endpoint.h"
#include "harness/testsupport/peer_channel.h"
#include "harness/testsupport/peer_outcome.h"

namespace softverbs::testsupport {

// The child's side: executes requests until the parent stops sending.
PeerOutcome serve_endpoint(PeerChannel& channel);

struct RemoteRequest;  // the wire format, in remote_endpoint.cc
struct RemoteReply;

class RemoteEndpoint {
 public:
  explicit RemoteEndpoint(PeerChannel& channel) : channel_(channel) {}

  // Each call returns the verb's errno in the peer, or the channel's errno
  // (then why() says what went wrong on the line).
  Errno open(const EndpointConfig& config, EndpointInfo& info);
  Errno connect(const EndpointInfo& remote, const RcParameters& params,
                ibv_qp_state final_state = IBV_QPS_RTS);
  Errno post_send(const SendSpec& spec);
  Errno post_recv(const RecvSpec& spec);
  Errno poll(Queue queue, size_t count, std::vector<ibv_wc>& out,
             std::chrono::milliseconds timeout = kCompletionTimeout);
  // IBV_QPS_UNKNOWN when the request failed.
  ibv_qp_state state();
  Errno move_to(ibv_qp_state state, bool sqd_notify = false);
  // Endpoint::wait_for_async_event in the peer: `found` is the event of
  // `type` (on the peer's QP, for QP events) if one came within `timeout`;
  // events of other kinds that came first go to `others`.
  Errno wait_for_async_event(ibv_event_type type, std::chrono::milliseconds timeout,
                             std::optional<AsyncEventRecord>& found,
                             std::vector<AsyncEventRecord>* others = nullptr);
  Errno fill(uint64_t offset, uint64_t length, uint64_t seed);
  Errno fill_constant(uint64_t offset, uint64_t length, uint8_t value);
  // 0 and no mismatch when every byte is right.
  Errno check(uint64_t offset, uint64_t length, uint64_t seed,
              std::optional<ByteMismatch>& mismatch);
  Errno check_constant(uint64_t offset, uint64_t length, uint8_t value,
                       std::optional<ByteMismatch>& mismatch);
  Errno read_word(uint64_t offset, uint64_t& value);
  Errno write_word(uint64_t offset, uint64_t value);
  // The peer's own CPU adds 1 to the word `count` times, each an atomic
  // instruction (what its program would do beside a peer's atomics).
  Errno add_to_word(uint64_t offset, uint64_t count);
  // Endpoint::unmap_buffer in the peer.
  Errno unmap_buffer();
  // The peer process kills itself with SIGKILL; returns once its end of the
  // channel closed.
  Errno kill();
  // softverbs_control in the peer's process (soft_control.h).
  Errno control(std::string_view request, std::string& reply);

  // What went wrong on the channel, naming the peer's own failure if any.
  const std::string& why() const { return why_; }

 private:
  // Sends `request` (and `text`, if given), receives the reply (and its
  // text, if `reply_text` is given). Returns the channel's errno or the
  // peer's.
  Errno call(const RemoteRequest& request, RemoteReply& reply,
             const std::string* text = nullptr, std::string* reply_text = nullptr);

  PeerChannel& channel_;
  std::string why_;
};

}  // namespace softverbs::testsupport
