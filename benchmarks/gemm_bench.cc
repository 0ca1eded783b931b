// GFLOP/s of the engine's float32 GEMM paths against OpenBLAS on MLP, transformer (forward and
// backward) and convolution-sized problems, in interleaved rounds so that a busy machine slows all
// of them alike:
//   ours       tob::Gemm as routed (small_gemm.h for M <= 128, else sgemm_packed.h or OpenBLAS)
//   sgemm      sgemm_packed.h's Sgemm, op(B) packed on every call
//   prepacked  SgemmPackedB on op(B) packed once (a session's constant weight)
//   OpenBLAS   one call, OpenBLAS's own threads
// Each cell is best / median over the rounds.
//   ./build/<dir>/tob_gemm_bench [threads]
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ./build/<dir>/tob_gemm_bench   # AVX-512 OpenBLAS
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "framework/thread_pool.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/sgemm_packed.h"

namespace {

struct Problem {
  bool trans_a, trans_b;
  int64_t M, K, N;
};

constexpr int kRounds = 7;

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const Problem problems[] = {
      {false, false, 64, 4096, 4096}, {false, false, 64, 1024, 4096}, {false, false, 128, 768, 768},
      {false, false, 256, 768, 768},  {false, false, 512, 768, 768},  {false, false, 512, 768, 3072},
      {false, false, 2048, 768, 768}, {false, false, 512, 3072, 768}, {false, true, 1024, 768, 3072},
      {true, false, 768, 1024, 3072}, {false, false, 3136, 576, 64},  {false, false, 784, 1152, 128},
  };
  tob::ThreadPool pool(threads);
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  const bool sgemm = tob::SgemmAvailable();

  std::printf("OpenBLAS core: %s, threads: %d, best / median GFLOP/s over %d interleaved rounds\n",
              scipy_openblas_get_corename(), threads, kRounds);
  std::printf("%-20s %14s %14s %14s %14s\n", "tA tB M x K x N", "ours", "sgemm", "prepacked", "OpenBLAS");
  for (const Problem& p : problems) {
    std::vector<float> a(p.M * p.K), b(p.K * p.N), c(p.M * p.N);
    for (auto& x : a) x = dist(gen);
    for (auto& x : b) x = dist(gen);
    const int64_t lda = p.trans_a ? p.M : p.K, ldb = p.trans_b ? p.K : p.N;
    const float* ap = a.data();
    const float* bp = b.data();
    float* cp = c.data();
    tob::PackedSgemmB packed;
    if (sgemm) packed = tob::PackedSgemmB::Pack(p.trans_b, p.N, p.K, bp, ldb, &pool);
    std::vector<std::function<void()>> runs = {
        [&] {
          tob::Status s = tob::Gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.f, ap, lda, bp, ldb, 0.f, cp, p.N, &pool);
          if (!s.ok()) std::exit(1);
        },
        [&] { tob::Sgemm(p.trans_a, p.trans_b, p.M, p.N, p.K, 1.f, &ap, lda, &bp, ldb, 0.f, &cp, p.N, 1, &pool); },
        [&] { tob::SgemmPackedB(p.trans_a, p.M, 1.f, ap, lda, packed, 0.f, cp, p.N, &pool); },
        [&] {
          scipy_openblas_set_num_threads(threads);
          scipy_cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans, p.trans_b ? CblasTrans : CblasNoTrans,
                            p.M, p.N, p.K, 1.f, ap, lda, bp, ldb, 0.f, cp, p.N);
          scipy_openblas_set_num_threads(1);  // the engine's tiles call it single-threaded
        },
    };
    if (!sgemm) runs.erase(runs.begin() + 1, runs.begin() + 3);
    const double flops = 2.0 * p.M * p.N * p.K;
    const int reps = std::max(3, static_cast<int>(2e9 / flops));
    std::vector<std::vector<double>> seconds(runs.size());
    for (auto& run : runs) run();
    for (int round = 0; round < kRounds; ++round)
      for (size_t i = 0; i < runs.size(); ++i) {
        auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) runs[i]();
        seconds[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
      }
    std::printf("%d  %d  %5lld x %4lld x %4lld", p.trans_a, p.trans_b, static_cast<long long>(p.M),
                static_cast<long long>(p.K), static_cast<long long>(p.N));
    for (size_t i = 0; i < runs.size(); ++i) {
      if (!sgemm && i == 1) std::printf(" %14s %14s", "-", "-");
      std::sort(seconds[i].begin(), seconds[i].end());
      std::printf("   %5.0f / %-5.0f", flops / seconds[i][0] * 1e-9, flops / seconds[i][kRounds / 2] * 1e-9);
    }
    std::printf("\n");
  }
  return 0;
}
