// AVX-512 output rows of stride-1 depthwise convs (conv_depthwise_isa.h). The build targets
// x86-64-v3, so the function carries its own target attribute and runs only when Available().
#include <algorithm>

#include "providers/cpu/nn/conv_depthwise_isa.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_DW_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f")))
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace tob::conv_depthwise::avx512 {

#if TOB_DW_AVX512

bool Available() {
  static const bool available = __builtin_cpu_supports("avx512f");
  return available;
}

namespace {

// `Rows` output rows at once: their accumulators are independent, so the multiply-adds of one
// tap do not wait on each other's latency (one row alone is a chain of KH * KW dependent FMAs).
template <int Rows>
TOB_AVX512_FN void RowBlock(const float* const* in_rows, const float* filt, int64_t KH, int64_t KW, int64_t dw,
                            int64_t pad_left, int64_t W, float bias, float* out, int64_t OW) {
  constexpr int64_t kLanes = 16;
  for (int64_t ow0 = 0; ow0 < OW; ow0 += kLanes) {
    const int64_t nw = std::min(kLanes, OW - ow0);
    __m512 acc[Rows];
    for (int r = 0; r < Rows; ++r) acc[r] = _mm512_set1_ps(bias);
    for (int64_t kw = 0; kw < KW; ++kw) {
      // Lane i reads input column start + i; lanes outside [0, W) are padding (masked off, never
      // read), as are lanes past the row's end.
      const int64_t start = ow0 + kw * dw - pad_left;
      const int64_t lo = std::max<int64_t>(0, -start), hi = std::min(nw, W - start);
      if (hi <= lo) continue;
      const __mmask16 mask = static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
      for (int64_t kh = 0; kh < KH; ++kh) {
        const __m512 wv = _mm512_set1_ps(filt[kh * KW + kw]);
        for (int r = 0; r < Rows; ++r) {
          const float* in = in_rows[r * KH + kh];
          if (in == nullptr) continue;  // the tap row lies in the padding
          acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mask, in + start), acc[r]);
        }
      }
    }
    const __mmask16 store = static_cast<__mmask16>((1u << nw) - 1u);
    for (int r = 0; r < Rows; ++r) _mm512_mask_storeu_ps(out + r * OW + ow0, store, acc[r]);
  }
}

}  // namespace

void Rows(int rows, const float* const* in_rows, const float* filt, int64_t KH, int64_t KW, int64_t dw,
          int64_t pad_left, int64_t W, float bias, float* out, int64_t OW) {
  switch (rows) {
    case 1: return RowBlock<1>(in_rows, filt, KH, KW, dw, pad_left, W, bias, out, OW);
    case 2: return RowBlock<2>(in_rows, filt, KH, KW, dw, pad_left, W, bias, out, OW);
    case 3: return RowBlock<3>(in_rows, filt, KH, KW, dw, pad_left, W, bias, out, OW);
    default: return RowBlock<4>(in_rows, filt, KH, KW, dw, pad_left, W, bias, out, OW);
  }
}

#else

bool Available() { return false; }
void Rows(int, const float* const*, const float*, int64_t, int64_t, int64_t, int64_t, int64_t, float, float*, int64_t) {
}

#endif

}  // namespace tob::conv_depthwise::avx512
