#include "emulator/fault/bit_flip.h"

#include "emulator/packet/codec.h"

namespace softverbs::fault {
namespace {

constexpr uint8_t kLnhGlobal = 3;
constexpr size_t kBthResv8aOffset = 4;  // F, B and six reserved bits
constexpr size_t kGrhHopLimitOffset = 7;

// Bits of byte `offset` that the ICRC masks (IBTA 7.8.1, and icrc.h).
uint8_t variant_bits(std::span<const uint8_t> frame, size_t offset) {
  using packet::kBthBytes;
  using packet::kGrhBytes;
  using packet::kLrhBytes;
  if (frame.size() < kLrhBytes) return 0;
  if ((frame[1] & 0x3) != kLnhGlobal) {
    if (offset == 0) return 0xf0;  // VL
    if (offset == kLrhBytes + kBthResv8aOffset) return 0xff;
    return 0;
  }
  // Global: a router rewrites the whole LRH, and the GRH's traffic class,
  // flow label and hop limit.
  if (offset < kLrhBytes) return 0xff;
  const size_t grh = offset - kLrhBytes;
  if (grh == 0) return 0x0f;  // traffic class, high half (the version stays)
  if (grh <= 3 || grh == kGrhHopLimitOffset) return 0xff;
  if (grh == kGrhBytes + kBthResv8aOffset) return 0xff;
  static_assert(kBthResv8aOffset < kBthBytes);
  return 0;
}

}  // namespace

bool icrc_covers_bit(std::span<const uint8_t> frame, size_t bit) {
  const uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
  return (variant_bits(frame, bit / 8) & mask) == 0;
}

size_t choose_bit_to_flip(std::span<const uint8_t> frame, Random& random) {
  // Rejection sampling: variant bits are at most a quarter of any frame (108
  // of a global frame's >= 480), so a few draws suffice; the bounded loop
  // falls back to the ICRC's last bit, which the check always notices.
  const uint64_t bits = uint64_t{frame.size()} * 8;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const size_t bit = random.below(bits);
    if (icrc_covers_bit(frame, bit)) return bit;
  }
  return bits - 1;
}

}  // namespace softverbs::fault
