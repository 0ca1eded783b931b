// Float32 GEMM for every M on AVX-512 CPUs, with op(B) packed once into panels that all threads
// share (after MLAS's SGEMM and its MlasGemmPackB): panels of 2 SIMD vectors (32 columns), each
// K rows deep, zero past N. A runs unpacked through the 12-row register tiles of
// small_gemm_isa.h, in blocks of rows that stay in L2 while a K block of each panel stays in L1.
//
// Two ways in: Sgemm packs op(B) into a per-call buffer (gemm.cc routes M > kSmallGemmMaxM here
// unless OpenBLAS runs AVX-512 kernels; packing is under 1% of the work there), and PackedSgemmB holds op(B) of a
// constant weight packed once per session (MatMul / Gemm kernels' PrePack), which SgemmPackedB then reads on every run,
// at any M.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "framework/thread_pool.h"

namespace tob {

// Whether this CPU runs the kernel (AVX-512F/DQ) and TOB_SGEMM is not "0" (TOB_SGEMM=0 sends
// M > kSmallGemmMaxM back to OpenBLAS and turns pre-packing off: A/B measurements). gemm.cc
// decides per process whether unpacked problems come here (SgemmBeatsBlas).
bool SgemmAvailable();

// op(B) (K x N; B is N x K when trans_b) packed for SgemmPackedB. Immutable once made, so any
// number of threads may read it at once.
class PackedSgemmB {
 public:
  static PackedSgemmB Pack(bool trans_b, int64_t N, int64_t K, const float* B, int64_t ldb, ThreadPool* pool);

  int64_t N() const { return N_; }
  int64_t K() const { return K_; }
  size_t bytes() const { return bytes_; }
  const float* data() const { return data_.get(); }

  // How many times Pack ran in this process (tests assert that a session packs a weight once).
  static int64_t packs_made();

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  int64_t N_ = 0, K_ = 0;
  size_t bytes_ = 0;
  std::unique_ptr<float, Free> data_;
};

// C = alpha * op(A) @ op(B) + beta * C for op(B) packed in b; A is M x b.K() (b.K() x M when
// trans_a), C is M x b.N(). beta == 0 does not read C. Needs SgemmAvailable(); M >= 0.
void SgemmPackedB(bool trans_a, int64_t M, float alpha, const float* A, int64_t lda, const PackedSgemmB& b, float beta,
                  float* C, int64_t ldc, ThreadPool* pool);

// Columns [n_begin, n_end) of the same product: C (M x (n_end - n_begin)) = alpha * op(A) @
// op(B)[:, n_begin:n_end] + beta * C. n_begin is a multiple of kSgemmPanelCols and n_end one too
// or b.N() (whole panels: a part of the output channels of a convolution's packed weights).
constexpr int64_t kSgemmPanelCols = 32;
void SgemmPackedBColumns(bool trans_a, int64_t M, int64_t n_begin, int64_t n_end, float alpha, const float* A,
                         int64_t lda, const PackedSgemmB& b, float beta, float* C, int64_t ldc, ThreadPool* pool);

// `batch` problems C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i]: packs every op(B[i]) (a
// broadcast B shared by consecutive problems once) into one buffer, then runs them like
// SgemmPackedB. Arguments are assumed valid (gemm.cc checks them), M, N, K > 0.
void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* const* a, int64_t lda,
           const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc, int64_t batch,
           ThreadPool* pool);

}  // namespace tob
