// Float32 GEMM for few rows (the batch rows of an MLP, M <= kSmallGemmMaxM), after MLAS's SGEMM:
// op(B) is cut into panels of 2 SIMD vectors of columns, each thread packs the panels it owns
// (K-blocked, into a thread-local buffer that stays in L1) and runs register-blocked tiles of up
// to 12 rows of op(A) over them (AVX-512 CPUs only). OpenBLAS re-packs all of B on every call
// and its small-M code is poor, so this path is 1.5-3x faster there; gemm.cc routes to it.
#pragma once

#include <cstdint>

#include "framework/thread_pool.h"
#include "providers/cpu/nn/small_gemm_isa.h"

namespace tob {

// Largest M the small path takes (measured against OpenBLAS on Zen 5, 2 threads).
constexpr int64_t kSmallGemmMaxM = 128;

// Whether the small path should take this float32 problem (shape measured against OpenBLAS).
bool SmallGemmApplies(int64_t M, int64_t N, int64_t K);

// `batch` problems C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i], row-major with row strides
// lda/ldb/ldc, spread over the pool by (problem, panel). Arguments are assumed valid (gemm.cc
// checks them), M, N, K > 0. beta == 0 does not read C. Needs AVX-512 (SmallGemmApplies checks).
void SmallGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* const* a,
               int64_t lda, const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t batch,
               ThreadPool* pool);

namespace small_gemm {

// dst[k * width + j] = op(B)[k0 + k, n0 + j] for k < kc, j < nw; zero for nw <= j < width. dst is
// 32-byte aligned and width a multiple of 8 (the packed panel layout the tiles read; sgemm_packed.h
// packs whole panels with it too).
void PackPanel(bool trans_b, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nw, int64_t width,
               float* dst);

}  // namespace small_gemm

}  // namespace tob
