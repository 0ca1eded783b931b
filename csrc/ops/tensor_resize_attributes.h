// Resize's attributes and its output-size arithmetic (scales or sizes, axes, keep_aspect_ratio_
// policy). The shape function and the CPU kernel both use it, so the shape the executor allocates
// and the one the kernel fills cannot disagree.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace tob {

enum class ResizeMode { kNearest, kLinear, kCubic };
enum class ResizeCoordinates {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize
};
enum class ResizeNearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };
enum class ResizeAspectPolicy { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttributes {
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoordinates coordinates = ResizeCoordinates::kHalfPixel;
  ResizeNearest nearest = ResizeNearest::kRoundPreferFloor;
  ResizeAspectPolicy policy = ResizeAspectPolicy::kStretch;
  bool antialias = false;
  bool exclude_outside = false;
  double cubic_coeff_a = -0.75;
  double extrapolation_value = 0.0;
  std::vector<int64_t> axes;  // as given (may be negative); empty = every axis

  // Reads and checks the attributes of a Resize node at `opset` (11 and later): every string
  // must be one of its documented values, and attributes newer than the opset are refused.
  static StatusOr<ResizeAttributes> Read(const Node& node, int opset);
  // Upsample (opsets 7-9, Resize's predecessor): 'nearest' or 'linear' ('bilinear' at 7) with
  // asymmetric coordinates, nearest rounding down.
  static StatusOr<ResizeAttributes> ReadUpsample(const Node& node);
};

// What one Resize call does along each axis of its input (full rank).
struct ResizePlan {
  std::vector<int64_t> output;    // output dims
  std::vector<double> scales;     // the scale the coordinate transform divides by
  std::vector<double> roi_start;  // tf_crop_and_resize region, in [0, 1] of the input
  std::vector<double> roi_end;
};

// The plan for input dims `input` from the roi / scales / sizes inputs (nullptr = omitted; an
// empty tensor counts as omitted). Exactly one of scales and sizes must be given.
StatusOr<ResizePlan> PlanResize(const Node& node, const ResizeAttributes& attrs, const std::vector<int64_t>& input,
                                const Tensor* roi, const Tensor* scales, const Tensor* sizes);

}  // namespace tob
