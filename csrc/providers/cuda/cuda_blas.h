// Row-major GEMM on cuBLAS (which is column-major): the one place that knows the transpose trick.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace tob {

// For b < batch: C_b = alpha * op(A_b) * op(B_b) + beta * C_b, all row-major and contiguous, with
// op(A_b) M x K and op(B_b) K x N; A_b = a + b * stride_a (elements), likewise B and C. A stride of
// 0 reuses one matrix for every batch entry.
struct RowMajorGemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
};

// float32 and float64 through cublas{S,D}gemm[StridedBatched]; float16 and bfloat16 through
// cublasGemm[StridedBatched]Ex accumulating in float32. kNotImplemented for other dtypes or sizes
// beyond cuBLAS's 32-bit dimensions.
Status RowMajorGemm(cublasHandle_t handle, DType dtype, const RowMajorGemmArgs& args, const void* a, const void* b,
                    void* c);

}  // namespace tob
