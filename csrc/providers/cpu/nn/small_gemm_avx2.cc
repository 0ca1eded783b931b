// AVX2 tiles for small_gemm: up to 6 rows x 2 ymm (16 columns), 12 accumulators (of 16 ymm
// registers). Compiled for the build's x86-64-v3 target, so always available.
#include <immintrin.h>

#include <utility>

#include "providers/cpu/nn/small_gemm_isa.h"

namespace tob::small_gemm::avx2 {

namespace {

constexpr int kLanes = 8;
constexpr int kMaxRows = 6;

template <int Rows, int Vectors, bool TransA>
void Tile(const float* a, int64_t lda, const float* bp, int64_t kc, float* c, int64_t ldc, int64_t nw,
          float alpha, float beta) {
  __m256 acc[Rows][Vectors];
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m256 b[Vectors];
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) b[v] = _mm256_load_ps(bp + k * (Vectors * kLanes) + v * kLanes);
    const float* ak = TransA ? a + k * lda : a + k;
#pragma GCC unroll 8
    for (int r = 0; r < Rows; ++r) {
      __m256 av = _mm256_broadcast_ss(TransA ? ak + r : ak + r * lda);
#pragma GCC unroll 2
      for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm256_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask[Vectors];
#pragma GCC unroll 2
  for (int v = 0; v < Vectors; ++v) {
    int64_t left = nw - v * kLanes;
    int left32 = left >= kLanes ? kLanes : left <= 0 ? 0 : static_cast<int>(left);
    mask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(left32), lane);
  }
  const bool full = nw == Vectors * kLanes;
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < Rows; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) {
      __m256 x = _mm256_mul_ps(acc[r][v], va);
      if (full) {
        if (beta != 0.f) x = _mm256_fmadd_ps(_mm256_loadu_ps(cr + v * kLanes), vb, x);
        _mm256_storeu_ps(cr + v * kLanes, x);
      } else {
        if (beta != 0.f) x = _mm256_fmadd_ps(_mm256_maskload_ps(cr + v * kLanes, mask[v]), vb, x);
        _mm256_maskstore_ps(cr + v * kLanes, mask[v], x);
      }
    }
  }
}

using RawTile = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, float, float);

// table[rows - 1][vectors - 1][trans_a]
template <size_t... R>
constexpr auto MakeTable(std::index_sequence<R...>) {
  using Row = RawTile[2][2];
  struct Table { Row rows[sizeof...(R)]; };
  return Table{{{{Tile<R + 1, 1, false>, Tile<R + 1, 1, true>}, {Tile<R + 1, 2, false>, Tile<R + 1, 2, true>}}...}};
}
constexpr auto kTable = MakeTable(std::make_index_sequence<kMaxRows>());

void RunTile(int rows, int vectors, bool trans_a, const float* a, int64_t lda, const float* bp, int64_t kc,
             float* c, int64_t ldc, int64_t nw, float alpha, float beta) {
  kTable.rows[rows - 1][vectors - 1][trans_a ? 1 : 0](a, lda, bp, kc, c, ldc, nw, alpha, beta);
}

}  // namespace

bool Available() { return true; }

const Kernels& Get() {
  static const Kernels kernels{"avx2", kLanes, kMaxRows, RunTile};
  return kernels;
}

}  // namespace tob::small_gemm::avx2
