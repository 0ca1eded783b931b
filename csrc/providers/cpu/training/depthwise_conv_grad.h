// ConvGrad for depthwise 1-D/2-D convs (one input channel per group, output channels m =
// c * multiplier + j): direct loops instead of GEMMs that would be matrix-vector products per
// channel. Geometry `g` is the Conv's, already in 2-D form (WindowGeometry::As2D).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "framework/thread_pool.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob::conv_grad {

// dst[i * stride] += w * src[i] and acc[i] += a[i] * b[i * stride] for i in [0, n): the rows
// never overlap, and restrict spares the short loops the compiler's runtime alias checks.
template <typename T>
inline void ScatterRow(T* __restrict dst, const T* __restrict src, T w, int64_t n, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] += w * src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] += w * src[i];
  }
}

template <typename T>
inline void AccumulateRow(T* __restrict acc, const T* __restrict a, const T* __restrict b, int64_t n, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) acc[i] += a[i] * b[i];
  } else {
    for (int64_t i = 0; i < n; ++i) acc[i] += a[i] * b[i * stride];
  }
}

struct DepthwiseShape {
  int64_t N, C, M;  // images, input channels (= groups), output channels
};

// dX plane (n, c) = sum over its output channels of dY scattered back through the filter taps.
template <typename T>
void DepthwiseInputGrad(const T* dy, const T* w, const DepthwiseShape& s, const WindowGeometry& g, T* dx,
                        ThreadPool* pool) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1], KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t mult = s.M / s.C;
  std::vector<int64_t> lo(KW), hi(KW);
  for (int64_t kw = 0; kw < KW; ++kw) ValidOutputRange(kw * dw - g.pad_begin[1], sw, W, OW, &lo[kw], &hi[kw]);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, mult * OH * OW * KH * KW));
  ParallelFor(pool, s.N * s.C, grain, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n = p / s.C, c = p % s.C;
      T* plane = dx + p * H * W;
      std::fill(plane, plane + H * W, T(0));
      for (int64_t j = 0; j < mult; ++j) {
        const int64_t m = c * mult + j;
        const T* dyp = dy + (n * s.M + m) * OH * OW;
        const T* filt = w + m * KH * KW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const T* dyr = dyp + oh * OW;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
            if (ih < 0 || ih >= H) continue;
            T* row = plane + ih * W;
            for (int64_t kw = 0; kw < KW; ++kw) {
              if (hi[kw] <= lo[kw]) continue;
              const int64_t off = kw * dw - g.pad_begin[1];
              ScatterRow(row + lo[kw] * sw + off, dyr + lo[kw], filt[kh * KW + kw], hi[kw] - lo[kw], sw);
            }
          }
        }
      }
    }
  });
}

// dW[m, kh, kw] = sum over images and output positions of dY * the X value under the tap. Each
// tap accumulates per output column in `lanes` ([M, KH * KW, OW] scratch: vector adds, no
// reduction in the inner loop), reduced once at the end.
template <typename T>
void DepthwiseWeightGrad(const T* dy, const T* x, const DepthwiseShape& s, const WindowGeometry& g, T* dwt, T* lanes,
                         ThreadPool* pool) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1], KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t mult = s.M / s.C, K = KH * KW;
  std::vector<int64_t> lo(KW), hi(KW);
  for (int64_t kw = 0; kw < KW; ++kw) ValidOutputRange(kw * dw - g.pad_begin[1], sw, W, OW, &lo[kw], &hi[kw]);
  ParallelFor(pool, s.M, 1, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      T* acc = lanes + m * K * OW;
      std::fill(acc, acc + K * OW, T(0));
      const int64_t c = m / mult;
      for (int64_t n = 0; n < s.N; ++n) {
        const T* dyp = dy + (n * s.M + m) * OH * OW;
        const T* xp = x + (n * s.C + c) * H * W;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const T* dyr = dyp + oh * OW;
          for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
            if (ih < 0 || ih >= H) continue;
            const T* xr = xp + ih * W;
            for (int64_t kw = 0; kw < KW; ++kw) {
              if (hi[kw] <= lo[kw]) continue;
              const int64_t off = kw * dw - g.pad_begin[1];
              AccumulateRow(acc + (kh * KW + kw) * OW + lo[kw], dyr + lo[kw], xr + lo[kw] * sw + off, hi[kw] - lo[kw],
                            sw);
            }
          }
        }
      }
      for (int64_t k = 0; k < K; ++k) {
        double total = 0;
        for (int64_t ow = 0; ow < OW; ++ow) total += acc[k * OW + ow];
        dwt[m * K + k] = static_cast<T>(total);
      }
    }
  });
}

}  // namespace tob::conv_grad
