// Rounding float32 values to float16 / bfloat16 and back in one pass, for loops that keep 16-bit
// results widened to float32 (the FusedElementwise kernel's registers). Each gives exactly what
// storing the value in the 16-bit type (core/float_convert.h's FromFloat, core/half.h's scalar
// conversions: nearest, ties to even, NaN made quiet) and reading it back gives, without the
// uint16_t buffer in between; the bfloat16 one is branch-free integer arithmetic on the float's
// bits, so the loops that call it vectorise. tests/cpp/round_16bit_test.cc checks both against the
// scalar conversions, special values included.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/half.h"

namespace tob::ew {

// BFloat16BitsToFloat(FloatToBFloat16Bits(x)).
inline float RoundToBFloat16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (bits | 0x00400000u) & 0xffff0000u;
  const uint32_t r = (bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  float y;
  std::memcpy(&y, &r, sizeof(y));
  return y;
}

// y[i] = RoundToBFloat16(x[i]) for i < n; x and y may be the same array.
inline void RoundToBFloat16(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = RoundToBFloat16(x[i]);
}

// y[i] = x[i] rounded to float16 and widened back (F16C's conversions where compiled in, as
// FromFloat / ToFloat use them; core/half.h's otherwise); x and y may be the same array.
inline void RoundToFloat16(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) y[i] = HalfBitsToFloat(FloatToHalfBits(x[i]));
}

// Stores n float32 values that bfloat16 represents exactly (RoundToBFloat16's results) as
// bfloat16: their high halves, no rounding left to do.
inline void NarrowExactToBFloat16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    y[i] = static_cast<uint16_t>(bits >> 16);
  }
}

}  // namespace tob::ew
