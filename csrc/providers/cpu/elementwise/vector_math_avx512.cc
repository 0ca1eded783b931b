// AVX-512 versions of the hottest vector_math.h functions, chosen at run time on CPUs that have
// AVX-512 (the build targets x86-64-v3, so these functions carry their own target attribute).
// Same algorithms and coefficients as the AVX2 code, 16 lanes, with scalef doing the 2^k scaling
// (exact overflow to inf and gradual underflow) and mask registers for the tail.
#include "providers/cpu/elementwise/vector_math_isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <math.h>
#define TOB_EW_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f,avx512dq")))
#define TOB_AVX512_INLINE __attribute__((target("avx512f,avx512dq"), always_inline)) inline
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_ps initialises from itself).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::ew::avx512 {

#if TOB_EW_AVX512

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return available;
}

namespace {

TOB_AVX512_INLINE __m512 Set(float v) { return _mm512_set1_ps(v); }

TOB_AVX512_INLINE __m512 Exp512(__m512 x) {
  // Clamp only to keep k finite; scalef turns large k into inf or 0. NaN passes through both.
  __m512 xc = _mm512_min_ps(Set(100.0f), _mm512_max_ps(Set(-110.0f), x));
  __m512 k =
      _mm512_roundscale_ps(_mm512_mul_ps(xc, Set(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, Set(0.693359375f), xc);
  r = _mm512_fnmadd_ps(k, Set(-2.12194440e-4f), r);
  __m512 p = Set(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, Set(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, Set(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, Set(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, Set(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, Set(5.0000001201e-1f));
  __m512 y = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, Set(1.0f)));
  return _mm512_scalef_ps(y, k);
}

TOB_AVX512_INLINE __m512 Tanh512(__m512 x) {
  __m512 xc = _mm512_min_ps(Set(7.90531110763549805f), _mm512_max_ps(Set(-7.90531110763549805f), x));
  __m512 x2 = _mm512_mul_ps(xc, xc);
  __m512 p = Set(-2.76076847742355e-16f);
  p = _mm512_fmadd_ps(p, x2, Set(2.00018790482477e-13f));
  p = _mm512_fmadd_ps(p, x2, Set(-8.60467152213735e-11f));
  p = _mm512_fmadd_ps(p, x2, Set(5.12229709037114e-08f));
  p = _mm512_fmadd_ps(p, x2, Set(1.48572235717979e-05f));
  p = _mm512_fmadd_ps(p, x2, Set(6.37261928875436e-04f));
  p = _mm512_fmadd_ps(p, x2, Set(4.89352455891786e-03f));
  p = _mm512_mul_ps(p, xc);
  __m512 q = Set(1.19825839466702e-06f);
  q = _mm512_fmadd_ps(q, x2, Set(1.18534705686654e-04f));
  q = _mm512_fmadd_ps(q, x2, Set(2.26843463243900e-03f));
  q = _mm512_fmadd_ps(q, x2, Set(4.89352518554385e-03f));
  return _mm512_div_ps(p, q);
}

TOB_AVX512_INLINE __m512 Sigmoid512(__m512 x) {
  return _mm512_div_ps(Set(1.0f), _mm512_add_ps(Set(1.0f), Exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

TOB_AVX512_INLINE __m512 Erf512(__m512 x) {
  __m512 xc = _mm512_min_ps(Set(4.0f), _mm512_max_ps(Set(-4.0f), x));
  __m512 x2 = _mm512_mul_ps(xc, xc);
  __m512 p = Set(-2.72614225801306e-10f);
  p = _mm512_fmadd_ps(p, x2, Set(2.77068142495902e-08f));
  p = _mm512_fmadd_ps(p, x2, Set(-2.10102402082508e-06f));
  p = _mm512_fmadd_ps(p, x2, Set(-5.69250639462346e-05f));
  p = _mm512_fmadd_ps(p, x2, Set(-7.34990630326855e-04f));
  p = _mm512_fmadd_ps(p, x2, Set(-2.95459980854025e-03f));
  p = _mm512_fmadd_ps(p, x2, Set(-1.60960333262415e-02f));
  p = _mm512_mul_ps(p, xc);
  __m512 q = Set(-1.45660718464996e-05f);
  q = _mm512_fmadd_ps(q, x2, Set(-2.13374055278905e-04f));
  q = _mm512_fmadd_ps(q, x2, Set(-1.68282697438203e-03f));
  q = _mm512_fmadd_ps(q, x2, Set(-7.37332916720468e-03f));
  q = _mm512_fmadd_ps(q, x2, Set(-1.42647390514189e-02f));
  return _mm512_div_ps(p, q);
}

TOB_AVX512_INLINE __m512 Gelu512(__m512 x) {
  __m512 e = Erf512(_mm512_mul_ps(x, Set(0.70710678118654752440f)));
  return _mm512_mul_ps(_mm512_mul_ps(Set(0.5f), x), _mm512_add_ps(Set(1.0f), e));
}

TOB_AVX512_INLINE __m512 GeluTanh512(__m512 x) {
  __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  __m512 minus_2z = _mm512_mul_ps(Set(-2.0f * 0.79788456080286535588f), _mm512_fmadd_ps(Set(0.044715f), x3, x));
  return _mm512_div_ps(x, _mm512_add_ps(Set(1.0f), Exp512(minus_2z)));
}

// log(x) = e ln2 + log(m) with getexp/getmant doing the split x = m 2^e, m in [1, 2)
// (subnormals included), then m moved into [sqrt(1/2), sqrt(2)) where the Cephes logf
// polynomial is fitted.
TOB_AVX512_INLINE __m512 Log512(__m512 x) {
  __m512 e = _mm512_getexp_ps(x);
  __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_nan);
  __mmask16 above = _mm512_cmp_ps_mask(m, Set(1.41421356237309504880f), _CMP_GE_OQ);
  m = _mm512_mask_mul_ps(m, above, m, Set(0.5f));
  e = _mm512_mask_add_ps(e, above, e, Set(1.0f));
  __m512 f = _mm512_sub_ps(m, Set(1.0f));
  __m512 z = _mm512_mul_ps(f, f);
  __m512 p = Set(7.0376836292e-2f);
  p = _mm512_fmadd_ps(p, f, Set(-1.1514610310e-1f));
  p = _mm512_fmadd_ps(p, f, Set(1.1676998740e-1f));
  p = _mm512_fmadd_ps(p, f, Set(-1.2420140846e-1f));
  p = _mm512_fmadd_ps(p, f, Set(1.4249322787e-1f));
  p = _mm512_fmadd_ps(p, f, Set(-1.6668057665e-1f));
  p = _mm512_fmadd_ps(p, f, Set(2.0000714765e-1f));
  p = _mm512_fmadd_ps(p, f, Set(-2.4999993993e-1f));
  p = _mm512_fmadd_ps(p, f, Set(3.3333331174e-1f));
  __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, f), z);
  y = _mm512_fmadd_ps(e, Set(-2.12194440e-4f), y);
  y = _mm512_fnmadd_ps(z, Set(0.5f), y);
  __m512 r = _mm512_add_ps(f, y);
  r = _mm512_fmadd_ps(e, Set(0.693359375f), r);
  // getexp gives -inf for 0 and +inf for inf, which the arithmetic above turns into NaN.
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), Set(-INFINITY));
  r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(x, Set(INFINITY), _CMP_EQ_OQ), x);
  return r;
}

TOB_AVX512_INLINE __m512 Softplus512(__m512 x) {
  __m512 t = Exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(x)));
  __m512 u = _mm512_add_ps(Set(1.0f), t);
  __m512 d = _mm512_sub_ps(u, Set(1.0f));
  // log1p(t) = log(u) t / (u - 1) (Kahan), or t itself when u rounds to 1.
  __m512 l = _mm512_div_ps(_mm512_mul_ps(Log512(u), t), d);
  l = _mm512_mask_mov_ps(l, _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_EQ_OQ), t);
  return _mm512_add_ps(_mm512_max_ps(x, _mm512_setzero_ps()), l);
}

template <typename F>
TOB_AVX512_INLINE void Map(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));
  if (i < n) {
    __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, mask, f(_mm512_maskz_loadu_ps(mask, x + i)));
  }
}

struct ExpF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Exp512(v); }
};
struct TanhF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Tanh512(v); }
};
struct SigmoidF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Sigmoid512(v); }
};
struct ErfF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Erf512(v); }
};
struct GeluF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Gelu512(v); }
};
struct LogF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Log512(v); }
};
struct SoftplusF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return Softplus512(v); }
};
struct GeluTanhF {
  TOB_AVX512_INLINE __m512 operator()(__m512 v) const { return GeluTanh512(v); }
};

}  // namespace

TOB_AVX512_FN void ExpArray(const float* x, float* y, int64_t n) { Map(x, y, n, ExpF{}); }
TOB_AVX512_FN void TanhArray(const float* x, float* y, int64_t n) { Map(x, y, n, TanhF{}); }
TOB_AVX512_FN void SigmoidArray(const float* x, float* y, int64_t n) { Map(x, y, n, SigmoidF{}); }
TOB_AVX512_FN void ErfArray(const float* x, float* y, int64_t n) { Map(x, y, n, ErfF{}); }
TOB_AVX512_FN void GeluArray(const float* x, float* y, int64_t n) { Map(x, y, n, GeluF{}); }
TOB_AVX512_FN void GeluTanhArray(const float* x, float* y, int64_t n) { Map(x, y, n, GeluTanhF{}); }
TOB_AVX512_FN void LogArray(const float* x, float* y, int64_t n) { Map(x, y, n, LogF{}); }
TOB_AVX512_FN void SoftplusArray(const float* x, float* y, int64_t n) { Map(x, y, n, SoftplusF{}); }

#else

bool Available() { return false; }
void ExpArray(const float*, float*, int64_t) {}
void TanhArray(const float*, float*, int64_t) {}
void SigmoidArray(const float*, float*, int64_t) {}
void ErfArray(const float*, float*, int64_t) {}
void GeluArray(const float*, float*, int64_t) {}
void GeluTanhArray(const float*, float*, int64_t) {}
void LogArray(const float*, float*, int64_t) {}
void SoftplusArray(const float*, float*, int64_t) {}

#endif

}  // namespace tob::ew::avx512
