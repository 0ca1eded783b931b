// The one vectorised exp of the CPU provider (elementwise Exp/Sigmoid/Gelu, Softmax, LogSumExp
// all call it), so its accuracy and edge cases are decided and tested in one place.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace tob::simd {

// Cephes expf: x = k ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial, then scale by
// 2^k in two halves so results from the subnormal range up to FLT_MAX come out right (~2 ulp).
// The clamp keeps k in [-150, 128], where the scaling itself produces 0 and inf; max(lo, x) and
// min(hi, .) return their second operand for NaN, so NaN flows through untouched.
inline __m256 Exp(__m256 x) {
  auto set = [](float v) { return _mm256_set1_ps(v); };
  __m256 xc = _mm256_min_ps(set(88.8f), _mm256_max_ps(set(-104.0f), x));
  const __m256 magic = set(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  __m256 kf = _mm256_fmadd_ps(xc, set(1.44269504088896341f), magic);
  __m256i ki = _mm256_sub_epi32(_mm256_castps_si256(kf), _mm256_castps_si256(magic));
  kf = _mm256_sub_ps(kf, magic);
  __m256 r = _mm256_fnmadd_ps(kf, set(0.693359375f), xc);
  r = _mm256_fnmadd_ps(kf, set(-2.12194440e-4f), r);
  __m256 p = set(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, set(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, set(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, set(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, set(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, set(5.0000001201e-1f));
  __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, set(1.0f)));
  __m256i k1 = _mm256_srai_epi32(ki, 1);
  __m256i k2 = _mm256_sub_epi32(ki, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
}

}  // namespace tob::simd

#endif
