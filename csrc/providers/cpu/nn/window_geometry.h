// Concrete window geometry of one Conv / ConvTranspose / pooling call, from the node's
// attributes (ops/nn_window_attributes.h, the same arithmetic the shape function used) and the
// actual input shape.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "framework/kernel.h"
#include "ops/nn_window_attributes.h"

namespace tob {

struct WindowGeometry {
  // Per spatial dim. For ConvTranspose `in` is the (small) input and `out` the (large) output.
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin, pad_end;

  size_t rank() const { return in.size(); }
  int64_t in_size() const { return Product(in); }
  int64_t out_size() const { return Product(out); }
  int64_t kernel_size() const { return Product(kernel); }
  bool IsPointwise() const {
    for (size_t i = 0; i < rank(); ++i)
      if (kernel[i] != 1 || strides[i] != 1 || pad_begin[i] != 0 || pad_end[i] != 0) return false;
    return true;
  }

  static int64_t Product(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t x : v) p *= x;
    return p;
  }

  // `x_shape` is [N, C, spatial...]; `weight_kernel` the weight's spatial dims (empty for pools).
  static StatusOr<WindowGeometry> Compute(const Node& node, const WindowAttributes& attrs, const Shape& x_shape,
                                          const std::vector<int64_t>& weight_kernel, bool transposed) {
    if (x_shape.size() < 3) return InvalidArgument(node.Describe(), ": input must have rank >= 3");
    const int64_t r = static_cast<int64_t>(x_shape.size()) - 2;
    TOB_ASSIGN_OR_RETURN(WindowAttributes a, attrs.Resolve(node, r, weight_kernel));
    WindowGeometry g;
    for (size_t i = 0; i < static_cast<size_t>(r); ++i) {
      int64_t in = x_shape[i + 2];
      TOB_ASSIGN_OR_RETURN(WindowDim d,
                           transposed ? TransposedWindowDim(node, a, i, in) : SlidingWindowDim(node, a, i, in));
      g.in.push_back(in);
      g.out.push_back(d.out);
      g.kernel.push_back(a.kernel_shape[i]);
      g.strides.push_back(a.strides[i]);
      g.dilations.push_back(a.dilations[i]);
      g.pad_begin.push_back(d.pad_begin);
      g.pad_end.push_back(d.pad_end);
    }
    return g;
  }

  // The geometry with `in` and `out` exchanged: a ConvTranspose is the input gradient of the Conv
  // of this geometry, so its col2im is that Conv's (conv_columns.h).
  WindowGeometry Swapped() const {
    WindowGeometry g = *this;
    std::swap(g.in, g.out);
    return g;
  }

  // The 1-D case as 2-D with a unit leading dim, so 2-D loops serve both.
  WindowGeometry As2D() const {
    if (rank() != 1) return *this;
    WindowGeometry g;
    g.in = {1, in[0]};
    g.out = {1, out[0]};
    g.kernel = {1, kernel[0]};
    g.strides = {1, strides[0]};
    g.dilations = {1, dilations[0]};
    g.pad_begin = {0, pad_begin[0]};
    g.pad_end = {0, pad_end[0]};
    return g;
  }
};

// Range [lo, hi) of output positions o for which o * stride + offset lies in [0, size).
inline void ValidOutputRange(int64_t offset, int64_t stride, int64_t size, int64_t out, int64_t* lo, int64_t* hi) {
  int64_t l = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t last = size - 1 - offset;  // o * stride <= last
  int64_t h = last < 0 ? 0 : last / stride + 1;
  *lo = std::min(l, out);
  *hi = std::max(*lo, std::min(h, out));
}

}  // namespace tob
