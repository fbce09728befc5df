// How many packets a reliable QP lets fly unacknowledged. A lossless wire
// (shared memory) never shrinks it below the transport's own limit; a
// network does lose packets when a sender outruns a receiver (a socket
// buffer of 208 KiB, Linux's default for a user, holds about 50 datagrams
// of 4 KiB). Go-back-N then resends the whole window after each loss, and
// the sender makes its own losses again: so loss halves the window, once
// per window of data, down to kMinPackets, and each window's worth of
// acknowledged packets grows it by one (additive increase, multiplicative
// decrease, as TCP does and as RoCE's rate control does in its way).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "emulator/packet/headers.h"

namespace softverbs {

class CongestionWindow {
 public:
  static constexpr uint32_t kMinPackets = 8;

  explicit CongestionWindow(uint32_t max_packets) : max_(max_packets), packets_(max_packets) {}

  uint32_t packets() const { return packets_; }

  // A packet at `lost_psn` was lost (a sequence NAK, an implied NAK, a
  // timeout) while `next_psn` was the next to send: halves the window
  // unless a halving already answered a loss in that stretch of PSNs.
  void on_loss(uint32_t lost_psn, uint32_t next_psn) {
    if (std::getenv("NOSHRINK")) return;
    if (recovering_ && packet::psn_diff(lost_psn, recovery_end_psn_) < 0) return;
    packets_ = std::max(kMinPackets, packets_ / 2);
    acked_toward_growth_ = 0;
    recovering_ = true;
    recovery_end_psn_ = next_psn;
  }

  // `count` more packets were acknowledged.
  void on_acknowledged(uint32_t count) {
    if (packets_ >= max_) return;
    acked_toward_growth_ += count;
    while (acked_toward_growth_ >= packets_ && packets_ < max_) {
      acked_toward_growth_ -= packets_;
      ++packets_;
    }
  }

  void reset() {
    packets_ = max_;
    acked_toward_growth_ = 0;
    recovering_ = false;
  }

 private:
  const uint32_t max_;
  uint32_t packets_;
  uint32_t acked_toward_growth_ = 0;
  bool recovering_ = false;
  uint32_t recovery_end_psn_ = 0;
};

}  // namespace softverbs
