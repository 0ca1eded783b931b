// The blocked convolution's register tile (conv_nchwc.h): up to 12 output positions x 1 or 2
// output blocks (24 zmm accumulators), for each tap and input lane 12 broadcasts against the
// weights' 16-wide rows, then bias, Z and Relu on the accumulators and one 64-byte store per
// position and block. A tap whose positions all read inside the image takes the loop on one base
// pointer; a border tap reads zeros for the positions outside. The build targets x86-64-v3, so
// the functions carry their own target attribute and run only where Avx512Available().
#include <cstring>

#include "providers/cpu/nn/conv_nchwc.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_NC_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::conv_nchwc {

namespace {

alignas(64) const float kZeros[kBlock] = {};

}  // namespace

void TileScalar(int rows, int blocks, const float* x, int64_t xs, const Tap* taps, int64_t ntaps, const float* w,
                int64_t wblock, const float* bias, const float* z, bool relu, bool first, bool last, float* y,
                int64_t yblock) {
  for (int v = 0; v < blocks; ++v)
    for (int r = 0; r < rows; ++r) {
      const int64_t at = v * yblock + r * kBlock;
      float acc[kBlock];
      float* dst = y + at;
      for (int j = 0; j < kBlock; ++j) acc[j] = !first ? dst[j] : bias != nullptr ? bias[v * kBlock + j] : 0.f;
      for (int64_t t = 0; t < ntaps; ++t) {
        const float* a = (taps[t].valid >> r) & 1u ? x + taps[t].x + r * xs : kZeros;
        const float* b = w + taps[t].w + v * wblock;
        for (int ci = 0; ci < kBlock; ++ci)
          for (int j = 0; j < kBlock; ++j) acc[j] += a[ci] * b[ci * kBlock + j];
      }
      for (int j = 0; j < kBlock; ++j) {
        float value = acc[j];
        if (last && z != nullptr) value += z[at + j];
        dst[j] = last && relu && value < 0.f ? 0.f : value;
      }
    }
}

#if TOB_NC_AVX512

namespace {

template <int R, int V, bool Unit>
TOB_AVX512_FN void TileAvx512(const float* x, int64_t xs_runtime, const Tap* taps, int64_t ntaps, const float* w,
                              int64_t wblock, const float* bias, const float* z, bool relu, bool first, bool last,
                              float* y, int64_t yblock, const float* prefetch, int64_t prefetch_floats) {
  const int64_t xs = Unit ? kBlock : xs_runtime;
  // The prefetch range's cache lines, a few after each tap (for each output block).
  const char* pf = reinterpret_cast<const char*>(prefetch);
  const int64_t pf_lines = prefetch != nullptr ? (prefetch_floats + 15) / 16 : 0;
  const int64_t pf_per_tap = ntaps > 0 ? (pf_lines + ntaps - 1) / ntaps : 0;
  int64_t pf_done = 0;
  constexpr uint32_t kFull = (1u << R) - 1;
  __m512 acc[R][V];
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v) {
    if (!first) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) acc[r][v] = _mm512_loadu_ps(y + v * yblock + r * kBlock);
      continue;
    }
    const __m512 b = bias != nullptr ? _mm512_loadu_ps(bias + v * kBlock) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) acc[r][v] = b;
  }
  for (int64_t t = 0; t < ntaps; ++t) {
    const Tap& tap = taps[t];
    const float* b0 = w + tap.w;
    for (int64_t i = 0; i < pf_per_tap && pf_done < pf_lines; ++i, ++pf_done)
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) _mm_prefetch(pf + v * wblock * 4 + pf_done * 64, _MM_HINT_T1);
    if ((tap.valid & kFull) == kFull) {
      const float* a = x + tap.x;
#pragma GCC unroll 4
      for (int ci = 0; ci < kBlock; ++ci) {
        __m512 b[V];
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(b0 + v * wblock + ci * kBlock);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const __m512 av = _mm512_set1_ps(a[r * xs + ci]);
#pragma GCC unroll 2
          for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
        }
      }
    } else {
      const float* ap[R];
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) ap[r] = (tap.valid >> r) & 1u ? x + tap.x + r * xs : kZeros;
      for (int ci = 0; ci < kBlock; ++ci) {
        __m512 b[V];
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(b0 + v * wblock + ci * kBlock);
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const __m512 av = _mm512_set1_ps(ap[r][ci]);
#pragma GCC unroll 2
          for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
        }
      }
    }
  }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int v = 0; v < V; ++v)
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      __m512 value = acc[r][v];
      if (last && z != nullptr) value = _mm512_add_ps(value, _mm512_loadu_ps(z + v * yblock + r * kBlock));
      if (last && relu) value = _mm512_max_ps(zero, value);  // NaN in the second operand is kept (torch)
      _mm512_storeu_ps(y + v * yblock + r * kBlock, value);
    }
}

using TileFn = void (*)(const float*, int64_t, const Tap*, int64_t, const float*, int64_t, const float*, const float*,
                        bool, bool, bool, float*, int64_t, const float*, int64_t);

template <int R>
TileFn Pick(int blocks, bool unit) {
  if (blocks == 2) return unit ? &TileAvx512<R, 2, true> : &TileAvx512<R, 2, false>;
  return unit ? &TileAvx512<R, 1, true> : &TileAvx512<R, 1, false>;
}

TileFn Select(int rows, int blocks, bool unit) {
  switch (rows) {
    case 1: return Pick<1>(blocks, unit);
    case 2: return Pick<2>(blocks, unit);
    case 3: return Pick<3>(blocks, unit);
    case 4: return Pick<4>(blocks, unit);
    case 5: return Pick<5>(blocks, unit);
    case 6: return Pick<6>(blocks, unit);
    case 7: return Pick<7>(blocks, unit);
    case 8: return Pick<8>(blocks, unit);
    case 9: return Pick<9>(blocks, unit);
    case 10: return Pick<10>(blocks, unit);
    case 11: return Pick<11>(blocks, unit);
    default: return Pick<12>(blocks, unit);
  }
}

}  // namespace

bool Avx512Available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

void Tile(int rows, int blocks, const float* x, int64_t xs, const Tap* taps, int64_t ntaps, const float* w,
          int64_t wblock, const float* bias, const float* z, bool relu, bool first, bool last, float* y, int64_t yblock,
          const float* prefetch, int64_t prefetch_floats) {
  if (!Avx512Available() || rows < 1 || rows > kTileRows || blocks < 1 || blocks > 2)
    return TileScalar(rows, blocks, x, xs, taps, ntaps, w, wblock, bias, z, relu, first, last, y, yblock);
  Select(rows, blocks, xs == kBlock)(x, xs, taps, ntaps, w, wblock, bias, z, relu, first, last, y, yblock, prefetch,
                                     prefetch_floats);
}

#else

bool Avx512Available() { return false; }

void Tile(int rows, int blocks, const float* x, int64_t xs, const Tap* taps, int64_t ntaps, const float* w,
          int64_t wblock, const float* bias, const float* z, bool relu, bool first, bool last, float* y, int64_t yblock,
          const float*, int64_t) {
  TileScalar(rows, blocks, x, xs, taps, ntaps, w, wblock, bias, z, relu, first, last, y, yblock);
}

#endif

}  // namespace tob::conv_nchwc
