// The small-M SGEMM (providers/cpu/nn/small_gemm.h, AVX-512) against a float64 reference; and the
// engine's Gemm entry point on shapes that take that path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "framework/thread_pool.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/small_gemm.h"

namespace tob {
namespace {

std::vector<float> RandomNonZero(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(gen);
    while (std::fabs(x) < 0.05f);
  }
  return v;
}

// The path exists only on AVX-512 CPUs; elsewhere gemm.cc never calls it (EngineGemmOnPool still
// checks the OpenBLAS path through the same entry points).
#define SKIP_WITHOUT_AVX512()                             \
  if (!small_gemm::avx512::Available())                   \
  GTEST_SKIP() << "this CPU has no AVX-512: the small-M " \
                  "path is not used on it"

// One shape with padded strides: the float64 product, the sum of |terms| (for the tolerance),
// and C's starting values. Columns of C past N hold a sentinel that must survive.
struct Case {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<float> a, b, c0;
  std::vector<double> dot, abs_dot;

  Case(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, uint32_t seed) : ta(ta_), tb(tb_), M(M_), N(N_), K(K_) {
    lda = (ta ? M : K) + 3;
    ldb = (tb ? K : N) + 5;
    ldc = N + 7;
    a = RandomNonZero(static_cast<size_t>((ta ? K : M) * lda), seed);
    b = RandomNonZero(static_cast<size_t>((tb ? N : K) * ldb), seed + 1);
    c0 = RandomNonZero(static_cast<size_t>(M * ldc), seed + 2);
    dot.assign(static_cast<size_t>(M * N), 0.0);
    abs_dot.assign(static_cast<size_t>(M * N), 0.0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, s_abs = 0;
        for (int64_t k = 0; k < K; ++k) {
          double t = double(a[ta ? k * lda + m : m * lda + k]) * b[tb ? n * ldb + k : k * ldb + n];
          s += t;
          s_abs += std::fabs(t);
        }
        dot[m * N + n] = s;
        abs_dot[m * N + n] = s_abs;
      }
  }

  // Copies C's first N columns from a result computed elsewhere (padding keeps its sentinel).
  void CopyColumns(const std::vector<float>& from, float* dst) const {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) dst[m * ldc + n] = from[m * ldc + n];
  }

  // Runs `gemm(c)` from c0 (NaN in C's first N columns when beta == 0) and checks the result.
  template <typename Fn>
  void Check(float alpha, float beta, const std::string& label, Fn gemm) const {
    constexpr float kSentinel = 12345.f;
    std::vector<float> c = c0;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < ldc; ++n)
        if (n >= N) c[m * ldc + n] = kSentinel;
        else if (beta == 0.f) c[m * ldc + n] = std::numeric_limits<float>::quiet_NaN();
    gemm(c.data());
    int failures = 0;
    for (int64_t m = 0; m < M && failures < 5; ++m)
      for (int64_t n = 0; n < ldc && failures < 5; ++n) {
        float got = c[m * ldc + n];
        if (n >= N) {
          if (got != kSentinel) {
            ADD_FAILURE() << label << ": wrote past column N at (" << m << ", " << n << ")";
            ++failures;
          }
          continue;
        }
        double c_in = beta == 0.f ? 0.0 : double(c0[m * ldc + n]);
        double want = alpha * dot[m * N + n] + beta * c_in;
        double tol =
            1e-6 * std::sqrt(double(K)) * (std::fabs(alpha) * abs_dot[m * N + n] + std::fabs(beta * c_in)) + 1e-6;
        if (!(std::fabs(got - want) <= tol)) {
          ADD_FAILURE() << label << " at (" << m << ", " << n << "): got " << got << ", want " << want << " (tol "
                        << tol << ")";
          ++failures;
        }
      }
  }
};

std::string Label(const Case& t, float alpha, float beta, const char* isa) {
  return std::string(isa) + " ta=" + std::to_string(t.ta) + " tb=" + std::to_string(t.tb) +
         " M=" + std::to_string(t.M) + " N=" + std::to_string(t.N) + " K=" + std::to_string(t.K) +
         " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
}

TEST(SmallGemmTest, EveryCaseMatchesFloat64) {
  SKIP_WITHOUT_AVX512();
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {int64_t{1}, int64_t{5}, int64_t{8}, int64_t{13}, int64_t{64}, kSmallGemmMaxM})
        for (int64_t N : {1, 15, 16, 17, 31, 33, 100, 512})
          for (int64_t K : {1, 3, 64, 257, 1000}) {
            const Case t(ta, tb, M, N, K, seed += 3);
            const float* a = t.a.data();
            const float* b = t.b.data();
            for (float alpha : {1.f, 0.5f})
              for (float beta : {0.f, 1.f, -0.75f})
                t.Check(alpha, beta, Label(t, alpha, beta, "avx512"), [&](float* c) {
                  SmallGemm(ta, tb, M, N, K, alpha, &a, t.lda, &b, t.ldb, beta, &c, t.ldc, 1, nullptr);
                });
            if (::testing::Test::HasFailure()) return;
          }
}

// Pointer arrays over a batch of cases; out[i] starts as case i's C.
struct BatchPointers {
  explicit BatchPointers(const std::vector<Case>& cases) {
    for (const Case& cs : cases) out.push_back(cs.c0);
    for (size_t i = 0; i < cases.size(); ++i) {
      a.push_back(cases[i].a.data());
      b.push_back(cases[i].b.data());
      c.push_back(out[i].data());
    }
  }
  std::vector<std::vector<float>> out;
  std::vector<const float*> a, b;
  std::vector<float*> c;
};

TEST(SmallGemmTest, BatchedOnPoolMatchesFloat64) {
  SKIP_WITHOUT_AVX512();
  ThreadPool pool(2);
  for (bool tb : {false, true}) {
    std::vector<Case> cases;
    for (uint32_t i = 0; i < 3; ++i) cases.emplace_back(false, tb, 37, 70, 300, 100 + 7 * i);
    BatchPointers p(cases);
    const Case& t = cases[0];
    SmallGemm(false, tb, t.M, t.N, t.K, 0.5f, p.a.data(), t.lda, p.b.data(), t.ldb, -0.75f, p.c.data(), t.ldc, 3,
              &pool);
    for (int i = 0; i < 3; ++i)
      cases[i].Check(0.5f, -0.75f, Label(cases[i], 0.5f, -0.75f, "avx512") + " batch " + std::to_string(i),
                     [&](float* dst) { cases[i].CopyColumns(p.out[i], dst); });
  }
}

// The engine's entry points take the small path for these shapes (M <= kSmallGemmMaxM).
TEST(SmallGemmTest, EngineGemmOnPool) {
  ThreadPool pool(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Case t(ta, tb, 64, 300, 513, 77);
      // (Without AVX-512, or with TOB_SMALL_GEMM=0, the same calls check the OpenBLAS path.)
      if (small_gemm::avx512::Available() && std::getenv("TOB_SMALL_GEMM") == nullptr)
        EXPECT_TRUE(SmallGemmApplies(t.M, t.N, t.K));
      for (float beta : {0.f, -0.75f})
        t.Check(0.5f, beta, Label(t, 0.5f, beta, "tob::Gemm"), [&](float* c) {
          ASSERT_TRUE(
              Gemm(ta, tb, t.M, t.N, t.K, 0.5f, t.a.data(), t.lda, t.b.data(), t.ldb, beta, c, t.ldc, &pool).ok());
        });
    }
  // Attention-like batch through BatchedGemm.
  std::vector<Case> cases;
  for (uint32_t i = 0; i < 4; ++i) cases.emplace_back(false, true, 32, 48, 16, 300 + 5 * i);
  BatchPointers p(cases);
  const Case& t = cases[0];
  ASSERT_TRUE(BatchedGemm(false, true, t.M, t.N, t.K, 1.f, p.a.data(), t.lda, p.b.data(), t.ldb, 1.f, p.c.data(), t.ldc,
                          4, &pool)
                  .ok());
  for (int i = 0; i < 4; ++i)
    cases[i].Check(1.f, 1.f, "tob::BatchedGemm batch " + std::to_string(i),
                   [&](float* dst) { cases[i].CopyColumns(p.out[i], dst); });
}

}  // namespace
}  // namespace tob
