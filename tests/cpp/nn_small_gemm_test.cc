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
#include "gemm_reference.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/small_gemm.h"

namespace tob {
namespace {

using gemm_testing::BatchPointers;
using gemm_testing::Case;
using gemm_testing::Label;

// The path exists only on AVX-512 CPUs; elsewhere gemm.cc never calls it (EngineGemmOnPool still
// checks the OpenBLAS path through the same entry points).
#define SKIP_WITHOUT_AVX512()                             \
  if (!small_gemm::avx512::Available())                   \
  GTEST_SKIP() << "this CPU has no AVX-512: the small-M " \
                  "path is not used on it"

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
