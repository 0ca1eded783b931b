#include "providers/cpu/elementwise/vector_math.h"

#include "math/elementwise_math.h"
#include "providers/cpu/elementwise/vector_math_isa.h"
#include "providers/cpu/simd/avx2_exp.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TOB_EW_AVX2 1
#endif

namespace tob::ew {

#if TOB_EW_AVX2
namespace {

inline __m256 Set(float v) { return _mm256_set1_ps(v); }

// Lanes [0, r) set, for the masked tail of every loop (so the tail uses the same approximation
// as the body and results do not depend on alignment or split points).
inline __m256i TailMask(int64_t r) {
  alignas(32) static const int32_t kMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMaskTable + 8 - r));
}

template <typename F>
inline void Map(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    __m256i mask = TailMask(n - i);
    _mm256_maskstore_ps(y + i, mask, f(_mm256_maskload_ps(x + i, mask)));
  }
}

inline __m256 IsNanMask(__m256 x) { return _mm256_cmp_ps(x, x, _CMP_UNORD_Q); }

// Cephes logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a degree-9 polynomial.
inline __m256 Log256(__m256 x) {
  const __m256 zero = _mm256_setzero_ps();
  __m256 is_sub = _mm256_cmp_ps(x, Set(1.17549435e-38f), _CMP_LT_OQ);
  __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, Set(8388608.0f)), is_sub);  // * 2^23
  __m256 e_adj = _mm256_and_ps(is_sub, Set(23.0f));
  __m256i bits = _mm256_castps_si256(xs);
  __m256i ei = _mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(126));
  __m256 e = _mm256_sub_ps(_mm256_cvtepi32_ps(ei), e_adj);
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi32(0x807fffff)),
                                                 _mm256_set1_epi32(0x3f000000)));  // [0.5, 1)
  __m256 below = _mm256_cmp_ps(m, Set(0.707106781186547524f), _CMP_LT_OQ);
  m = _mm256_add_ps(_mm256_sub_ps(m, Set(1.0f)), _mm256_and_ps(below, m));
  e = _mm256_sub_ps(e, _mm256_and_ps(below, Set(1.0f)));
  __m256 z = _mm256_mul_ps(m, m);
  __m256 p = Set(7.0376836292e-2f);
  p = _mm256_fmadd_ps(p, m, Set(-1.1514610310e-1f));
  p = _mm256_fmadd_ps(p, m, Set(1.1676998740e-1f));
  p = _mm256_fmadd_ps(p, m, Set(-1.2420140846e-1f));
  p = _mm256_fmadd_ps(p, m, Set(1.4249322787e-1f));
  p = _mm256_fmadd_ps(p, m, Set(-1.6668057665e-1f));
  p = _mm256_fmadd_ps(p, m, Set(2.0000714765e-1f));
  p = _mm256_fmadd_ps(p, m, Set(-2.4999993993e-1f));
  p = _mm256_fmadd_ps(p, m, Set(3.3333331174e-1f));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, m), z);
  y = _mm256_fmadd_ps(e, Set(-2.12194440e-4f), y);
  y = _mm256_fnmadd_ps(z, Set(0.5f), y);
  __m256 r = _mm256_add_ps(m, y);
  r = _mm256_fmadd_ps(e, Set(0.693359375f), r);
  r = _mm256_blendv_ps(r, Set(INFINITY), _mm256_cmp_ps(x, Set(INFINITY), _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, Set(-INFINITY), _mm256_cmp_ps(x, zero, _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, Set(NAN), _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
  return _mm256_blendv_ps(r, x, IsNanMask(x));
}

inline __m256 Abs256(__m256 x) { return _mm256_andnot_ps(Set(-0.0f), x); }

// Rational minimax approximation x P(x^2) / Q(x^2) (the one Eigen and MLAS use), clamped where
// tanh rounds to +-1 in float; max relative error 4e-7, no exp and no branch blend.
inline __m256 Tanh256(__m256 x) {
  const __m256 bound = Set(7.90531110763549805f);
  __m256 xc = _mm256_min_ps(bound, _mm256_max_ps(Set(-7.90531110763549805f), x));
  __m256 x2 = _mm256_mul_ps(xc, xc);
  __m256 p = Set(-2.76076847742355e-16f);
  p = _mm256_fmadd_ps(p, x2, Set(2.00018790482477e-13f));
  p = _mm256_fmadd_ps(p, x2, Set(-8.60467152213735e-11f));
  p = _mm256_fmadd_ps(p, x2, Set(5.12229709037114e-08f));
  p = _mm256_fmadd_ps(p, x2, Set(1.48572235717979e-05f));
  p = _mm256_fmadd_ps(p, x2, Set(6.37261928875436e-04f));
  p = _mm256_fmadd_ps(p, x2, Set(4.89352455891786e-03f));
  p = _mm256_mul_ps(p, xc);
  __m256 q = Set(1.19825839466702e-06f);
  q = _mm256_fmadd_ps(q, x2, Set(1.18534705686654e-04f));
  q = _mm256_fmadd_ps(q, x2, Set(2.26843463243900e-03f));
  q = _mm256_fmadd_ps(q, x2, Set(4.89352518554385e-03f));
  return _mm256_div_ps(p, q);
}

inline __m256 Sigmoid256(__m256 x) {
  const __m256 one = Set(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, simd::Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// Rational minimax approximation x P(x^2) / Q(x^2) on [-4, 4] (erf is +-1 in float beyond).
inline __m256 Erf256(__m256 x) {
  __m256 xc = _mm256_min_ps(Set(4.0f), _mm256_max_ps(Set(-4.0f), x));  // keeps NaN (see simd::Exp)
  __m256 x2 = _mm256_mul_ps(xc, xc);
  __m256 p = Set(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, x2, Set(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, x2, Set(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, x2, Set(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, x2, Set(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, x2, Set(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, x2, Set(-1.60960333262415e-02f));
  p = _mm256_mul_ps(p, xc);
  __m256 q = Set(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, x2, Set(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, x2, Set(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, x2, Set(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, x2, Set(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

inline __m256 Gelu256(__m256 x) {
  __m256 e = Erf256(_mm256_mul_ps(x, Set(0.70710678118654752440f)));
  return _mm256_mul_ps(_mm256_mul_ps(Set(0.5f), x), _mm256_add_ps(Set(1.0f), e));
}

// 0.5 x (1 + tanh(z)) = x sigmoid(2z) = x / (1 + exp(-2z)): one exp and one division, and no
// 1 + tanh cancellation for negative x.
inline __m256 GeluTanh256(__m256 x) {
  __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  __m256 minus_2z = _mm256_mul_ps(Set(-2.0f * 0.79788456080286535588f), _mm256_fmadd_ps(Set(0.044715f), x3, x));
  return _mm256_div_ps(x, _mm256_add_ps(Set(1.0f), simd::Exp(minus_2z)));
}

// log1p(t) for t in [0, 1] from log: Kahan's correction keeps full relative accuracy for tiny t.
inline __m256 Log1pNonNeg256(__m256 t) {
  __m256 u = _mm256_add_ps(Set(1.0f), t);
  __m256 d = _mm256_sub_ps(u, Set(1.0f));
  __m256 exact = _mm256_div_ps(_mm256_mul_ps(Log256(u), t), d);
  return _mm256_blendv_ps(exact, t, _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_EQ_OQ));
}

inline __m256 Softplus256(__m256 x) {
  __m256 t = simd::Exp(_mm256_sub_ps(_mm256_setzero_ps(), Abs256(x)));
  return _mm256_add_ps(_mm256_max_ps(x, _mm256_setzero_ps()), Log1pNonNeg256(t));  // NaN via t
}

inline __m256 ExpM1Neg256(__m256 x, __m256 alpha) {
  return _mm256_mul_ps(alpha, _mm256_sub_ps(simd::Exp(x), Set(1.0f)));
}

}  // namespace

namespace avx2 {
bool Available() { return true; }
void ExpArray(const float* x, float* y, int64_t n) { Map(x, y, n, simd::Exp); }
void TanhArray(const float* x, float* y, int64_t n) { Map(x, y, n, Tanh256); }
void SigmoidArray(const float* x, float* y, int64_t n) { Map(x, y, n, Sigmoid256); }
void ErfArray(const float* x, float* y, int64_t n) { Map(x, y, n, Erf256); }
void GeluArray(const float* x, float* y, int64_t n) { Map(x, y, n, Gelu256); }
void GeluTanhArray(const float* x, float* y, int64_t n) { Map(x, y, n, GeluTanh256); }
void LogArray(const float* x, float* y, int64_t n) { Map(x, y, n, Log256); }
void SoftplusArray(const float* x, float* y, int64_t n) { Map(x, y, n, Softplus256); }
}  // namespace avx2

// Runs of at least one AVX-512 vector go to the AVX-512 variant when the CPU has it.
inline bool UseAvx512(int64_t n) { return n >= 16 && avx512::Available(); }

void ExpArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::ExpArray(x, y, n);
  avx2::ExpArray(x, y, n);
}
void TanhArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::TanhArray(x, y, n);
  avx2::TanhArray(x, y, n);
}
void SigmoidArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::SigmoidArray(x, y, n);
  avx2::SigmoidArray(x, y, n);
}
void ErfArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::ErfArray(x, y, n);
  avx2::ErfArray(x, y, n);
}
void GeluArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::GeluArray(x, y, n);
  avx2::GeluArray(x, y, n);
}
void GeluTanhArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::GeluTanhArray(x, y, n);
  avx2::GeluTanhArray(x, y, n);
}
void LogArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::LogArray(x, y, n);
  avx2::LogArray(x, y, n);
}
void SoftplusArray(const float* x, float* y, int64_t n) {
  if (UseAvx512(n)) return avx512::SoftplusArray(x, y, n);
  avx2::SoftplusArray(x, y, n);
}

void EluArray(const float* x, float* y, int64_t n, float alpha) {
  const __m256 a = Set(alpha);
  Map(x, y, n, [a](__m256 v) {
    return _mm256_blendv_ps(v, ExpM1Neg256(v, a), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
  });
}

void SeluArray(const float* x, float* y, int64_t n, float alpha, float gamma) {
  const __m256 a = Set(alpha), g = Set(gamma);
  Map(x, y, n, [a, g](__m256 v) {
    __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LE_OQ);
    return _mm256_mul_ps(g, _mm256_blendv_ps(v, ExpM1Neg256(v, a), neg));
  });
}

void SqrtArray(const float* x, float* y, int64_t n) {
  Map(x, y, n, [](__m256 v) { return _mm256_sqrt_ps(v); });
}
void FloorArray(const float* x, float* y, int64_t n) {
  Map(x, y, n, [](__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); });
}
void CeilArray(const float* x, float* y, int64_t n) {
  Map(x, y, n, [](__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); });
}
void RoundHalfEvenArray(const float* x, float* y, int64_t n) {
  Map(x, y, n, [](__m256 v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); });
}

#else  // scalar fallback: libm through the shared functors

namespace {
template <typename Op>
inline void MapScalar(const float* x, float* y, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
}
}  // namespace

namespace avx2 {
bool Available() { return false; }
void ExpArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, ExpOp{}); }
void TanhArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, TanhOp{}); }
void SigmoidArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, SigmoidOp{}); }
void ErfArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, ErfOp{}); }
void GeluArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, GeluOp{}); }
void GeluTanhArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, GeluTanhOp{}); }
void LogArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, LogOp{}); }
void SoftplusArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, SoftplusOp{}); }
}  // namespace avx2

void ExpArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, ExpOp{}); }
void LogArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, LogOp{}); }
void TanhArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, TanhOp{}); }
void SigmoidArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, SigmoidOp{}); }
void ErfArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, ErfOp{}); }
void GeluArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, GeluOp{}); }
void GeluTanhArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, GeluTanhOp{}); }
void SoftplusArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, SoftplusOp{}); }
void EluArray(const float* x, float* y, int64_t n, float alpha) { MapScalar(x, y, n, EluOp{alpha}); }
void SeluArray(const float* x, float* y, int64_t n, float alpha, float gamma) {
  MapScalar(x, y, n, SeluOp{alpha, gamma});
}
void SqrtArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, SqrtOp{}); }
void FloorArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, FloorOp{}); }
void CeilArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, CeilOp{}); }
void RoundHalfEvenArray(const float* x, float* y, int64_t n) { MapScalar(x, y, n, RoundOp{}); }

#endif

}  // namespace tob::ew
