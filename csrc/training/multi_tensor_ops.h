// Multi-tensor helpers for optimizers and gradient handling: global L2 norm, scale (with a
// dtype conversion and a non-finite check in the same pass), and a non-finite check. Each call
// covers a whole list of tensors with one parallel loop (training/multi_tensor_apply.h). Tensors
// are contiguous buffers of float32, float16 or bfloat16; arithmetic is float32, sums float64.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "framework/thread_pool.h"

namespace tob::training {

struct L2NormResult {
  double total = 0.0;              // sqrt of the sum of squares of every element of every tensor
  std::vector<double> per_tensor;  // the same for each tensor alone
};

// Squares are summed in float64, so the result does not depend on the order of the elements or
// on the thread count beyond the last bits. A non-finite element makes the norm inf or NaN.
StatusOr<L2NormResult> MultiTensorL2Norm(DType dtype, std::span<const void* const> tensors,
                                         std::span<const int64_t> numels, ThreadPool* pool);

// dsts[i][j] = srcs[i][j] * scale, computed in float32 and stored as dst_dtype. A destination may
// be its source (in place) but must not overlap it otherwise. Returns whether any scaled float32
// value is inf or NaN.
StatusOr<bool> MultiTensorScale(DType src_dtype, std::span<const void* const> srcs, DType dst_dtype,
                                std::span<void* const> dsts, std::span<const int64_t> numels, float scale,
                                ThreadPool* pool);

// Whether any element of any tensor is inf or NaN. Stops early once one is found.
StatusOr<bool> MultiTensorHasNonFinite(DType dtype, std::span<const void* const> tensors,
                                       std::span<const int64_t> numels, ThreadPool* pool);

// The contiguous loops, exposed for tests.
double SumOfSquaresFloat32(const float* x, int64_t n);
bool ScaleFloat32(const float* src, float* dst, int64_t n, float scale);  // returns "found non-finite"

}  // namespace tob::training
