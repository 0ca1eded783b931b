// Row primitives for softmax and the normalizations: reductions and exp over contiguous float
// rows. Without -ffast-math the compiler may not reorder float sums, so the reductions are
// written with AVX2 lanes explicitly (several independent accumulators), with a scalar tail and
// a portable fallback. Double rows use plain loops with split accumulators.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TOB_NN_AVX2 1

#include "providers/cpu/simd/avx2_exp.h"
#endif

namespace tob::vec {

#if defined(TOB_NN_AVX2)
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#endif

inline float Max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
#if defined(TOB_NN_AVX2)
  if (n >= 32) {
    __m256 m0 = _mm256_set1_ps(m), m1 = m0, m2 = m0, m3 = m0;
    for (; i + 32 <= n; i += 32) {
      m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
      m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
      m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 16));
      m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 24));
    }
    m = HorizontalMax(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline double Max(const double* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline float Sum(const float* x, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_NN_AVX2)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
  s = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
  for (; i < n; ++i) s += x[i];
  return s;
}

inline double Sum(const double* x, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += x[i];
    s1 += x[i + 1];
    s2 += x[i + 2];
    s3 += x[i + 3];
  }
  for (; i < n; ++i) s0 += x[i];
  return (s0 + s1) + (s2 + s3);
}

// Sum of (x - mean)^2: the second pass of a two-pass variance (no cancellation).
inline float SquaredDeviationSum(const float* x, int64_t n, float mean) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_NN_AVX2)
  const __m256 m = _mm256_set1_ps(mean);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 32 <= n; i += 32) {
    __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
    __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m);
    __m256 d2 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), m);
    __m256 d3 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), m);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
    a2 = _mm256_fmadd_ps(d2, d2, a2);
    a3 = _mm256_fmadd_ps(d3, d3, a3);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), m);
    a0 = _mm256_fmadd_ps(d, d, a0);
  }
  s = HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

inline double SquaredDeviationSum(const double* x, int64_t n, double mean) {
  double s0 = 0, s1 = 0;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    s0 += (x[i] - mean) * (x[i] - mean);
    s1 += (x[i + 1] - mean) * (x[i + 1] - mean);
  }
  for (; i < n; ++i) s0 += (x[i] - mean) * (x[i] - mean);
  return s0 + s1;
}

// y[i] = exp(x[i] - shift); returns the sum of the y. y may alias x.
inline float ExpShiftedSum(const float* x, int64_t n, float shift, float* y) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_NN_AVX2)
  const __m256 sh = _mm256_set1_ps(shift);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (; i + 16 <= n; i += 16) {
    __m256 e0 = simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    __m256 e1 = simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh));
    _mm256_storeu_ps(y + i, e0);
    _mm256_storeu_ps(y + i + 8, e1);
    a0 = _mm256_add_ps(a0, e0);
    a1 = _mm256_add_ps(a1, e1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 e = simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    _mm256_storeu_ps(y + i, e);
    a0 = _mm256_add_ps(a0, e);
  }
  s = HorizontalSum(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    s += y[i];
  }
  return s;
}

inline double ExpShiftedSum(const double* x, int64_t n, double shift, double* y) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    s += y[i];
  }
  return s;
}

// Sum of exp(x[i] - shift) without storing (log-softmax).
inline float ExpShiftedSumOnly(const float* x, int64_t n, float shift) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_NN_AVX2)
  const __m256 sh = _mm256_set1_ps(shift);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)));
    a1 = _mm256_add_ps(a1, simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), sh)));
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_add_ps(a0, simd::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh)));
  s = HorizontalSum(_mm256_add_ps(a0, a1));
#endif
  for (; i < n; ++i) s += std::exp(x[i] - shift);
  return s;
}

inline double ExpShiftedSumOnly(const double* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - shift);
  return s;
}

// y[i] = exp(y[i]) in place.
inline void ExpInPlace(float* y, int64_t n) {
  int64_t i = 0;
#if defined(TOB_NN_AVX2)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, simd::Exp(_mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] = std::exp(y[i]);
}

inline void ExpInPlace(double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(y[i]);
}

}  // namespace tob::vec
