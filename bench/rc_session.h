// The benchmark process's side of an RC task's set-up and tear-down with the
// peer process (the handshake of peer_protocol.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "bench/peer_protocol.h"
#include "bench/rc_endpoint.h"

namespace softverbs::bench {

class RcSession {
 public:
  // Asks the peer for `task` over `iterations` messages of `message_bytes`,
  // opens and connects the local endpoint. nullptr and `error` on failure;
  // a failure that breaks the conversation abandons the peer.
  static std::unique_ptr<RcSession> start(PeerTask task, uint32_t message_bytes,
                                          uint64_t iterations, std::string& error);

  RcEndpoint& endpoint() { return *endpoint_; }

  // After the loop: ends a kWriteSink stream and collects the peer's outcome.
  bool finish(std::string& error);
  // After a failed loop: the peer is still in its loop, so give up on it.
  void abandon(const std::string& why);

 private:
  PeerTask task_ = PeerTask::kQuit;
  std::unique_ptr<RcEndpoint> endpoint_;
};

}  // namespace softverbs::bench
