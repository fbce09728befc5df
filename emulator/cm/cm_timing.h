// The handshake's times and retries: the kernel CM's. A REQ or REP waits
// twice the packet lifetime plus the peer's response time (about 6 s), a
// DREQ twice its ACK timeout; each is sent again up to 15 times.
#pragma once

#include <cstdint>

namespace softverbs::cm {

inline constexpr uint8_t kCmResponseTimeout = 20;  // 4.096 us * 2^20: about 4 s
inline constexpr uint8_t kMaxCmRetries = 15;

// IBTA time codes (4.096 us * 2^code) in nanoseconds.
constexpr uint64_t time_code_ns(uint8_t code) { return 4096ull << code; }

// How long a REQ or REP waits for its reply.
constexpr uint64_t reply_timeout_ns(uint8_t packet_life_time) {
  return 2 * time_code_ns(packet_life_time) + time_code_ns(kCmResponseTimeout);
}

}  // namespace softverbs::cm
