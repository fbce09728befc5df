// What the benchmark process and its peer process say to each other.
//
// RC tasks: the benchmark sends a PeerRequest; the peer opens its endpoint
// and replies with its address; the benchmark connects and sends its own
// EndpointAddress; the peer connects and replies "ready"; both run the task's
// loop for `iterations`; the peer replies once more with the outcome. For
// kWriteSink the benchmark ends the loop with a kFinish request.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "bench/rc_endpoint.h"

namespace softverbs::bench {

enum class PeerTask : uint32_t {
  kSendEcho,      // answer every SEND with a SEND of the same size
  kWriteImmEcho,  // answer every RDMA WRITE with immediate with one of the same size
  kWriteEcho,     // answer every RDMA WRITE with an RDMA WRITE of the same size
  kWriteSink,     // be written to until told to finish
  kCacheLineHop,  // answer every store to the shared cache line with a store
  kFinish,        // ends kWriteSink
  kQuit,          // the peer process exits
};

struct PeerRequest {
  PeerTask task = PeerTask::kQuit;
  uint32_t message_bytes = 0;
  uint64_t iterations = 0;
};

struct PeerReply {
  uint32_t ok = 0;
  char message[244] = {};
  EndpointAddress address;

  static PeerReply success() {
    PeerReply reply;
    reply.ok = 1;
    return reply;
  }
  static PeerReply failure(std::string_view why) {
    PeerReply reply;
    std::memcpy(reply.message, why.data(), std::min(why.size(), sizeof reply.message - 1));
    return reply;
  }
};

// A cache line in memory shared by both processes (mapped before the fork).
struct alignas(64) SharedCacheLine {
  std::atomic<uint64_t> value{0};
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared across processes");

// The mark the k-th RDMA WRITE of a ping-pong puts in its last byte: never 0
// (the buffers start zeroed) and never the previous mark.
inline uint8_t sequence_mark(uint64_t k) { return static_cast<uint8_t>(k % 255 + 1); }

// How long any one wait of a benchmark may take before it is declared hung.
inline constexpr std::chrono::seconds kHangLimit{60};

// A bound for busy-wait loops that reads the clock only now and then.
class SpinDeadline {
 public:
  explicit SpinDeadline(std::chrono::steady_clock::duration limit = kHangLimit)
      : end_(std::chrono::steady_clock::now() + limit) {}
  bool expired() {
    if ((++spins_ & 0x3ff) != 0) return false;
    return std::chrono::steady_clock::now() > end_;
  }

 private:
  std::chrono::steady_clock::time_point end_;
  uint32_t spins_ = 0;
};

}  // namespace softverbs::bench
