// CRC-32 by folding with carry-less multiplication (PCLMULQDQ), after the
// method of Gopal et al., "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction" (Intel, 2009).
//
// Four 128-bit accumulators each hold a slice of the message. Folding one
// forward by D bits replaces its polynomial X = H*x^64 + L (H: its first
// 64 message bits) with H*(x^(D+64) mod P) + L*(x^D mod P), congruent
// modulo P and short enough to XOR onto the data D bits further on. When
// the data runs out, the one remaining accumulator is a 16-byte message
// with the same CRC as everything folded into it, and the table engine
// finishes from there.
#include "emulator/packet/crc32_engines.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace softverbs::packet::crc32_engines {

#if defined(__x86_64__)
namespace {

// Multiplier for folding: x^n mod P (degree below 32) in the data's
// reflected bit order, as a 33-bit value (hence the shift by one). The
// carry-less product of a reflected 64-bit half and such a multiplier reads,
// in the 128-bit accumulator, as the true product times x^32.
constexpr uint64_t fold_multiplier(int n) {
  uint32_t remainder = 1;  // x^0, normal bit order
  for (int i = 0; i < n; ++i) {
    const bool carry = remainder & 0x80000000u;
    remainder <<= 1;
    if (carry) remainder ^= 0x04c11db7u;
  }
  uint32_t reflected = 0;
  for (int bit = 0; bit < 32; ++bit) {
    if (remainder & (1u << bit)) reflected |= 1u << (31 - bit);
  }
  return uint64_t{reflected} << 1;
}

// Folding by D bits needs H * x^(D + 64) and L * x^D; with the x^32 that
// the product adds (see above), the multipliers are x^(D + 32) for H (the
// low register half: the earlier message bits) and x^(D - 32) for L.
struct FoldConstants {
  uint64_t for_high_degree;  // applies to H
  uint64_t for_low_degree;   // applies to L
};
constexpr FoldConstants kFoldBy64Bytes{fold_multiplier(512 + 32),
                                       fold_multiplier(512 - 32)};
constexpr FoldConstants kFoldBy16Bytes{fold_multiplier(128 + 32),
                                       fold_multiplier(128 - 32)};

__attribute__((target("pclmul,sse4.1"))) inline __m128i
constants(FoldConstants c) {
  return _mm_set_epi64x(static_cast<long long>(c.for_low_degree),
                        static_cast<long long>(c.for_high_degree));
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i
fold(__m128i accumulator, __m128i multipliers, __m128i next_data) {
  const __m128i high_part = _mm_clmulepi64_si128(accumulator, multipliers, 0x00);
  const __m128i low_part = _mm_clmulepi64_si128(accumulator, multipliers, 0x11);
  return _mm_xor_si128(_mm_xor_si128(high_part, low_part), next_data);
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i load(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

}  // namespace

bool clmul_available() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_PCLMUL) && (ecx & bit_SSE4_1);
}

__attribute__((target("pclmul,sse4.1"))) uint32_t clmul_update(
    uint32_t state, const uint8_t* p, size_t count) {
  if (count < kClmulMinBytes) return table_update(state, p, count);

  // The running state enters as an XOR onto the first 32 message bits.
  __m128i x0 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x1 = load(p + 16);
  __m128i x2 = load(p + 32);
  __m128i x3 = load(p + 48);
  p += 64;
  count -= 64;

  const __m128i by64 = constants(kFoldBy64Bytes);
  while (count >= 64) {
    x0 = fold(x0, by64, load(p));
    x1 = fold(x1, by64, load(p + 16));
    x2 = fold(x2, by64, load(p + 32));
    x3 = fold(x3, by64, load(p + 48));
    p += 64;
    count -= 64;
  }

  const __m128i by16 = constants(kFoldBy16Bytes);
  __m128i x = fold(x0, by16, x1);
  x = fold(x, by16, x2);
  x = fold(x, by16, x3);
  while (count >= 16) {
    x = fold(x, by16, load(p));
    p += 16;
    count -= 16;
  }

  // `x` now stands for all the data so far; its CRC from a zero state is
  // the running state, and the last few bytes continue from there.
  alignas(16) uint8_t pending[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(pending), x);
  return table_update(table_update(0, pending, sizeof pending), p, count);
}

#else  // not x86-64: the table engine only

bool clmul_available() { return false; }

uint32_t clmul_update(uint32_t state, const uint8_t* p, size_t count) {
  return table_update(state, p, count);
}

#endif

}  // namespace softverbs::packet::crc32_engines
