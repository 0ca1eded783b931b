// The general SGEMM (providers/cpu/nn/sgemm_packed.h, AVX-512): per-call packing (Sgemm) and
// constant B packed once (PackedSgemmB) against a float64 reference, on shapes that are not
// multiples of the tiles; and pre-packed MatMul / Gemm weights in a Session (packed once, same
// results as the unpacked path, counted in RunStats).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "framework/thread_pool.h"
#include "gemm_reference.h"
#include "op_tester.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/sgemm_packed.h"
#include "runtime/session.h"

namespace tob {
namespace {

using gemm_testing::BatchPointers;
using gemm_testing::Case;
using gemm_testing::Label;
using testing::RandomTensor;

#define SKIP_WITHOUT_SGEMM() \
  if (!SgemmAvailable()) GTEST_SKIP() << "this CPU has no AVX-512 (or TOB_SGEMM=0): the path is not used"

TEST(SgemmPackedTest, EveryCaseMatchesFloat64) {
  SKIP_WITHOUT_SGEMM();
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 13, 200})
        for (int64_t N : {1, 17, 33, 300})
          for (int64_t K : {1, 257, 600}) {
            const Case t(ta, tb, M, N, K, seed += 3);
            const float* a = t.a.data();
            const float* b = t.b.data();
            const PackedSgemmB packed = PackedSgemmB::Pack(tb, N, K, b, t.ldb, &pool);
            for (float alpha : {1.f, 0.5f})
              for (float beta : {0.f, -0.75f}) {
                t.Check(alpha, beta, Label(t, alpha, beta, "Sgemm"), [&](float* c) {
                  Sgemm(ta, tb, M, N, K, alpha, &a, t.lda, &b, t.ldb, beta, &c, t.ldc, 1, &pool);
                });
                t.Check(alpha, beta, Label(t, alpha, beta, "SgemmPackedB"),
                        [&](float* c) { SgemmPackedB(ta, M, alpha, a, t.lda, packed, beta, c, t.ldc, &pool); });
              }
            if (::testing::Test::HasFailure()) return;
          }
}

// Several row blocks and panel groups (units over 2 threads), a long K (several K blocks), through
// Sgemm and through the engine's Gemm entry point (here or OpenBLAS, as gemm.cc routes M > 128).
TEST(SgemmPackedTest, LargeProblemsOnPool) {
  SKIP_WITHOUT_SGEMM();
  ThreadPool pool(2);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Case t(ta, tb, 421, 290, 1100, 40 + 2 * ta + tb);
      const float* a = t.a.data();
      const float* b = t.b.data();
      t.Check(0.5f, 1.f, Label(t, 0.5f, 1.f, "Sgemm"),
              [&](float* c) { Sgemm(ta, tb, t.M, t.N, t.K, 0.5f, &a, t.lda, &b, t.ldb, 1.f, &c, t.ldc, 1, &pool); });
      t.Check(0.5f, 1.f, Label(t, 0.5f, 1.f, "tob::Gemm"), [&](float* c) {
        ASSERT_TRUE(Gemm(ta, tb, t.M, t.N, t.K, 0.5f, t.a.data(), t.lda, t.b.data(), t.ldb, 1.f, c, t.ldc, &pool).ok());
      });
    }
}

// A batch with distinct B per problem, and one B broadcast to every problem (packed once).
TEST(SgemmPackedTest, BatchedMatchesFloat64) {
  SKIP_WITHOUT_SGEMM();
  ThreadPool pool(2);
  for (bool shared_b : {false, true}) {
    std::vector<Case> cases;
    for (uint32_t i = 0; i < 3; ++i) cases.emplace_back(true, false, 150, 70, 90, shared_b ? 500 : 600 + 7 * i);
    BatchPointers p(cases);
    const Case& t = cases[0];
    if (shared_b) {  // same B (and A) for all: equal operands, distinct outputs
      for (auto& b : p.b) b = p.b[0];
    }
    Sgemm(true, false, t.M, t.N, t.K, 1.f, p.a.data(), t.lda, p.b.data(), t.ldb, 0.25f, p.c.data(), t.ldc, 3, &pool);
    for (int i = 0; i < 3; ++i)
      cases[i].Check(1.f, 0.25f, Label(cases[i], 1.f, 0.25f, "Sgemm batch") + " " + std::to_string(i),
                     [&](float* dst) { cases[i].CopyColumns(p.out[i], dst); });
  }
}

// y = Gemm(MatMul(x, W1), W2^T, bias) with W1, W2, bias constants (or W1, W2 graph inputs fed the
// same values, which nothing can pre-pack).
std::unique_ptr<Session> Mlp(const Tensor& w1, const Tensor& w2, const Tensor& bias, bool weights_constant) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{Dim::Symbol("batch"), 70})).ok());
  if (weights_constant) {
    EXPECT_TRUE(g->AddInitializer("w1", w1).ok());
    EXPECT_TRUE(g->AddInitializer("w2", w2).ok());
  } else {
    EXPECT_TRUE(g->AddInput("w1", ValueType(DType::kFloat32, Dims{70, 90})).ok());
    EXPECT_TRUE(g->AddInput("w2", ValueType(DType::kFloat32, Dims{45, 90})).ok());
  }
  EXPECT_TRUE(g->AddInitializer("bias", bias).ok());
  EXPECT_TRUE(g->AddNode("MatMul", "", {"x", "w1"}, {"h"}, {}, "mm").ok());
  AttributeMap attrs;
  attrs["transB"] = Attribute::Int(1);
  attrs["alpha"] = Attribute::Float(0.5f);
  EXPECT_TRUE(g->AddNode("Gemm", "", {"h", "w2", "bias"}, {"y"}, std::move(attrs), "gemm").ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  SessionOptions opts;
  opts.intra_op_threads = 2;
  opts.optimization_level = OptLevel::kDisableAll;  // keep MatMul and Gemm as built
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

TEST(SgemmPackedTest, SessionPrePacksConstantWeightsOnce) {
  SKIP_WITHOUT_SGEMM();
  const Tensor w1 = RandomTensor<float>({70, 90}, -1, 1, 3), w2 = RandomTensor<float>({45, 90}, -1, 1, 4);
  const Tensor bias = RandomTensor<float>({45}, -1, 1, 5);
  const int64_t packs_before = PackedSgemmB::packs_made();
  auto packed = Mlp(w1, w2, bias, true);
  EXPECT_EQ(PackedSgemmB::packs_made() - packs_before, 2);  // one per weight, at initialisation
  auto unpacked = Mlp(w1, w2, bias, false);
  EXPECT_EQ(PackedSgemmB::packs_made() - packs_before, 2);

  for (int64_t batch : {1, 37, 300}) {  // the small-M and the large-M kernels, and a single row
    const Tensor x = RandomTensor<float>({batch, 70}, -1, 1, static_cast<uint32_t>(10 + batch));
    std::vector<Tensor> got, want;
    RunStats stats;
    ASSERT_TRUE(packed->Run({"x"}, {x}, {}, &got, &stats).ok());
    ASSERT_TRUE(unpacked->Run({"x", "w1", "w2"}, {x, w1, w2}, {}, &want).ok());
    EXPECT_EQ(stats.prepacked_constants, 2);
    // Panels of 32 columns, K rows deep: W1 3 panels x 70, W2^T 2 panels x 90.
    EXPECT_EQ(stats.prepacked_bytes, (3 * 70 + 2 * 90) * 32 * sizeof(float));
    ASSERT_EQ(got[0].shape(), (Shape{batch, 45}));
    const float* xp = x.data<float>();
    for (int64_t m = 0; m < batch; ++m) {
      std::vector<double> h(90, 0.0), h_abs(90, 0.0);
      for (int64_t j = 0; j < 90; ++j)
        for (int64_t k = 0; k < 70; ++k) {
          const double t = double(xp[m * 70 + k]) * w1.data<float>()[k * 90 + j];
          h[j] += t;
          h_abs[j] += std::fabs(t);
        }
      for (int64_t n = 0; n < 45; ++n) {
        double y = bias.data<float>()[n], y_abs = std::fabs(y);
        for (int64_t j = 0; j < 90; ++j) {
          y += 0.5 * h[j] * w2.data<float>()[n * 90 + j];
          y_abs += 0.5 * h_abs[j] * std::fabs(w2.data<float>()[n * 90 + j]);
        }
        const float g = got[0].data<float>()[m * 45 + n];
        ASSERT_NEAR(g, y, 1e-6 * 20 * y_abs + 1e-6) << "row " << m << " column " << n << " batch " << batch;
        // The same arithmetic as the unpacked path (same panels, tiles and K blocks).
        ASSERT_EQ(g, want[0].data<float>()[m * 45 + n]) << "row " << m << " column " << n << " batch " << batch;
      }
    }
  }
  EXPECT_EQ(PackedSgemmB::packs_made() - packs_before, 2);  // runs never re-pack
}

}  // namespace
}  // namespace tob
