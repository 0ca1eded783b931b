// The implicit-GEMM convolution's register tile (conv_implicit.h): up to 12 consecutive grid
// positions x 2 zmm (32 output channels of a packed panel), 24 accumulators over a K block;
// for each tap k, 12 broadcasts of planes[koff[k] + i] (consecutive floats) against the panel's
// row k. The build targets x86-64-v3, so the functions carry their own target attribute and run
// only where Available().
#include <utility>

#include "providers/cpu/nn/conv_implicit.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_CI_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::conv_implicit {

#if TOB_CI_AVX512

namespace {

constexpr int kLanes = 16;

template <int Rows, int Vectors, bool Accumulate>
TOB_AVX512_FN void TileAvx512(const float* p, const int32_t* koff, int64_t K, const float* panel, int nw, float* out,
                              int64_t ldo) {
  __m512 acc[Rows][Vectors];
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* bp = panel;
  for (int64_t k = 0; k < K; ++k, bp += Vectors * kLanes) {
    __m512 b[Vectors];
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) b[v] = _mm512_load_ps(bp + v * kLanes);
    const float* a = p + koff[k];
#pragma GCC unroll 16
    for (int r = 0; r < Rows; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 2
      for (int v = 0; v < Vectors; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  __mmask16 mask[Vectors];
#pragma GCC unroll 2
  for (int v = 0; v < Vectors; ++v) {
    const int left = nw - v * kLanes;
    mask[v] = left >= kLanes ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
  }
#pragma GCC unroll 16
  for (int r = 0; r < Rows; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < Vectors; ++v) {
      float* o = out + r * ldo + v * kLanes;
      __m512 sum = acc[r][v];
      if constexpr (Accumulate) sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(mask[v], o));
      _mm512_mask_storeu_ps(o, mask[v], sum);
    }
}

using RawTile = void (*)(const float*, const int32_t*, int64_t, const float*, int, float*, int64_t);

// table.rows[rows - 1].f[vectors - 1][accumulate]
struct Entry {
  RawTile f[2][2];
};
template <size_t... R>
constexpr auto MakeTable(std::index_sequence<R...>) {
  struct Table {
    Entry rows[sizeof...(R)];
  };
  return Table{{Entry{{{TileAvx512<R + 1, 1, false>, TileAvx512<R + 1, 1, true>},
                       {TileAvx512<R + 1, 2, false>, TileAvx512<R + 1, 2, true>}}}...}};
}
constexpr auto kTable = MakeTable(std::make_index_sequence<kTileRows>());

}  // namespace

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

void Tile(int rows, int width, const float* p, const int32_t* koff, int64_t K, const float* panel, int nw, float* out,
          int64_t ldo, bool accumulate) {
  if (!Available()) return TileScalar(rows, width, p, koff, K, panel, nw, out, ldo, accumulate);
  kTable.rows[rows - 1].f[width > kLanes ? 1 : 0][accumulate ? 1 : 0](p, koff, K, panel, nw, out, ldo);
}

#else

bool Available() { return false; }

void Tile(int rows, int width, const float* p, const int32_t* koff, int64_t K, const float* panel, int nw, float* out,
          int64_t ldo, bool accumulate) {
  TileScalar(rows, width, p, koff, K, panel, nw, out, ldo, accumulate);
}

#endif

}  // namespace tob::conv_implicit
