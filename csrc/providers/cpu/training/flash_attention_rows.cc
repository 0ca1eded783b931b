// The portable variant of FlashAttention's bfloat16 row passes (flash_attention_rows.h): AVX2
// lanes where the build has them (it targets x86-64-v3), a scalar tail, scalar everywhere else; and
// the choice between it and the AVX-512 variant (flash_attention_rows_avx512.cc). Compiled with
// the engine's flags in this one file, so a caller built with other flags (a test) gets these
// functions as the engine runs them.
#include "providers/cpu/training/flash_attention_rows.h"

#include <cmath>

#include "providers/cpu/nn/vec_math.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TOB_FLASH_ROWS_AVX2 1

#include "providers/cpu/simd/avx2_exp.h"
#endif

namespace tob::flash_rows {

namespace portable {

namespace {

#if defined(TOB_FLASH_ROWS_AVX2)
// FloatToBFloat16Bits of 8 floats, each in the low half of a 32-bit lane.
__m256i RoundBits(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

// Stores the 16 bfloat16 values of two RoundBits results (lo first) at y.
void Store16(uint16_t* y, __m256i lo, __m256i hi) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8));
}
#endif

// y[i] = bfloat16(exp(x[i] - shift)) for i < n (zero up to n_even); returns the float32 sum of the
// unrounded exponentials. The exp is the CPU provider's (simd::Exp), as vec::ExpShiftedSum's.
float ExpShiftedSumToBf16(const float* x, int64_t n, float shift, uint16_t* y, int64_t n_even) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_FLASH_ROWS_AVX2)
  const __m256 sh = _mm256_set1_ps(shift);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    const __m256 e1 = simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh));
    a0 = _mm256_add_ps(a0, e0);
    a1 = _mm256_add_ps(a1, e1);
    Store16(y + i, RoundBits(e0), RoundBits(e1));
  }
  const __m256 a = _mm256_add_ps(a0, a1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  s = _mm_cvtss_f32(h);
#endif
  for (; i < n; ++i) {
    const float e = std::exp(x[i] - shift);
    s += e;
    y[i] = FloatToBFloat16Bits(e);
  }
  PadZero(y, n, n_even);
  return s;
}

// y[i] = bfloat16(x[i]) for i < n, zero up to n_even.
void RoundRow(const float* x, int64_t n, uint16_t* y, int64_t n_even) {
  int64_t i = 0;
#if defined(TOB_FLASH_ROWS_AVX2)
  for (; i + 16 <= n; i += 16) Store16(y + i, RoundBits(_mm256_loadu_ps(x + i)), RoundBits(_mm256_loadu_ps(x + i + 8)));
#endif
  for (; i < n; ++i) y[i] = FloatToBFloat16Bits(x[i]);
  PadZero(y, n, n_even);
}

// The softmax gradient of one row, rounded: y[j] = bfloat16(p[j] (dp[j] - delta)), zero up to n_even.
void SoftmaxGradRowToBf16(const float* p, const float* dp, float delta, int64_t n, uint16_t* y, int64_t n_even) {
  int64_t j = 0;
#if defined(TOB_FLASH_ROWS_AVX2)
  const __m256 d = _mm256_set1_ps(delta);
  for (; j + 16 <= n; j += 16) {
    const __m256 g0 = _mm256_mul_ps(_mm256_loadu_ps(p + j), _mm256_sub_ps(_mm256_loadu_ps(dp + j), d));
    const __m256 g1 = _mm256_mul_ps(_mm256_loadu_ps(p + j + 8), _mm256_sub_ps(_mm256_loadu_ps(dp + j + 8), d));
    Store16(y + j, RoundBits(g0), RoundBits(g1));
  }
#endif
  for (; j < n; ++j) y[j] = FloatToBFloat16Bits(p[j] * (dp[j] - delta));
  PadZero(y, n, n_even);
}

// x[i] = exp(x[i] - shift) in place (float32, for the softmax gradient) and y[i] = its bfloat16
// rounding for i < n, zero up to n_even: the backward's P.
void ExpShiftedToBf16(float* x, int64_t n, float shift, uint16_t* y, int64_t n_even) {
  vec::ExpShiftedSum(x, n, shift, x);
  RoundRow(x, n, y, n_even);
}

// sum_x a[x] b[x] of two bfloat16 rows, in float32 (the softmax gradient's row term dY . Y).
float DotBf16(const BFloat16* a, const BFloat16* b, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_FLASH_ROWS_AVX2)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i))), 16));
    const __m256 y = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i))), 16));
    acc = _mm256_fmadd_ps(x, y, acc);
  }
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  s = _mm_cvtss_f32(h);
#endif
  for (; i < n; ++i) s += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  return s;
}

float MaxRow(const float* x, int64_t n) { return vec::Max(x, n); }

constexpr RowOps kOps{MaxRow, ExpShiftedSumToBf16, ExpShiftedToBf16, SoftmaxGradRowToBf16, DotBf16};

}  // namespace

const RowOps& Ops() { return kOps; }

}  // namespace portable

const RowOps& Ops() {
  static const RowOps& ops = avx512::Available() ? avx512::Ops() : portable::Ops();
  return ops;
}

}  // namespace tob::flash_rows
