// Depthwise conv rows on AVX-512 (conv_depthwise_avx512.cc): up to 4 output rows of a stride-1
// depthwise conv per call, 16 output columns of each summed over all taps in one register (the rows
// in independent registers) and stored once,
// padding handled by masked loads. The portable tap-by-tap loop in conv.cc makes a pass over the
// row per tap, which on short rows (ConvNeXt's 7x7 on 28x28 and 14x14) measured 20x slower than
// torch's kernel.
#pragma once

#include <cstdint>

namespace tob::conv_depthwise::avx512 {

bool Available();  // compiled in and supported by this CPU

// `rows` (1..kMaxRows) consecutive output rows r: out[r * OW + ow] = bias + sum over kh, kw of
// filt[kh * KW + kw] * in_rows[r * KH + kh][ow + kw * dw - pad_left], for ow in [0, OW), with
// input columns outside [0, W) and null in_rows entries (rows in the padding) contributing nothing.
constexpr int kMaxRows = 4;
void Rows(int rows, const float* const* in_rows, const float* filt, int64_t KH, int64_t KW, int64_t dw,
          int64_t pad_left, int64_t W, float bias, float* out, int64_t OW);

}  // namespace tob::conv_depthwise::avx512
