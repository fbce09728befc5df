// The injector's pseudo-random numbers: xoshiro256** seeded through
// splitmix64 (the seeding its authors recommend). Own code rather than
// <random> so a seed gives the same sequence with every standard library.
#pragma once

#include <cstdint>

namespace softverbs::fault {

class Random {
 public:
  explicit Random(uint64_t seed) { reseed(seed); }

  void reseed(uint64_t seed) {
    for (uint64_t& word : state_) word = splitmix64(seed);
  }

  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  // Uniform in [0, bound) for bound > 0 (multiply-shift; the bias is far
  // below anything a fault plan can observe).
  uint64_t below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

  // Advances `x` and returns the next splitmix64 output (also the hash of
  // fault decisions: frame_identity.cc).
  static uint64_t splitmix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace softverbs::fault
