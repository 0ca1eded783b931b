#include "providers/cpu/nn/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "core/env_switch.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/bf16_gemm.h"
#include "providers/cpu/nn/sgemm_packed.h"
#include "providers/cpu/nn/small_gemm.h"

namespace tob {

namespace {

// Below this many flops per call the pool's wake-up costs more than a second core saves.
constexpr double kMinParallelFlops = 2.0 * 64 * 64 * 128;
// Tiles of M are multiples of 16 rows (the BLAS micro-kernel's M unroll on AVX-512/AVX2);
// tiles of N multiples of 64 columns (whole cache lines of B and C).
constexpr int64_t kRowBlock = 16;
constexpr int64_t kColBlock = 64;

// Whether float32 problems with M > kSmallGemmMaxM go to sgemm_packed.h rather than OpenBLAS.
// Measured (docs/performance.md, "GEMM"): ours runs ~1.5x OpenBLAS's AVX2 (Haswell) kernels,
// which this environment selects with OPENBLAS_CORETYPE=Haswell, but 10-20% behind its AVX-512
// ones (SkylakeX and later) on large shapes, so the choice follows the kernels OpenBLAS loaded.
// TOB_SGEMM=1 forces ours, TOB_SGEMM=0 keeps OpenBLAS (and turns pre-packing off).
bool SgemmBeatsBlas() {
  static const bool beats = [] {
    if (!SgemmAvailable()) return false;
    if (EnvSwitchValue(EnvSwitch::kSgemm) == "1") return true;
    std::string core = scipy_openblas_get_corename();
    std::transform(core.begin(), core.end(), core.begin(), [](unsigned char ch) { return std::tolower(ch); });
    for (const char* avx512 : {"skylakex", "cooperlake", "sapphirerapids"})
      if (core.find(avx512) != std::string::npos) return false;
    return true;
  }();
  return beats;
}

void PinBlasToOneThread() {
  static std::once_flag once;
  std::call_once(once, [] { scipy_openblas_set_num_threads(1); });
}

void BlasGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                    static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

void BlasGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
              const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  scipy_cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    static_cast<blasint>(M), static_cast<blasint>(N), static_cast<blasint>(K), alpha, A,
                    static_cast<blasint>(lda), B, static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

Status CheckArgs(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0) return InvalidArgument("Gemm: negative size M=", M, " N=", N, " K=", K);
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (v > INT_MAX) return InvalidArgument("Gemm: size ", v, " exceeds the 32-bit BLAS limit");
  int64_t a_cols = ta ? M : K, b_cols = tb ? K : N;
  if (lda < std::max<int64_t>(1, a_cols) || ldb < std::max<int64_t>(1, b_cols) || ldc < std::max<int64_t>(1, N))
    return InvalidArgument("Gemm: leading dimensions lda=", lda, " ldb=", ldb, " ldc=", ldc, " too small for M=", M,
                           " N=", N, " K=", K);
  return Status::OK();
}

// C = beta * C for K == 0 (BLAS implementations disagree on this corner).
template <typename T>
void ScaleC(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t m = 0; m < M; ++m) {
    T* row = C + m * ldc;
    if (beta == T(0)) std::fill(row, row + N, T(0));
    else
      for (int64_t n = 0; n < N; ++n) row[n] *= beta;
  }
}

template <typename T>
Status BatchedGemmImpl(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* const* a, int64_t lda,
                       const T* const* b, int64_t ldb, T beta, T* const* c, int64_t ldc, int64_t batch,
                       ThreadPool* pool) {
  TOB_RETURN_IF_ERROR(CheckArgs(ta, tb, M, N, K, lda, ldb, ldc));
  if (M == 0 || N == 0 || batch <= 0) return Status::OK();
  if (K == 0) {
    ParallelFor(pool, batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ScaleC(M, N, beta, c[i], ldc);
    });
    return Status::OK();
  }
  if constexpr (std::is_same_v<T, float>) {
    if (SmallGemmApplies(M, N, K)) {
      SmallGemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, batch, pool);
      return Status::OK();
    }
    if (SgemmBeatsBlas()) {
      Sgemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, batch, pool);
      return Status::OK();
    }
  }
  PinBlasToOneThread();

  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const double flops = 2.0 * static_cast<double>(M) * N * K;
  if (threads <= 1 || flops * batch < kMinParallelFlops) {
    for (int64_t i = 0; i < batch; ++i) BlasGemm(ta, tb, M, N, K, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
    return Status::OK();
  }

  // Batches go to threads whole when they divide evenly (or are plentiful); otherwise each
  // problem is also cut into tiles so every thread gets the same share.
  const bool split_m = M >= N;
  const int64_t block = split_m ? kRowBlock : kColBlock;
  const int64_t extent = split_m ? M : N;
  const int64_t num_blocks = (extent + block - 1) / block;
  int64_t tiles = 1;
  if (batch % threads != 0 && batch < 4 * threads) tiles = std::min<int64_t>(threads, num_blocks);

  ParallelFor(pool, batch * tiles, 1, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      int64_t i = u / tiles, t = u % tiles;
      if (tiles == 1) {
        BlasGemm(ta, tb, M, N, K, alpha, a[i], lda, b[i], ldb, beta, c[i], ldc);
        continue;
      }
      int64_t lo = std::min(extent, num_blocks * t / tiles * block);
      int64_t hi = std::min(extent, num_blocks * (t + 1) / tiles * block);
      if (hi <= lo) continue;
      if (split_m) {
        const T* a_tile = a[i] + (ta ? lo : lo * lda);
        BlasGemm(ta, tb, hi - lo, N, K, alpha, a_tile, lda, b[i], ldb, beta, c[i] + lo * ldc, ldc);
      } else {
        const T* b_tile = b[i] + (tb ? lo * ldb : lo);
        BlasGemm(ta, tb, M, hi - lo, K, alpha, a[i], lda, b_tile, ldb, beta, c[i] + lo, ldc);
      }
    }
  });
  return Status::OK();
}

// Converts a rows x cols matrix with row stride ld into a packed float32 matrix.
template <typename T>
void PackToFloat(ThreadPool* pool, const T* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  if (ld == cols) {
    ParallelConvertToFloat(pool, src, rows * cols, dst);
    return;
  }
  ParallelFor(pool, rows, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) ToFloat(src + r * ld, dst + r * cols, cols);
  });
}

}  // namespace

Status Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
            const float* B, int64_t ldb, float beta, float* C, int64_t ldc, ThreadPool* pool) {
  return BatchedGemmImpl<float>(trans_a, trans_b, M, N, K, alpha, &A, lda, &B, ldb, beta, &C, ldc, 1, pool);
}

Status Gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
            const double* B, int64_t ldb, double beta, double* C, int64_t ldc, ThreadPool* pool) {
  return BatchedGemmImpl<double>(trans_a, trans_b, M, N, K, alpha, &A, lda, &B, ldb, beta, &C, ldc, 1, pool);
}

Status BatchedGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* const* a,
                   int64_t lda, const float* const* b, int64_t ldb, float beta, float* const* c, int64_t ldc,
                   int64_t batch, ThreadPool* pool) {
  return BatchedGemmImpl<float>(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, batch, pool);
}

Status BatchedGemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* const* a,
                   int64_t lda, const double* const* b, int64_t ldb, double beta, double* const* c, int64_t ldc,
                   int64_t batch, ThreadPool* pool) {
  return BatchedGemmImpl<double>(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc, batch, pool);
}

Status BatchedGemmBf16(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       float alpha, const BFloat16* const* a, int64_t lda, const BFloat16* const* b, int64_t ldb,
                       float beta, BFloat16* const* c, int64_t ldc, int64_t batch) {
  TOB_RETURN_IF_ERROR(CheckArgs(trans_a, trans_b, M, N, K, lda, ldb, ldc));
  if (M == 0 || N == 0 || batch <= 0) return Status::OK();
  ThreadPool* pool = ctx.thread_pool();
  // The kernel reads A in pairs of K from contiguous rows; other layouts are packed once per
  // distinct A (a broadcast batch shares one).
  const int64_t k_even = K + K % 2;
  std::vector<const BFloat16*> a_rows(a, a + batch);
  int64_t a_ld = lda;
  Tensor packed;
  if (K > 0 && (trans_a || K % 2 != 0)) {
    std::vector<int64_t> first(batch);  // the first problem with the same A
    int64_t distinct = 0;
    for (int64_t i = 0; i < batch; ++i) {
      first[i] = i;
      if (i > 0 && a[i] == a[i - 1]) first[i] = first[i - 1];
      if (first[i] == i) ++distinct;
    }
    TOB_ASSIGN_OR_RETURN(packed, ctx.AllocateScratch(DType::kBFloat16, {distinct, M, k_even}));
    for (int64_t i = 0, slot = -1; i < batch; ++i) {
      if (first[i] == i) {
        BFloat16* dst = packed.data<BFloat16>() + ++slot * M * k_even;
        PackBf16Rows(trans_a, M, K, a[i], lda, k_even, dst, pool);
        a_rows[i] = dst;
      } else {
        a_rows[i] = a_rows[first[i]];
      }
    }
    a_ld = k_even;
  }
  // One K block: tiles round straight into C. Longer K sums blocks in float32 scratch first.
  if (K > 0 && K <= kBf16GemmRoundedMaxK) {
    Bf16GemmRounded(trans_b, M, N, K, alpha, a_rows.data(), a_ld, b, ldb, beta, c, ldc, batch, pool);
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(Tensor cf, ctx.AllocateScratch(DType::kFloat32, {batch, M, N}));
  std::vector<float*> c_float(batch);
  for (int64_t i = 0; i < batch; ++i) c_float[i] = cf.data<float>() + i * M * N;
  auto each_row = [&](auto&& fn) {  // fn(problem, row) over every row of every C, on the pool
    ParallelFor(pool, batch * M, std::max<int64_t>(1, (1 << 16) / N), [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) fn(u / M, u % M);
    });
  };
  if (beta != 0.f) each_row([&](int64_t i, int64_t r) { ToFloat(c[i] + r * ldc, c_float[i] + r * N, N); });
  if (K == 0) {
    ScaleC(batch * M, N, beta, cf.data<float>(), N);
  } else {
    Bf16Gemm(trans_b, M, N, K, alpha, a_rows.data(), a_ld, b, ldb, beta, c_float.data(), N, batch, pool);
  }
  each_row([&](int64_t i, int64_t r) { FromFloat(c_float[i] + r * N, c[i] + r * ldc, N); });
  return Status::OK();
}

template <typename T>
Status GemmAnyFloat(const KernelContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                    const T* A, int64_t lda, const T* B, int64_t ldb, float beta, T* C, int64_t ldc) {
  ThreadPool* pool = ctx.thread_pool();
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return Gemm(trans_a, trans_b, M, N, K, static_cast<T>(alpha), A, lda, B, ldb, static_cast<T>(beta), C, ldc, pool);
  } else {
    if constexpr (std::is_same_v<T, BFloat16>) {
      if (Bf16GemmAvailable())
        return BatchedGemmBf16(ctx, trans_a, trans_b, M, N, K, alpha, &A, lda, &B, ldb, beta, &C, ldc, 1);
    }
    TOB_RETURN_IF_ERROR(CheckArgs(trans_a, trans_b, M, N, K, lda, ldb, ldc));
    if (M == 0 || N == 0) return Status::OK();
    int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    TOB_ASSIGN_OR_RETURN(Tensor af, ctx.AllocateScratch(DType::kFloat32, {a_rows, a_cols}));
    TOB_ASSIGN_OR_RETURN(Tensor bf, ctx.AllocateScratch(DType::kFloat32, {b_rows, b_cols}));
    TOB_ASSIGN_OR_RETURN(Tensor cf, ctx.AllocateScratch(DType::kFloat32, {M, N}));
    PackToFloat(pool, A, a_rows, a_cols, lda, af.data<float>());
    PackToFloat(pool, B, b_rows, b_cols, ldb, bf.data<float>());
    if (beta != 0.f) PackToFloat(pool, C, M, N, ldc, cf.data<float>());
    TOB_RETURN_IF_ERROR(Gemm(trans_a, trans_b, M, N, K, alpha, af.data<float>(), std::max<int64_t>(1, a_cols),
                             bf.data<float>(), std::max<int64_t>(1, b_cols), beta, cf.data<float>(), N, pool));
    const float* cp = cf.data<float>();
    ParallelFor(pool, M, std::max<int64_t>(1, (1 << 16) / N), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) FromFloat(cp + r * N, C + r * ldc, N);
    });
    return Status::OK();
  }
}

template Status GemmAnyFloat<float>(const KernelContext&, bool, bool, int64_t, int64_t, int64_t, float, const float*,
                                    int64_t, const float*, int64_t, float, float*, int64_t);
template Status GemmAnyFloat<double>(const KernelContext&, bool, bool, int64_t, int64_t, int64_t, float, const double*,
                                     int64_t, const double*, int64_t, float, double*, int64_t);
template Status GemmAnyFloat<Float16>(const KernelContext&, bool, bool, int64_t, int64_t, int64_t, float,
                                      const Float16*, int64_t, const Float16*, int64_t, float, Float16*, int64_t);
template Status GemmAnyFloat<BFloat16>(const KernelContext&, bool, bool, int64_t, int64_t, int64_t, float,
                                       const BFloat16*, int64_t, const BFloat16*, int64_t, float, BFloat16*, int64_t);

}  // namespace tob
