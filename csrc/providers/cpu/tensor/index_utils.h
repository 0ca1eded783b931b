// Index handling shared by the Gather and Scatter kernels: dispatch on the index dtype, range
// checks before any access (a bad index is a Status error naming the node, never a wild read),
// and ONNX's negative indices.
#pragma once

#include <atomic>
#include <cstdint>

#include "framework/kernel.h"

namespace tob::tensor_ops {

// Calls fn.template operator()<I>() for int32 or int64 indices; false for other dtypes.
template <typename Fn>
bool DispatchIndexType(DType t, Fn&& fn) {
  return DispatchDType<int32_t, int64_t>(t, std::forward<Fn>(fn));
}

// Checks that each of `n` indices lies in [-dim, dim).
template <typename I>
Status CheckIndices(const KernelContext& ctx, const I* idx, int64_t n, int64_t dim, const char* what) {
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = static_cast<int64_t>(idx[i]);
    if (v < -dim || v >= dim)
      return ctx.Fail(what, " index ", v, " at position ", i, " is out of range for a dim of size ", dim, " (valid: [",
                      -dim, ", ", dim - 1, "])");
  }
  return Status::OK();
}

// An index made non-negative, or -1 when it lies outside [-dim, dim). Hot loops check with this
// as they go (a predictable branch) and call CheckIndices for the message only on failure, which
// saves a separate pass over the indices.
template <typename I>
inline int64_t CheckedIndex(I v, int64_t dim) {
  int64_t i = static_cast<int64_t>(v);
  i += i < 0 ? dim : 0;
  return static_cast<uint64_t>(i) < static_cast<uint64_t>(dim) ? i : -1;
}

// An index already range-checked against `dim`, made non-negative.
template <typename I>
inline int64_t NormalizeIndex(I v, int64_t dim) {
  int64_t i = static_cast<int64_t>(v);
  return i < 0 ? i + dim : i;
}

}  // namespace tob::tensor_ops
