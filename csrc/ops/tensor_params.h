// Parameter resolution shared by tensor ops' shape functions and their CPU kernels, so the shape
// the executor allocates and the copy a kernel does can never disagree. Errors are plain messages
// (InvalidArgument); callers prefix the node through ctx.Fail(status.message()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tob {

// One sliced axis of length `dim`, ONNX Slice semantics (negative start/end count from the end,
// then clamped: [0, dim] for positive steps, [-1, dim - 1] for negative ones). Gives the first
// index read and the number of elements produced.
Status ResolveSliceAxis(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t* first, int64_t* length);

// Per-input-dim slice parameters from ONNX starts/ends/axes/steps (axes and steps may be empty,
// meaning 0..n-1 and all ones). Dims not named by axes are taken whole.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};
struct SliceSpec {
  std::vector<int64_t> first;   // per input dim
  std::vector<int64_t> step;    // per input dim
  std::vector<int64_t> length;  // per input dim: the output shape
};
// Checks the lengths of the argument lists and normalises axes (negative allowed); `axes_out`
// receives, for each entry of starts, the input dim it applies to.
Status NormalizeSliceArgs(const SliceArgs& args, int64_t rank, std::vector<int64_t>* axes_out);
Status ResolveSlice(const std::vector<int64_t>& in_shape, const SliceArgs& args, SliceSpec* spec);

// Per-dim begin/end pads from ONNX `pads` ([b_0..b_k, e_0..e_k]) and optional `axes`.
Status ResolvePads(int64_t rank, const std::vector<int64_t>& pads, const std::optional<std::vector<int64_t>>& axes,
                   std::vector<int64_t>* begin, std::vector<int64_t>* end);

enum class PadMode { kConstant, kReflect, kEdge, kWrap };
Status ParsePadMode(const std::string& mode, PadMode* out);

// ONNX Split: the sizes of the outputs along the axis, from the explicit `split` list, or from
// `num_outputs` (opset 18) / the number of outputs: equal parts, the last one smaller when the
// dim does not divide evenly.
Status ResolveSplit(int64_t dim, const std::optional<std::vector<int64_t>>& split, int64_t num_outputs,
                    std::vector<int64_t>* sizes);

// The permutation of a Transpose: `perm` or, when empty, the reversed dims; checked to be a
// permutation of 0..rank-1.
Status ResolvePerm(const std::vector<int64_t>& perm, int64_t rank, std::vector<int64_t>* out);

}  // namespace tob
