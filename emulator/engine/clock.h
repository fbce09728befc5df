// Time comes through this interface so unit tests can run the protocol on a
// simulated clock (a 67 ms retransmit timeout tested in microseconds).
#pragma once

#include <atomic>
#include <cstdint>

namespace softverbs {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t now_ns() const = 0;
  // Nanoseconds since the Unix epoch (CLOCK_REALTIME): completion
  // wall-clock timestamps only, never deadlines (it may jump).
  virtual uint64_t wallclock_ns() const = 0;
};

// CLOCK_MONOTONIC.
class SteadyClock final : public Clock {
 public:
  uint64_t now_ns() const override;
  uint64_t wallclock_ns() const override;  // CLOCK_REALTIME
  static SteadyClock& instance();
};

// Advanced by hand; for deterministic tests. Atomic, so a test may
// advance it while an engine's progress thread reads it.
class ManualClock final : public Clock {
 public:
  uint64_t now_ns() const override { return now_.load(std::memory_order_relaxed); }
  // Moves with now_ns(), from a fixed date (2024-01-01), so a run replays.
  uint64_t wallclock_ns() const override { return kWallclockAtStart + now_ns(); }
  void advance(uint64_t ns) { now_.fetch_add(ns, std::memory_order_relaxed); }

 private:
  static constexpr uint64_t kWallclockAtStart = 1'704'067'200ull * 1'000'000'000ull;
  std::atomic<uint64_t> now_{1'000'000'000};
};

}  // namespace softverbs
