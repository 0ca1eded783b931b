// bfloat16 GEMM with float32 accumulation on CPUs with AVX512-BF16 (VDPBF16PS: two bfloat16
// products summed into each float32 lane per instruction, twice the multiply-adds of a float32
// FMA of the same width). The layout follows small_gemm.h: op(B) is cut into panels of 32
// columns, each thread packs the panels it owns (K-blocked, pairs of K rows interleaved as the
// instruction reads them) into a thread-local buffer that stays in L1, and register tiles of up
// to 12 rows of A run over them, broadcasting one pair of A's bfloat16 values per row and step.
//
// The scipy-openblas32 wheel is built without OpenBLAS's bfloat16 routines (no cblas_sbgemm is
// exported) and oneDNN is not a dependency (docs/dependencies.md), hence this kernel. gemm.cc
// routes bfloat16 problems here when Bf16GemmAvailable(); elsewhere they go through float32.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "framework/thread_pool.h"

namespace tob {

// Whether bfloat16 GEMMs run natively: compiled with AVX512-BF16 support, the CPU has
// avx512f/bw/vl/bf16, and TOB_BF16_GEMM is not "0" (A/B measurements against the float32 path).
bool Bf16GemmAvailable();

// `batch` problems C[i] = alpha * A[i] @ op(B[i]) + beta * C[i] with C float32. A is row-major
// with row stride lda and is read in pairs of K: each row holds K rounded up to even values, the
// one past K (odd K) a finite value such as 0 (gemm.cc packs A with PackBf16Rows when it is
// transposed or K is odd); B is K x N (N x K when trans_b) with row stride ldb. beta == 0 does not
// read C. Arguments are assumed valid and M, N, K > 0; needs Bf16GemmAvailable().
void Bf16Gemm(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* const* a, int64_t lda,
              const BFloat16* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t batch,
              ThreadPool* pool);

// Bf16Gemm with C bfloat16: the float32 sums rounded once (to nearest even; float32 denormals flush
// to zero, as VDPBF16PS's sums already do) as each tile is stored, with no float32 copy of C. Only for K <=
// kBf16GemmRoundedMaxK, where one K block holds every product (larger K needs float32 partial sums between blocks:
// Bf16Gemm).
constexpr int64_t kBf16GemmRoundedMaxK = 512;
void Bf16GemmRounded(bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const BFloat16* const* a, int64_t lda,
                     const BFloat16* const* b, int64_t ldb, float beta, BFloat16* const* c, int64_t ldc, int64_t batch,
                     ThreadPool* pool);

// dst[r * k_even + k] = op(A)[r, k] for r < M, k < K, zero for K <= k < k_even: A (K x M when
// trans_a, row stride lda) as the row-major, even-K operand Bf16Gemm reads.
void PackBf16Rows(bool trans_a, int64_t M, int64_t K, const BFloat16* a, int64_t lda, int64_t k_even, BFloat16* dst,
                  ThreadPool* pool);

}  // namespace tob
