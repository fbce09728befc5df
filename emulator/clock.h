// Time comes through this interface so unit tests can run the protocol on a
// simulated clock (a 67 ms retransmit timeout tested in microseconds).
#pragma once

#include <cstdint>

namespace softverbs {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
};

// CLOCK_MONOTONIC.
class SteadyClock final : public Clock {
 public:
  uint64_t now_ns() const override;
  static SteadyClock& instance();
};

// Advanced by hand; for deterministic tests.
class ManualClock final : public Clock {
 public:
  uint64_t now_ns() const override { return now_; }
  void advance(uint64_t ns) { now_ += ns; }

 private:
  uint64_t now_ = 1'000'000'000;
};

}  // namespace softverbs
