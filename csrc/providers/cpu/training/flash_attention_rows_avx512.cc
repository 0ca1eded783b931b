// AVX-512 variant of FlashAttention's bfloat16 row passes (flash_attention_rows.h), chosen at run
// time on CPUs that have AVX-512 F/BW/DQ/VL (the build targets x86-64-v3, so these functions carry
// their own target attribute). 16 lanes, and masked loads and stores for the tail instead of a
// scalar loop; 32 vector registers, where the AVX2 version of the exp-and-round pass spilled.
//
// The exp is simd::Exp512 (simd/avx512_exp.h): simd::Exp's bits on 16 lanes. The bfloat16
// rounding is FloatToBFloat16Bits's bit operation on 16 lanes (not VCVTNEPS2BF16, which flushes
// subnormal inputs and outputs to zero).
#include "providers/cpu/training/flash_attention_rows.h"

#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include "providers/cpu/simd/avx512_exp.h"
#define TOB_ROWS_AVX512 1
#define TOB_ROWS_FN __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define TOB_ROWS_INLINE __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_ps initialises from itself).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::flash_rows {

namespace avx512 {

#if defined(TOB_ROWS_AVX512)

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return available;
}

namespace {

TOB_ROWS_INLINE __m512 Set(float v) { return _mm512_set1_ps(v); }

TOB_ROWS_INLINE __m512 Exp(__m512 x) { return simd::Exp512(x); }

// FloatToBFloat16Bits of 16 floats, each in the low half of a 32-bit lane.
TOB_ROWS_INLINE __m512i RoundBits(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(bits, 16);
  const __m512i lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
}

TOB_ROWS_INLINE void Store16(uint16_t* y, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), _mm512_cvtepi32_epi16(RoundBits(v)));
}

TOB_ROWS_INLINE void Store16(uint16_t* y, __m512 v, __mmask16 m) {
  _mm512_mask_cvtepi32_storeu_epi16(y, m, RoundBits(v));
}

TOB_ROWS_INLINE __mmask16 Tail(int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

// bfloat16 bits widened to float32, 16 lanes.
TOB_ROWS_INLINE __m512 Widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

TOB_ROWS_FN float Max(const float* x, int64_t n) {
  const __m512 neg_inf = Set(-std::numeric_limits<float>::infinity());
  __m512 m0 = neg_inf, m1 = neg_inf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(neg_inf, Tail(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
}

TOB_ROWS_FN float ExpShiftedSumToBf16(const float* x, int64_t n, float shift, uint16_t* y, int64_t n_even) {
  const __m512 sh = Set(shift);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh));
    const __m512 e1 = Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), sh));
    a0 = _mm512_add_ps(a0, e0);
    a1 = _mm512_add_ps(a1, e1);
    Store16(y + i, e0);
    Store16(y + i + 16, e1);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh));
    a0 = _mm512_add_ps(a0, e);
    Store16(y + i, e);
  }
  if (i < n) {
    const __mmask16 m = Tail(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sh));
    a1 = _mm512_mask_add_ps(a1, m, a1, e);
    Store16(y + i, e, m);
  }
  PadZero(y, n, n_even);
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

TOB_ROWS_FN void ExpShiftedToBf16(float* x, int64_t n, float shift, uint16_t* y, int64_t n_even) {
  const __m512 sh = Set(shift);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh));
    _mm512_storeu_ps(x + i, e);
    Store16(y + i, e);
  }
  if (i < n) {
    const __mmask16 m = Tail(n - i);
    const __m512 e = Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sh));
    _mm512_mask_storeu_ps(x + i, m, e);
    Store16(y + i, e, m);
  }
  PadZero(y, n, n_even);
}

TOB_ROWS_FN void SoftmaxGradRowToBf16(const float* p, const float* dp, float delta, int64_t n, uint16_t* y,
                                      int64_t n_even) {
  const __m512 d = Set(delta);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    Store16(y + j, _mm512_mul_ps(_mm512_loadu_ps(p + j), _mm512_sub_ps(_mm512_loadu_ps(dp + j), d)));
  if (j < n) {
    const __mmask16 m = Tail(n - j);
    Store16(y + j, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p + j), _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + j), d)),
            m);
  }
  PadZero(y, n, n_even);
}

TOB_ROWS_FN float DotBf16(const BFloat16* a, const BFloat16* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    acc = _mm512_fmadd_ps(Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i))),
                          Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))), acc);
  if (i < n) {
    const __mmask16 m = Tail(n - i);
    acc = _mm512_fmadd_ps(Widen(_mm256_maskz_loadu_epi16(m, a + i)), Widen(_mm256_maskz_loadu_epi16(m, b + i)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

constexpr RowOps kOps{Max, ExpShiftedSumToBf16, ExpShiftedToBf16, SoftmaxGradRowToBf16, DotBf16};

}  // namespace

const RowOps& Ops() { return kOps; }

#else

bool Available() { return false; }
const RowOps& Ops() { return portable::Ops(); }

#endif

}  // namespace avx512

}  // namespace tob::flash_rows
