// Window geometry shared by Conv, ConvTranspose and the pooling ops: their attributes and the
// output-size / padding arithmetic. The shape functions and the CPU kernels both use it, so the
// shapes the executor allocates and the loops that fill them cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

enum class AutoPad { kNotSet, kValid, kSameUpper, kSameLower };

struct WindowAttributes {
  AutoPad auto_pad = AutoPad::kNotSet;
  // Empty when the attribute is absent; Resolve() fills defaults for the spatial rank.
  std::vector<int64_t> kernel_shape;
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;  // [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
  bool pads_given = false;
  bool ceil_mode = false;
  int64_t group = 1;
  // ConvTranspose only.
  std::vector<int64_t> output_padding;
  std::vector<int64_t> output_shape;

  // Reads the attributes present on `node` and checks their values (positive strides and
  // dilations, non-negative pads, a known auto_pad). InvalidModel naming the node otherwise.
  static StatusOr<WindowAttributes> Read(const Node& node);

  // A copy with defaults filled for `spatial_rank` dims and `kernel` as kernel_shape (when the
  // attribute is absent); InvalidModel when an attribute's length does not match the rank or
  // kernel_shape disagrees with `kernel`.
  StatusOr<WindowAttributes> Resolve(const Node& node, int64_t spatial_rank, const std::vector<int64_t>& kernel) const;
};

// Output size and begin/end padding along one spatial dim.
struct WindowDim {
  int64_t out = 0;
  int64_t pad_begin = 0;
  int64_t pad_end = 0;
};

// Conv and pooling (attributes already Resolve()d): output size of spatial dim `i` for an input
// of size `in`; InvalidModel when the window does not fit the padded input.
StatusOr<WindowDim> SlidingWindowDim(const Node& node, const WindowAttributes& a, size_t i, int64_t in);

// ConvTranspose (attributes already Resolve()d).
StatusOr<WindowDim> TransposedWindowDim(const Node& node, const WindowAttributes& a, size_t i, int64_t in);

}  // namespace tob
