#include "emulator/wire/loopback_wire.h"

namespace softverbs {

bool LoopbackWire::send(const WireAddress&, std::span<const uint8_t> frame) {
  std::lock_guard lock(mutex_);
  ++counters_.frames_sent;
  if (filter_ && !filter_(frame)) return true;  // lost on the wire
  frames_.emplace_back(frame.begin(), frame.end());
  ++frames_queued_;
  return true;
}

size_t LoopbackWire::poll(const std::function<void(std::span<const uint8_t>)>& deliver,
                          size_t budget) {
  size_t n = 0;
  while (n < budget) {
    std::vector<uint8_t> frame;
    {
      // Not held while delivering: a delivery may send (an ACK).
      std::lock_guard lock(mutex_);
      if (frames_.empty()) break;
      frame = std::move(frames_.front());
      frames_.pop_front();
      ++counters_.frames_received;
    }
    deliver(frame);
    ++n;
  }
  return n;
}

}  // namespace softverbs
