// Which bit an injected corruption flips. Any bit of the frame may be hit
// except the few the ICRC deliberately leaves out (variant fields a switch may
// rewrite, IBTA 7.8.1), because a flip there would reach the receiver unseen
// and the point of the fault is to make the receiver's checks catch it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/fault/random.h"

namespace softverbs::fault {

// True when the ICRC of this IB frame covers bit `bit` (0 = the most
// significant bit of byte 0). Frames whose LRH can't be read are treated as
// covered everywhere.
bool icrc_covers_bit(std::span<const uint8_t> frame, size_t bit);

// A uniformly chosen bit that icrc_covers_bit(). `frame` must not be empty.
size_t choose_bit_to_flip(std::span<const uint8_t> frame, Random& random);

inline void flip_bit(std::span<uint8_t> frame, size_t bit) {
  frame[bit / 8] ^= static_cast<uint8_t>(0x80u >> (bit % 8));
}

}  // namespace softverbs::fault
