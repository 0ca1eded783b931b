// simd::Exp (avx2_exp.h) on 16 lanes, for the AVX-512 variants that the CPU provider picks at run
// time (the build targets x86-64-v3, so a caller carries the target attribute TOB_AVX512_EXP_TARGET
// itself; this function is inlined into it). Same clamps, range reduction and polynomial,
// instruction for instruction; only the final scaling by 2^k is one scalef instead of two
// multiplications by 2^(k/2): y 2^k1 is exact (y in [0.7, 1.5), 2^k1 normal), so both round the
// exact y 2^k once and give the same bits (tests/cpp/flash_attention_rows_test.cc checks them
// against simd::Exp and float64 over the whole float range). NaN passes the clamps (max and min
// return their second operand for NaN), -inf clamps to -104 and gives 0, large inputs give inf.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define TOB_AVX512_EXP 1
#define TOB_AVX512_EXP_TARGET "avx512f,avx512bw,avx512dq,avx512vl"

namespace tob::simd {

__attribute__((target(TOB_AVX512_EXP_TARGET), always_inline)) inline __m512 Exp512(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_set1_ps(88.8f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 magic = _mm512_set1_ps(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic), magic);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, k);
}

}  // namespace tob::simd

#endif
