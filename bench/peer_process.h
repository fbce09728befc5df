// The peer process of the benchmarks: forked once at start-up, before this
// process makes any verbs call (a verbs context must not cross fork), it
// serves one task after another (see peer_protocol.h) until told to quit.
#pragma once

#include <string>

#include "bench/channel.h"
#include "bench/peer_protocol.h"

namespace softverbs::bench {

class PeerProcess {
 public:
  // Maps the shared cache line and forks the peer.
  static bool start(std::string& error);
  // nullptr when the peer was never started or has been given up on.
  static PeerProcess* get();
  // Asks the peer to quit and reaps it.
  static void stop();
  // After a failure the conversation can't be resumed: kill the peer; the
  // benchmarks that need it are then skipped with `why`.
  static void abandon(const std::string& why);
  // Why get() returns nullptr.
  static const std::string& gone_reason();

  Channel& channel() { return channel_; }
  SharedCacheLine& cache_line() { return *cache_line_; }

 private:
  Channel channel_;
  SharedCacheLine* cache_line_ = nullptr;
  int pid_ = -1;
};

}  // namespace softverbs::bench
