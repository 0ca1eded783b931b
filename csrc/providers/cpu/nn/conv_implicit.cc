// The phase-plane layout of the implicit-GEMM convolution and its plain-loop tile
// (conv_implicit.h); the AVX-512 tile is in conv_implicit_avx512.cc.
#include "providers/cpu/nn/conv_implicit.h"

#include <algorithm>
#include <cstring>

namespace tob::conv_implicit {

namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Offset of tap (c, kh, kw) in the phase planes.
int64_t TapOffset(const WindowGeometry& g, const Layout& l, int64_t c, int64_t kh, int64_t kw) {
  const int64_t rh = kh * g.dilations[0], rw = kw * g.dilations[1];
  const int64_t phase = (c * l.sh + rh % l.sh) * l.sw + rw % l.sw;
  return phase * l.plane + (rh / l.sh) * l.Wq + rw / l.sw;
}

}  // namespace

Layout MakeLayout(const WindowGeometry& g, int64_t channels) {
  Layout l;
  l.sh = g.strides[0];
  l.sw = g.strides[1];
  l.Hq = CeilDiv(g.in[0] + g.pad_begin[0] + g.pad_end[0], l.sh);
  l.Wq = CeilDiv(g.in[1] + g.pad_begin[1] + g.pad_end[1], l.sw);
  l.plane = l.Hq * l.Wq;
  l.positions = (g.out[0] - 1) * l.Wq + g.out[1];
  l.rows = CeilDiv(l.positions, kTileRows) * kTileRows;
  // The last tiles read up to the largest tap offset + rows: past the planes at the end, zeros.
  int64_t max_offset = 0;
  for (int64_t kh = 0; kh < g.kernel[0]; ++kh)
    for (int64_t kw = 0; kw < g.kernel[1]; ++kw)
      max_offset = std::max(max_offset, TapOffset(g, l, channels - 1, kh, kw));
  l.floats = std::max(channels * l.sh * l.sw * l.plane, max_offset + l.rows);
  return l;
}

std::vector<int32_t> KernelOffsets(const WindowGeometry& g, const Layout& l, int64_t channels) {
  std::vector<int32_t> koff;
  koff.reserve(static_cast<size_t>(channels * g.kernel[0] * g.kernel[1]));
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t kh = 0; kh < g.kernel[0]; ++kh)
      for (int64_t kw = 0; kw < g.kernel[1]; ++kw) koff.push_back(static_cast<int32_t>(TapOffset(g, l, c, kh, kw)));
  return koff;
}

void FillPhasePlanes(const float* x, const WindowGeometry& g, const Layout& l, int64_t c0, int64_t c1, float* dst) {
  const int64_t H = g.in[0], W = g.in[1], pt = g.pad_begin[0], pl = g.pad_begin[1];
  for (int64_t c = c0; c < c1; ++c) {
    const float* src = x + c * H * W;
    for (int64_t ph = 0; ph < l.sh; ++ph)
      for (int64_t pw = 0; pw < l.sw; ++pw) {
        float* plane = dst + ((c * l.sh + ph) * l.sw + pw) * l.plane;
        // Columns j of this phase read input column j * sw + pw - pl: the valid j are [j0, j1).
        const int64_t j0 = std::min(l.Wq, std::max<int64_t>(0, CeilDiv(pl - pw, l.sw)));
        const int64_t j1 = std::max(j0, std::min(l.Wq, CeilDiv(W + pl - pw, l.sw)));
        for (int64_t i = 0; i < l.Hq; ++i) {
          float* row = plane + i * l.Wq;
          const int64_t ih = i * l.sh + ph - pt;
          if (ih < 0 || ih >= H) {
            std::fill(row, row + l.Wq, 0.f);
            continue;
          }
          const float* in = src + ih * W;
          std::fill(row, row + j0, 0.f);
          if (l.sw == 1) {
            if (j1 > j0) std::memcpy(row + j0, in + j0 + pw - pl, sizeof(float) * static_cast<size_t>(j1 - j0));
          } else {
            for (int64_t j = j0; j < j1; ++j) row[j] = in[j * l.sw + pw - pl];
          }
          std::fill(row + j1, row + l.Wq, 0.f);
        }
      }
  }
}

void TileScalar(int rows, int width, const float* p, const int32_t* koff, int64_t K, const float* panel, int nw,
                float* out, int64_t ldo, bool accumulate) {
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < nw; ++j) {
      float sum = 0.f;
      for (int64_t k = 0; k < K; ++k) sum += p[koff[k] + i] * panel[k * width + j];
      out[i * ldo + j] = accumulate ? out[i * ldo + j] + sum : sum;
    }
}

}  // namespace tob::conv_implicit
