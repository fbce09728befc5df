#include "emulator/wire/loopback_wire.h"

namespace softverbs {

bool LoopbackWire::send(const WireAddress&, std::span<const uint8_t> frame) {
  ++counters_.frames_sent;
  if (filter_ && !filter_(frame)) return true;  // lost on the wire
  frames_.emplace_back(frame.begin(), frame.end());
  return true;
}

size_t LoopbackWire::poll(const std::function<void(std::span<const uint8_t>)>& deliver,
                          size_t budget) {
  size_t n = 0;
  while (n < budget && !frames_.empty()) {
    std::vector<uint8_t> frame = std::move(frames_.front());
    frames_.pop_front();
    ++counters_.frames_received;
    deliver(frame);
    ++n;
  }
  return n;
}

}  // namespace softverbs
