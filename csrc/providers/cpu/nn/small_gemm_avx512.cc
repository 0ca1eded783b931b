// AVX-512 tiles for small_gemm: up to 12 rows x 2 zmm (32 columns), 24 accumulators. The build
// targets x86-64-v3, so these functions carry their own target attribute and are only called
// when Available().
#include <utility>

#include "providers/cpu/nn/small_gemm_isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_SG_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f,avx512dq")))
// GCC 12 warns inside its own avx512fintrin.h (_mm512_undefined_ps initialises from itself).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::small_gemm::avx512 {

#if TOB_SG_AVX512

namespace {

constexpr int kLanes = 16;
constexpr int kMaxRows = 12;

template <int Rows, int Vectors, bool TransA>
TOB_AVX512_FN void Tile(const float* a, int64_t lda, const float* bp, int64_t kc, float* c, int64_t ldc, int64_t nw,
                        float alpha, float beta) {
  __m512 acc[Rows][Vectors];
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 b[Vectors];
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) b[v] = _mm512_load_ps(bp + k * (Vectors * kLanes) + v * kLanes);
    const float* ak = TransA ? a + k * lda : a + k;
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      __m512 av = _mm512_set1_ps(TransA ? ak[r] : ak[r * lda]);
#pragma GCC unroll 2
      for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  __mmask16 mask[Vectors];
#pragma GCC unroll 2
  for (int v = 0; v < Vectors; ++v) {
    int64_t left = nw - v * kLanes;
    mask[v] = left >= kLanes ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r) {
    float* cr = c + r * ldc;
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) {
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.f) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask[v], cr + v * kLanes), vb, x);
      _mm512_mask_storeu_ps(cr + v * kLanes, mask[v], x);
    }
  }
}

using RawTile = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, int64_t, float, float);

// table[rows - 1][vectors - 1][trans_a]
template <size_t... R>
constexpr auto MakeTable(std::index_sequence<R...>) {
  using Row = RawTile[2][2];
  struct Table {
    Row rows[sizeof...(R)];
  };
  return Table{{{{Tile<R + 1, 1, false>, Tile<R + 1, 1, true>}, {Tile<R + 1, 2, false>, Tile<R + 1, 2, true>}}...}};
}
constexpr auto kTable = MakeTable(std::make_index_sequence<kMaxRows>());

void RunTile(int rows, int vectors, bool trans_a, const float* a, int64_t lda, const float* bp, int64_t kc, float* c,
             int64_t ldc, int64_t nw, float alpha, float beta) {
  kTable.rows[rows - 1][vectors - 1][trans_a ? 1 : 0](a, lda, bp, kc, c, ldc, nw, alpha, beta);
}

}  // namespace

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return available;
}

const Kernels& Get() {
  static const Kernels kernels{"avx512", kLanes, kMaxRows, RunTile};
  return kernels;
}

#else

bool Available() { return false; }
const Kernels& Get() {
  static const Kernels kernels{"avx512 (not compiled)", 16, 12, nullptr};
  return kernels;
}

#endif

}  // namespace tob::small_gemm::avx512
