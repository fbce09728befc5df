#include "emulator/engine/clock.h"

#include <time.h>

namespace softverbs {

uint64_t SteadyClock::now_ns() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

uint64_t SteadyClock::wallclock_ns() const {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

SteadyClock& SteadyClock::instance() {
  // Never destroyed: the progress thread may read the clock while static
  // objects are being torn down at exit.
  static SteadyClock* clock = new SteadyClock;
  return *clock;
}

}  // namespace softverbs
