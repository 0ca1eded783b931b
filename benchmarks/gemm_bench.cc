// GFLOP/s of tob::Gemm on transformer-sized float32 problems: one thread, our pool (2 threads by
// default), and OpenBLAS running its own threads for comparison.
//   ./build/<dir>/tob_gemm_bench [threads]
//   OPENBLAS_CORETYPE=SKYLAKEX ./build/<dir>/tob_gemm_bench   # force the AVX-512 kernels
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

namespace {

struct Problem {
  int64_t M, K, N;
};

// Median GFLOP/s over repeats that together take at least ~0.4 s.
double Measure(const Problem& p, const std::function<void()>& run) {
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> rates;
  auto start = std::chrono::steady_clock::now();
  while (rates.size() < 5 ||
         (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400) && rates.size() < 200)) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * p.M * p.N * p.K / s * 1e-9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const Problem problems[] = {{512, 768, 768}, {512, 768, 3072}, {2048, 768, 768}, {512, 3072, 768}};
  tob::ThreadPool pool(threads);
  std::mt19937 gen(0);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);

  // The kernel set OpenBLAS picked for this CPU (OPENBLAS_CORETYPE overrides it at load time).
  std::printf("OpenBLAS core: %s, pool threads: %d\n", scipy_openblas_get_corename(), threads);
  std::printf("%-18s %14s %14s %18s\n", "M x K x N", "tob 1 thread", "tob pool", "OpenBLAS threads");
  for (const Problem& p : problems) {
    std::vector<float> a(p.M * p.K), b(p.K * p.N), c(p.M * p.N);
    for (auto& x : a) x = dist(gen);
    for (auto& x : b) x = dist(gen);
    auto ours = [&](tob::ThreadPool* tp) {
      return [&, tp] {
        tob::Status s =
            tob::Gemm(false, false, p.M, p.N, p.K, 1.f, a.data(), p.K, b.data(), p.N, 0.f, c.data(), p.N, tp);
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          std::exit(1);
        }
      };
    };
    double single = Measure(p, ours(nullptr));
    double pooled = Measure(p, ours(&pool));
    scipy_openblas_set_num_threads(threads);
    double blas = Measure(p, [&] {
      scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p.M, p.N, p.K, 1.f, a.data(), p.K, b.data(), p.N,
                        0.f, c.data(), p.N);
    });
    scipy_openblas_set_num_threads(1);
    std::printf("%5lld x %4lld x %4lld %14.1f %14.1f %18.1f\n", static_cast<long long>(p.M),
                static_cast<long long>(p.K), static_cast<long long>(p.N), single, pooled, blas);
  }
  return 0;
}
