#include "providers/cuda/cuda_blas.h"

#include <algorithm>
#include <climits>

#include "providers/cuda/cuda_common.h"

namespace tob {

Status RowMajorGemm(cublasHandle_t handle, DType dtype, const RowMajorGemmArgs& g, const void* a, const void* b,
                    void* c) {
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major matrix is
  // its own transpose seen column-major: pass B first, A second, and keep each one's op.
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ldb = std::max<int64_t>(1, g.trans_b ? g.k : g.n);
  const int64_t lda = std::max<int64_t>(1, g.trans_a ? g.m : g.k);
  const int64_t ldc = std::max<int64_t>(1, g.n);
  for (int64_t v : {g.m, g.n, g.k, g.batch, lda, ldb, ldc})
    if (v > INT_MAX) return NotImplemented("GEMM dimension ", v, " exceeds cuBLAS's 32-bit limit");
  const int m = static_cast<int>(g.n), n = static_cast<int>(g.m), k = static_cast<int>(g.k);
  const int batch = static_cast<int>(g.batch);

  if (dtype == DType::kFloat32) {
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    const auto* fa = static_cast<const float*>(a);
    const auto* fb = static_cast<const float*>(b);
    auto* fc = static_cast<float*>(c);
    if (batch == 1) {
      TOB_CUBLAS_RETURN_IF_ERROR(cublasSgemm(handle, op_b, op_a, m, n, k, &alpha, fb, ldb, fa, lda, &beta, fc, ldc));
    } else {
      TOB_CUBLAS_RETURN_IF_ERROR(cublasSgemmStridedBatched(handle, op_b, op_a, m, n, k, &alpha, fb, ldb, g.stride_b, fa,
                                                           lda, g.stride_a, &beta, fc, ldc, g.stride_c, batch));
    }
    return Status::OK();
  }
  if (dtype == DType::kFloat64) {
    const double alpha = g.alpha, beta = g.beta;
    const auto* da = static_cast<const double*>(a);
    const auto* db = static_cast<const double*>(b);
    auto* dc = static_cast<double*>(c);
    if (batch == 1) {
      TOB_CUBLAS_RETURN_IF_ERROR(cublasDgemm(handle, op_b, op_a, m, n, k, &alpha, db, ldb, da, lda, &beta, dc, ldc));
    } else {
      TOB_CUBLAS_RETURN_IF_ERROR(cublasDgemmStridedBatched(handle, op_b, op_a, m, n, k, &alpha, db, ldb, g.stride_b, da,
                                                           lda, g.stride_a, &beta, dc, ldc, g.stride_c, batch));
    }
    return Status::OK();
  }
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) {
    const cudaDataType_t type = dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_16BF;
    const float alpha = static_cast<float>(g.alpha), beta = static_cast<float>(g.beta);
    if (batch == 1) {
      TOB_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, op_b, op_a, m, n, k, &alpha, b, type, ldb, a, type, lda, &beta, c,
                                              type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      TOB_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
          handle, op_b, op_a, m, n, k, &alpha, b, type, ldb, g.stride_b, a, type, lda, g.stride_a, &beta, c, type, ldc,
          g.stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return Status::OK();
  }
  return NotImplemented("GEMM on CUDA does not support ", DTypeName(dtype));
}

}  // namespace tob
