// Multidirectional (numpy) broadcasting of a few inputs onto one output shape.
//
// The plan drops size-1 output dims and merges neighbouring dims along which every input keeps
// the same relation to the output (present in full, or broadcast), so the common cases collapse
// to one inner loop over contiguous memory: same shape -> one span; a scalar operand -> one span
// with stride 0; a row vector over a matrix -> [rows, cols] with the vector's outer stride 0; a
// per-channel bias over NCHW -> [N, C, HW] with the bias's inner stride 0. The innermost stride of
// every input is 0 or 1, so kernels only ever run "vector" or "repeated scalar" inner loops.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace tob::ew {

inline constexpr int kMaxBroadcastInputs = 12;  // FusedElementwise reads up to 12 (kFusedMaxInputs)

struct BroadcastPlan {
  int num_inputs = 0;
  int64_t numel = 0;
  // Collapsed output dims (at least one) and, per input, its element strides along them (0 where
  // the input is broadcast). The last dim is the inner loop; its strides are 0 or 1.
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, kMaxBroadcastInputs> strides;

  int64_t inner_size() const { return dims.back(); }
  int64_t inner_stride(int k) const { return strides[k].back(); }
};

// InvalidArgument naming the shapes when an input does not broadcast to `out` (an input dim must
// equal the output dim or be 1; missing leading dims count as 1).
StatusOr<BroadcastPlan> MakeBroadcastPlan(const std::vector<const Shape*>& inputs, const Shape& out);

// The numpy broadcast of several shapes; InvalidArgument when they are incompatible.
StatusOr<Shape> BroadcastShapes(const std::vector<const Shape*>& shapes);

// Calls fn(out_offset, in_offsets, count) for each run of output elements in [begin, end) that
// lies within one inner row; input k's elements are in_offsets[k] + i * plan.inner_stride(k).
template <typename Fn>
void ForEachSpan(const BroadcastPlan& plan, int64_t begin, int64_t end, Fn&& fn) {
  const int rank = static_cast<int>(plan.dims.size());
  const int n = plan.num_inputs;
  const int64_t inner = plan.inner_size();
  std::array<int64_t, kMaxBroadcastInputs> base{};  // offsets of the current row start
  std::array<int64_t, kMaxBroadcastInputs> offsets{};
  std::vector<int64_t> index(rank, 0);  // multi-index over the outer dims
  int64_t row = begin / inner;
  int64_t col = begin % inner;
  for (int d = rank - 2; d >= 0; --d) {
    index[d] = row % plan.dims[d];
    row /= plan.dims[d];
    for (int k = 0; k < n; ++k) base[k] += index[d] * plan.strides[k][d];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t count = std::min(inner - col, end - pos);
    for (int k = 0; k < n; ++k) offsets[k] = base[k] + col * plan.strides[k][rank - 1];
    fn(pos, offsets, count);
    pos += count;
    col = 0;
    if (pos >= end) break;
    for (int d = rank - 2; d >= 0; --d) {  // odometer step to the next row
      for (int k = 0; k < n; ++k) base[k] += plan.strides[k][d];
      if (++index[d] < plan.dims[d]) break;
      for (int k = 0; k < n; ++k) base[k] -= index[d] * plan.strides[k][d];
      index[d] = 0;
    }
  }
}

}  // namespace tob::ew
