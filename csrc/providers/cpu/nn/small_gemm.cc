#include "providers/cpu/nn/small_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/env_switch.h"

namespace tob {

namespace {

using small_gemm::Kernels;

// Rows of op(B) per packed panel: 256 x 32 floats (32 KiB) stay in L1 while every row tile of
// op(A) runs over them.
constexpr int64_t kKc = 256;
constexpr int64_t kMaxPanelWidth = 32;
// The smallest problem worth waking the pool for.
constexpr double kMinParallelFlops = 2.0 * 64 * 64 * 128;

float* PackBuffer() {
  alignas(64) static thread_local float buffer[kKc * kMaxPanelWidth];
  return buffer;
}

void Transpose8x8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    __m256 t0 = t[4 * h], t1 = t[4 * h + 1], t2 = t[4 * h + 2], t3 = t[4 * h + 3];
    s[4 * h] = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

}  // namespace

namespace small_gemm {

void PackPanel(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nw, int64_t width,
               float* dst) {
  if (!trans_b) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = B + (k0 + k) * ldb + n0;
      float* d = dst + k * width;
      for (int64_t j = 0; j < width; j += 8) {
        int64_t left = nw - j;
        __m256 x = left >= 8  ? _mm256_loadu_ps(src + j)
                   : left > 0 ? _mm256_maskload_ps(src + j,
                                                   _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane))
                              : _mm256_setzero_ps();
        _mm256_store_ps(d + j, x);
      }
    }
    return;
  }
  // op(B)[k, n] = B[n * ldb + k]: transpose 8 x 8 blocks of B rows.
  int64_t j = 0;
  for (; j + 8 <= nw; j += 8) {
    const float* src = B + (n0 + j) * ldb + k0;
    int64_t k = 0;
    for (; k + 8 <= kc; k += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ldb + k);
      Transpose8x8(r);
      for (int i = 0; i < 8; ++i) _mm256_store_ps(dst + (k + i) * width + j, r[i]);
    }
    for (; k < kc; ++k)
      for (int i = 0; i < 8; ++i) dst[k * width + j + i] = src[i * ldb + k];
  }
  for (; j < width; ++j) {
    if (j < nw) {
      const float* src = B + (n0 + j) * ldb + k0;
      for (int64_t k = 0; k < kc; ++k) dst[k * width + j] = src[k];
    } else {
      for (int64_t k = 0; k < kc; ++k) dst[k * width + j] = 0.f;
    }
  }
}

}  // namespace small_gemm

namespace {

using small_gemm::PackPanel;

struct Problem {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const float* A;
  int64_t lda;
  const float* B;
  int64_t ldb;
  float beta;
  float* C;
  int64_t ldc;
};

// Columns [n0, n0 + 2 * lanes) of C (fewer at the right edge).
void RunPanel(const Kernels& ks, const Problem& p, int64_t n0, float* pack) {
  const int64_t nw = std::min<int64_t>(2 * ks.lanes, p.N - n0);
  const int vectors = nw > ks.lanes ? 2 : 1;
  const int64_t width = vectors * ks.lanes;
  // Equal row tiles (64 rows on AVX-512: 6 tiles of 10-11 rather than 5 of 12 and one of 4).
  const int64_t tiles = (p.M + ks.max_rows - 1) / ks.max_rows;
  for (int64_t k0 = 0; k0 < p.K; k0 += kKc) {
    const int64_t kc = std::min(kKc, p.K - k0);
    PackPanel(p.trans_b, p.B, p.ldb, k0, kc, n0, nw, width, pack);
    // Later K blocks add to what the first one wrote.
    const float beta = k0 == 0 ? p.beta : 1.f;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t m_lo = p.M * t / tiles, m_hi = p.M * (t + 1) / tiles;
      const float* a = p.trans_a ? p.A + k0 * p.lda + m_lo : p.A + m_lo * p.lda + k0;
      ks.tile(static_cast<int>(m_hi - m_lo), vectors, p.trans_a, a, p.lda, pack, kc, p.C + m_lo * p.ldc + n0, p.ldc, nw,
              p.alpha, beta);
    }
  }
}

}  // namespace

// Only with AVX-512 (small_gemm_isa.h says why).
bool SmallGemmApplies(int64_t M, int64_t N, int64_t K) {
  // TOB_SMALL_GEMM=0 sends everything to OpenBLAS (A/B measurements, or to rule this path out).
  static const bool enabled = EnvSwitchOn(EnvSwitch::kSmallGemm);
  return enabled && M <= kSmallGemmMaxM && small_gemm::avx512::Available();
}

void SmallGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* const* a,
               int64_t lda, const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t batch,
               ThreadPool* pool) {
  const Kernels& ks = small_gemm::avx512::Get();
  const int64_t panel_cols = 2 * ks.lanes;
  const int64_t panels = (N + panel_cols - 1) / panel_cols;
  auto run = [&](int64_t begin, int64_t end) {
    float* pack = PackBuffer();
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i = u / panels;
      const Problem p{trans_a, trans_b, M, N, K, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc};
      RunPanel(ks, p, (u % panels) * panel_cols, pack);
    }
  };
  const double flops = 2.0 * static_cast<double>(M) * N * K * batch;
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  if (threads <= 1 || flops < kMinParallelFlops || batch * panels == 1) {
    run(0, batch * panels);
    return;
  }
  ParallelFor(pool, batch * panels, 1, run);
}

}  // namespace tob
