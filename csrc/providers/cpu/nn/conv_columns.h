// im2col and its adjoint col2im, shared by Conv (one image per column block, ld = output size) and
// ConvGrad, which uses a row stride so that the columns of several images sit side by side in one
// matrix ([kernel rows, images * output positions]) and one GEMM with a long K (weight gradient) or
// a wide N (input gradient) covers a whole chunk of images.
// `g` is the Conv geometry: g.in are X's spatial dims, g.out dY's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "providers/cpu/nn/window_geometry.h"

namespace tob::conv_columns {

// Rows (c * K + k) of the column matrix, K = kernel size, for input channel plane `x_plane`;
// `col` points at this image's first column, rows are `ld` apart.
// `pad` fills the positions in the padding (0; the zero point for the integer convolutions).
template <typename T>
void Im2Col2D(const T* x_plane, const WindowGeometry& g, int64_t c, T* col, int64_t ld, T pad = T(0)) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  for (int64_t kh = 0; kh < KH; ++kh) {
    for (int64_t kw = 0; kw < KW; ++kw) {
      T* dst = col + ((c * KH + kh) * KW + kw) * ld;
      const int64_t w_off = kw * dw - g.pad_begin[1];
      int64_t ow_lo, ow_hi;
      ValidOutputRange(w_off, sw, W, OW, &ow_lo, &ow_hi);
      for (int64_t oh = 0; oh < OH; ++oh) {
        T* row = dst + oh * OW;
        const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
        if (ih < 0 || ih >= H) {
          std::fill(row, row + OW, pad);
          continue;
        }
        const T* src = x_plane + ih * W;
        std::fill(row, row + ow_lo, pad);
        if (sw == 1) {
          if (ow_hi > ow_lo) std::memcpy(row + ow_lo, src + ow_lo + w_off, sizeof(T) * (ow_hi - ow_lo));
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) row[ow] = src[ow * sw + w_off];
        }
        std::fill(row + ow_hi, row + OW, pad);
      }
    }
  }
}

// Im2Col2D restricted to the output positions [p0, p1) (row-major over the output plane): column
// j of each row is position p0 + j. Conv's tiled path fills one L2-sized block of columns at a
// time with it, so the GEMM reads the columns from cache right after they were written.
template <typename T>
void Im2Col2DRange(const T* x_plane, const WindowGeometry& g, int64_t c, T* col, int64_t ld, int64_t p0, int64_t p1) {
  const int64_t H = g.in[0], W = g.in[1], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  for (int64_t kh = 0; kh < KH; ++kh) {
    for (int64_t kw = 0; kw < KW; ++kw) {
      T* dst = col + ((c * KH + kh) * KW + kw) * ld - p0;  // dst[p] is position p's column
      const int64_t w_off = kw * dw - g.pad_begin[1];
      int64_t ow_lo, ow_hi;
      ValidOutputRange(w_off, sw, W, OW, &ow_lo, &ow_hi);
      // Output rows are walked incrementally (no division per row) and copied by plain loops:
      // on the short rows of late stages (7 or 14 positions) a division and library calls per
      // row cost more than the copy.
      int64_t oh = p0 / OW, ow0 = p0 % OW;
      for (int64_t p = p0; p < p1; ++oh, ow0 = 0) {
        const int64_t ow1 = std::min(OW, ow0 + (p1 - p));
        T* row = dst + p - ow0;  // row[ow] is position (oh, ow)
        const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
        if (ih < 0 || ih >= H) {
          for (int64_t ow = ow0; ow < ow1; ++ow) row[ow] = T(0);
        } else {
          const T* src = x_plane + ih * W;
          const int64_t lo = std::clamp(ow_lo, ow0, ow1), hi = std::clamp(ow_hi, lo, ow1);
          for (int64_t ow = ow0; ow < lo; ++ow) row[ow] = T(0);
          if (sw == 1) {
            const T* shifted = src + w_off;
            for (int64_t ow = lo; ow < hi; ++ow) row[ow] = shifted[ow];
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[ow * sw + w_off];
          }
          for (int64_t ow = hi; ow < ow1; ++ow) row[ow] = T(0);
        }
        p += ow1 - ow0;
      }
    }
  }
}

// Adds rows (c * K + k) of the columns back into input plane `dx_plane` (the adjoint of Im2Col2D).
template <typename T>
void Col2Im2D(const T* col, const WindowGeometry& g, int64_t c, int64_t ld, T* dx_plane) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  for (int64_t kh = 0; kh < KH; ++kh) {
    for (int64_t kw = 0; kw < KW; ++kw) {
      const T* src = col + ((c * KH + kh) * KW + kw) * ld;
      const int64_t w_off = kw * dw - g.pad_begin[1];
      int64_t ow_lo, ow_hi;
      ValidOutputRange(w_off, sw, W, OW, &ow_lo, &ow_hi);
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
        if (ih < 0 || ih >= H) continue;
        T* dst = dx_plane + ih * W;
        const T* s = src + oh * OW;
        if (sw == 1) {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow + w_off] += s[ow];
        } else {
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * sw + w_off] += s[ow];
        }
      }
    }
  }
}

// Any spatial rank: calls fn(column offset within the row, input offset or -1 when in padding)
// for every (kernel tap, output position) of the window, kernel taps outermost.
template <typename Fn>
void ForEachTap(const WindowGeometry& g, Fn&& fn) {
  const size_t r = g.rank();
  const int64_t out_size = g.out_size(), ksize = g.kernel_size();
  std::vector<int64_t> k(r, 0), o(r, 0);
  for (int64_t ki = 0; ki < ksize; ++ki) {
    std::fill(o.begin(), o.end(), 0);
    for (int64_t oi = 0; oi < out_size; ++oi) {
      int64_t offset = 0;
      bool inside = true;
      for (size_t d = 0; d < r && inside; ++d) {
        const int64_t pos = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
        inside = pos >= 0 && pos < g.in[d];
        offset = offset * g.in[d] + pos;
      }
      fn(ki, oi, inside ? offset : -1);
      for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++o[d] == g.out[d]; --d) o[d] = 0;
    }
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++k[d] == g.kernel[d]; --d) k[d] = 0;
  }
}

template <typename T>
void Im2ColND(const T* x_plane, const WindowGeometry& g, int64_t c, T* col, int64_t ld, T pad = T(0)) {
  const int64_t ksize = g.kernel_size();
  ForEachTap(
      g, [&](int64_t ki, int64_t oi, int64_t in) { col[(c * ksize + ki) * ld + oi] = in >= 0 ? x_plane[in] : pad; });
}

template <typename T>
void Col2ImND(const T* col, const WindowGeometry& g, int64_t c, int64_t ld, T* dx_plane) {
  const int64_t ksize = g.kernel_size();
  ForEachTap(g, [&](int64_t ki, int64_t oi, int64_t in) {
    if (in >= 0) dx_plane[in] += col[(c * ksize + ki) * ld + oi];
  });
}

}  // namespace tob::conv_columns
