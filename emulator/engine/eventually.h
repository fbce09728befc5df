// For tests of threads the test does not drive: waits until `condition`
// holds, looking every 100 µs, and gives up after `within` (long enough
// for a busy machine, short enough for a failing test to end).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace softverbs {

inline bool eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds within = std::chrono::seconds(10)) {
  const auto give_up = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < give_up) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return condition();
}

}  // namespace softverbs
