// The store of the transposed conv tiles (conv_packed.h): a positions x channels block into Y's
// channel rows, 16 x 16 at a time in registers, adding the bias and Z and applying Relu on the way
// (the other activations run afterwards over the rows). The build targets x86-64-v3, so the
// function carries its own target attribute; conv.cc calls it only where sgemm_packed.h runs
// (AVX-512F/DQ), and a scalar loop stands in elsewhere.
#include <algorithm>

#include "providers/cpu/nn/conv_packed.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_CP_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::conv_packed {

namespace {

void StoreScalar(const float* block, int64_t rows, int64_t cols, const float* bias, const float* z, int64_t ldz,
                 bool relu, float* y, int64_t ldy) {
  constexpr int64_t kB = 16;
  for (int64_t j0 = 0; j0 < cols; j0 += kB) {
    const int64_t j1 = std::min(cols, j0 + kB);
    for (int64_t i0 = 0; i0 < rows; i0 += kB) {
      const int64_t i1 = std::min(rows, i0 + kB);
      for (int64_t j = j0; j < j1; ++j) {
        float* dst = y + j * ldy;
        const float b = bias != nullptr ? bias[j] : 0.f;
        for (int64_t i = i0; i < i1; ++i) {
          float v = block[i * cols + j] + b;
          if (z != nullptr) v += z[j * ldz + i];
          dst[i] = relu && v < 0.f ? 0.f : v;
        }
      }
    }
  }
}

#if TOB_CP_AVX512

// r[0..16) rows in, columns out (r[j][i] = old r[i][j]).
TOB_AVX512_FN inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4q + c], lane l: column 4l + c of rows 4q..4q+3.
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 4; ++c) {
      t[8 * h + c] = _mm512_shuffle_f32x4(r[8 * h + c], r[8 * h + 4 + c], 0x88);
      t[8 * h + 4 + c] = _mm512_shuffle_f32x4(r[8 * h + c], r[8 * h + 4 + c], 0xdd);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}

TOB_AVX512_FN void StoreAvx512(const float* block, int64_t rows, int64_t cols, const float* bias, const float* z,
                               int64_t ldz, bool relu, float* y, int64_t ldy) {
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const int jw = static_cast<int>(std::min<int64_t>(16, cols - j0));
    const __mmask16 jmask = static_cast<__mmask16>((1u << jw) - 1);
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
      const int iw = static_cast<int>(std::min<int64_t>(16, rows - i0));
      const __mmask16 imask = static_cast<__mmask16>((1u << iw) - 1);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = i < iw ? _mm512_maskz_loadu_ps(jmask, block + (i0 + i) * cols + j0) : zero;
      Transpose16(r);
      for (int j = 0; j < jw; ++j) {
        __m512 v = r[j];
        if (bias != nullptr) v = _mm512_add_ps(v, _mm512_set1_ps(bias[j0 + j]));
        if (z != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(imask, z + (j0 + j) * ldz + i0));
        if (relu) v = _mm512_max_ps(zero, v);  // NaN in the second operand is kept (torch)
        _mm512_mask_storeu_ps(y + (j0 + j) * ldy + i0, imask, v);
      }
    }
  }
}

bool Avx512() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

#endif

}  // namespace

void StoreTransposed(const float* block, int64_t rows, int64_t cols, const float* bias, const float* z, int64_t ldz,
                     bool relu, float* y, int64_t ldy) {
#if TOB_CP_AVX512
  if (Avx512()) return StoreAvx512(block, rows, cols, bias, z, ldz, relu, y, ldy);
#endif
  StoreScalar(block, rows, cols, bias, z, ldz, relu, y, ldy);
}

}  // namespace tob::conv_packed
