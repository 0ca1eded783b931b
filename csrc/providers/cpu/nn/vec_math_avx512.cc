// AVX-512 row primitives (vec_math_avx512.h): 16 lanes, masked tails, simd::Exp512.
#include "providers/cpu/nn/vec_math_avx512.h"

#include <limits>

#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/simd/avx512_exp.h"

#if defined(TOB_AVX512_EXP)
#define TOB_VEC_FN __attribute__((target(TOB_AVX512_EXP_TARGET)))
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_ps initialises from itself).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::vec::avx512 {

#if defined(TOB_AVX512_EXP)

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return available;
}

namespace {
TOB_VEC_FN inline __mmask16 Tail(int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }
}  // namespace

TOB_VEC_FN float Max(const float* x, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = neg_inf, m1 = neg_inf, m2 = neg_inf, m3 = neg_inf;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(x + i + 32));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(x + i + 48));
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(neg_inf, Tail(n - i), x + i));
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3)));
}

TOB_VEC_FN float ExpShiftedSumOnly(const float* x, int64_t n, float shift) {
  const __m512 sh = _mm512_set1_ps(shift);
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, simd::Exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh)));
    a1 = _mm512_add_ps(a1, simd::Exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), sh)));
    a2 = _mm512_add_ps(a2, simd::Exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 32), sh)));
    a3 = _mm512_add_ps(a3, simd::Exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i + 48), sh)));
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_add_ps(a0, simd::Exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh)));
  if (i < n) {
    const __mmask16 m = Tail(n - i);
    a1 = _mm512_mask_add_ps(a1, m, a1, simd::Exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sh)));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

TOB_VEC_FN void ExpScaled(const float* x, int64_t n, float f, float* y) {
  const __m512 s = _mm512_set1_ps(f);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm512_storeu_ps(y + i, _mm512_mul_ps(simd::Exp512(_mm512_loadu_ps(x + i)), s));
    _mm512_storeu_ps(y + i + 16, _mm512_mul_ps(simd::Exp512(_mm512_loadu_ps(x + i + 16)), s));
  }
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(simd::Exp512(_mm512_loadu_ps(x + i)), s));
  if (i < n) {
    const __mmask16 m = Tail(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(simd::Exp512(_mm512_maskz_loadu_ps(m, x + i)), s));
  }
}

#else  // not compiled in: Available() is false, and the functions are vec_math.h's

bool Available() { return false; }
float Max(const float* x, int64_t n) { return vec::Max(x, n); }
float ExpShiftedSumOnly(const float* x, int64_t n, float shift) { return vec::ExpShiftedSumOnly(x, n, shift); }
void ExpScaled(const float* x, int64_t n, float f, float* y) {
  vec::ExpShiftedSum(x, n, 0.f, y);
  for (int64_t i = 0; i < n; ++i) y[i] *= f;
}

#endif

}  // namespace tob::vec::avx512
