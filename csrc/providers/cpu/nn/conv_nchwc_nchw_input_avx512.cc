// The stem's register tile (conv_nchwc_nchw_input.h): up to 12 output positions x 1 or 2 output
// blocks (24 zmm accumulators); for each tap one 16-wide weight row per block and 12 broadcasts
// of the positions' input values, then bias and Relu on the accumulators and one 64-byte store
// per position and block. Relu keeps a NaN (vmaxps returns its second operand when one is NaN),
// as torch's relu does. The build targets x86-64-v3, so the functions carry their own target
// attribute and run only where Avx512Available().
#include "providers/cpu/nn/conv_nchwc.h"
#include "providers/cpu/nn/conv_nchwc_nchw_input.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_NCI_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f")))
#endif

namespace tob::conv_nchwc {

void TileNchwInputScalar(int rows, int blocks, const float* x, int64_t xs, const int64_t* xoff, int64_t ntaps,
                         const float* w, int64_t wblock, const float* bias, bool relu, float* y, int64_t yblock) {
  for (int v = 0; v < blocks; ++v)
    for (int r = 0; r < rows; ++r) {
      float acc[kBlock];
      for (int j = 0; j < kBlock; ++j) acc[j] = bias != nullptr ? bias[v * kBlock + j] : 0.f;
      for (int64_t t = 0; t < ntaps; ++t) {
        const float a = x[xoff[t] + r * xs];
        const float* b = w + v * wblock + t * kBlock;
        for (int j = 0; j < kBlock; ++j) acc[j] += a * b[j];
      }
      float* dst = y + v * yblock + r * kBlock;
      for (int j = 0; j < kBlock; ++j) dst[j] = relu && acc[j] < 0.f ? 0.f : acc[j];
    }
}

#if TOB_NCI_AVX512

namespace {

template <int R, int V>
TOB_AVX512_FN void TileNchwInputAvx512(const float* x, int64_t xs, const int64_t* xoff, int64_t ntaps, const float* w,
                                       int64_t wblock, const float* bias, bool relu, float* y, int64_t yblock) {
  __m512 acc[R][V];
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v) {
    const __m512 b = bias != nullptr ? _mm512_loadu_ps(bias + v * kBlock) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r][v] = b;
  }
#pragma GCC unroll 2
  for (int64_t t = 0; t < ntaps; ++t) {
    const float* a = x + xoff[t];
    __m512 b[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(w + v * wblock + t * kBlock);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * xs]);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v)
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(y + v * yblock + r * kBlock, relu ? _mm512_max_ps(zero, acc[r][v]) : acc[r][v]);
}

using TileFn = void (*)(const float*, int64_t, const int64_t*, int64_t, const float*, int64_t, const float*, bool,
                        float*, int64_t);

template <int R>
TileFn Pick(int blocks) {
  return blocks == 2 ? &TileNchwInputAvx512<R, 2> : &TileNchwInputAvx512<R, 1>;
}

TileFn Select(int rows, int blocks) {
  switch (rows) {
    case 1: return Pick<1>(blocks);
    case 2: return Pick<2>(blocks);
    case 3: return Pick<3>(blocks);
    case 4: return Pick<4>(blocks);
    case 5: return Pick<5>(blocks);
    case 6: return Pick<6>(blocks);
    case 7: return Pick<7>(blocks);
    case 8: return Pick<8>(blocks);
    case 9: return Pick<9>(blocks);
    case 10: return Pick<10>(blocks);
    case 11: return Pick<11>(blocks);
    default: return Pick<12>(blocks);
  }
}

}  // namespace

void TileNchwInput(int rows, int blocks, const float* x, int64_t xs, const int64_t* xoff, int64_t ntaps, const float* w,
                   int64_t wblock, const float* bias, bool relu, float* y, int64_t yblock) {
  if (!Avx512Available() || rows < 1 || rows > kTileRows || blocks < 1 || blocks > 2)
    return TileNchwInputScalar(rows, blocks, x, xs, xoff, ntaps, w, wblock, bias, relu, y, yblock);
  Select(rows, blocks)(x, xs, xoff, ntaps, w, wblock, bias, relu, y, yblock);
}

#else

void TileNchwInput(int rows, int blocks, const float* x, int64_t xs, const int64_t* xoff, int64_t ntaps, const float* w,
                   int64_t wblock, const float* bias, bool relu, float* y, int64_t yblock) {
  TileNchwInputScalar(rows, blocks, x, xs, xoff, ntaps, w, wblock, bias, relu, y, yblock);
}

#endif

}  // namespace tob::conv_nchwc
