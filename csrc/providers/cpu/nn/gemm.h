// Row-major GEMM on the CPU through OpenBLAS (scipy-openblas32).
//
// OpenBLAS is pinned to one thread (its own pool would fight ours for the same cores); the
// parallelism comes from splitting the problem across our ThreadPool: the larger of M and N is
// cut into cache- and vector-aligned tiles, each tile is one single-threaded BLAS call, and
// batches are spread over the pool first.
//
// On AVX-512 CPUs float32 problems with M <= kSmallGemmMaxM go to small_gemm.h (per-thread
// packing of B), larger M to sgemm_packed.h (B packed once per call, shared by the threads) while
// OpenBLAS runs AVX2 kernels (as this environment makes it) and to OpenBLAS when it runs its
// AVX-512 ones; docs/performance.md ("GEMM") has the figures.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"
#include "framework/kernel.h"
#include "framework/thread_pool.h"

namespace tob {

// C = alpha * op(A) * op(B) + beta * C with op(X) = X^T when trans_x. A is M x K (K x M when
// trans_a), B is K x N (N x K when trans_b), C is M x N; lda/ldb/ldc are row strides. When
// beta == 0, C is write-only (NaNs already there do not propagate).
Status Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, ThreadPool* pool);
Status Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
            const double* B, int64_t ldb, double beta, double* C, int64_t ldc, ThreadPool* pool);

// `batch` GEMMs of one shape: problem i reads a[i], b[i] and writes c[i].
Status BatchedGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* const* a,
                   int64_t lda, const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc,
                   int64_t batch, ThreadPool* pool);
Status BatchedGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* const* a,
                   int64_t lda, const double* const* b, int64_t ldb, double beta, double* const* c, int64_t ldc,
                   int64_t batch, ThreadPool* pool);

// `batch` bfloat16 GEMMs on the native kernel (bf16_gemm.h; the caller checks Bf16GemmAvailable()):
// A is packed into scratch from ctx where its pairs of K are not contiguous (trans_a, odd K), the
// products are summed in float32 scratch and C is rounded to bfloat16 once at the end.
Status BatchedGemmBf16(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const BFloat16* const* a, int64_t lda, const BFloat16* const* b, int64_t ldb,
                       float beta, BFloat16* const* c, int64_t ldc, int64_t batch);

// Gemm for any float type: bfloat16 on the native kernel where the CPU has one (BatchedGemmBf16);
// float16, and bfloat16 elsewhere, through float32 scratch from ctx (OpenBLAS here has no
// half-precision GEMM), rounded once at the end.
template <typename T>
Status GemmAnyFloat(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C, int64_t ldc);

}  // namespace tob
