// DFT (ai.onnx 17, 20) and STFT (17): their attributes and the geometry one call computes (axis,
// transform length, frames), from the input shapes and the values of the scalar inputs. The shape
// functions and the CPU kernels both use it, so the shape the executor allocates and the one the
// kernel fills cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace tob {

struct DftAttributes {
  bool inverse = false;
  bool onesided = false;
  // Opset 17-19: the axis attribute (default 1). Opset 20: the axis is input 2 (default -2).
  bool axis_is_input = false;
  int64_t axis_attribute = 1;

  static StatusOr<DftAttributes> Read(const Node& node, int opset);
};

// A scalar integer input (rank 0, or one element of rank 1) of `what`; names the node on error.
StatusOr<int64_t> ReadScalarInput(const Node& node, const char* what, const Tensor& value);

// The DFT axis for an input of `rank` (the complex dimension last), normalised into
// [0, rank - 2]: the attribute, or the axis input's value (nullptr = omitted, -2).
StatusOr<int64_t> ResolveDftAxis(const Node& node, const DftAttributes& attrs, int64_t rank, const Tensor* axis_input);

// The transform length: dft_length's value, or the default for an axis of `axis_dim` elements
// (2 * (axis_dim - 1) for the inverse one-sided transform, axis_dim otherwise). At least 1.
StatusOr<int64_t> ResolveDftLength(const Node& node, const DftAttributes& attrs, int64_t axis_dim,
                                   const Tensor* length_input);

// The output's length along the axis and its last dimension (2 complex, 1 for the real output of
// the inverse one-sided transform).
inline int64_t DftOutputLength(const DftAttributes& a, int64_t length) {
  return a.onesided && !a.inverse ? length / 2 + 1 : length;
}
inline int64_t DftOutputComponents(const DftAttributes& a) { return a.onesided && a.inverse ? 1 : 2; }

// One STFT call: frames of frame_length samples, frame_step apart, each transformed at
// frame_length points; bins = frame_length / 2 + 1 when one-sided.
struct StftPlan {
  int64_t frame_step = 0;
  int64_t frame_length = 0;
  int64_t frames = 0;
  int64_t bins = 0;
};

// signal_length: the signal's dim 1; window_length: the window's length (-1 when omitted).
StatusOr<StftPlan> PlanStft(const Node& node, bool onesided, int64_t signal_length, const Tensor& frame_step,
                            int64_t window_length, const Tensor* frame_length);

StatusOr<bool> ReadStftOnesided(const Node& node);

}  // namespace tob
