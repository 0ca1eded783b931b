// The BLAS wrapper (providers/cpu/nn/gemm.h) and the MatMul / Gemm ops, against float64 loops.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "op_tester.h"
#include "providers/cpu/nn/gemm.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

std::vector<double> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// C = alpha * op(A) op(B) + beta * C with explicit leading dims, in double.
void ReferenceGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const std::vector<double>& A,
                   int64_t lda, const std::vector<double>& B, int64_t ldb, double beta, std::vector<double>& C,
                   int64_t ldc) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += A[ta ? k * lda + m : m * lda + k] * B[tb ? n * ldb + k : k * ldb + n];
      C[m * ldc + n] = alpha * s + (beta == 0 ? 0.0 : beta * C[m * ldc + n]);
    }
}

struct GemmCase {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << (c.ta ? "T" : "N") << (c.tb ? "T" : "N") << " M=" << c.M << " N=" << c.N << " K=" << c.K
      << " alpha=" << c.alpha << " beta=" << c.beta;
}

class GemmWrapper : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmWrapper, MatchesReferenceWithPaddedLeadingDims) {
  const GemmCase p = GetParam();
  // Leading dims wider than the matrices, so tiles must honour them.
  const int64_t a_rows = p.ta ? p.K : p.M, a_cols = p.ta ? p.M : p.K;
  const int64_t b_rows = p.tb ? p.N : p.K, b_cols = p.tb ? p.K : p.N;
  const int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = p.N + 2;
  std::vector<double> A = RandomVector(a_rows * lda, 1), B = RandomVector(b_rows * ldb, 2),
                      C = RandomVector(p.M * ldc, 3);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> af(A.begin(), A.end()), bf(B.begin(), B.end()), cf(C.begin(), C.end());
    ASSERT_TRUE(
        Gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, af.data(), lda, bf.data(), ldb, p.beta, cf.data(), ldc, &pool).ok());
    std::vector<double> ad(A), bd(B), cd(C);
    ASSERT_TRUE(Gemm(p.ta, p.tb, p.M, p.N, p.K, double(p.alpha), ad.data(), lda, bd.data(), ldb, double(p.beta),
                     cd.data(), ldc, &pool)
                    .ok());
    std::vector<double> expected = C;
    ReferenceGemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, A, lda, B, ldb, p.beta, expected, ldc);
    for (int64_t m = 0; m < p.M; ++m) {
      for (int64_t n = 0; n < ldc; ++n) {
        const int64_t i = m * ldc + n;
        // Padding columns of C must be untouched.
        double want = n < p.N ? expected[i] : C[i];
        ASSERT_NEAR(cf[i], want, 1e-4 + 1e-4 * std::fabs(want))
            << "float, threads " << threads << " at " << m << "," << n;
        ASSERT_NEAR(cd[i], want, 1e-10 + 1e-10 * std::fabs(want)) << "double, threads " << threads;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    GemmShapes, GemmWrapper,
    ::testing::Values(GemmCase{false, false, 64, 96, 80, 1.f, 0.f}, GemmCase{true, false, 130, 70, 33, 0.5f, 1.f},
                      GemmCase{false, true, 37, 300, 65, 2.f, 0.5f}, GemmCase{true, true, 200, 150, 17, 1.f, -1.f},
                      GemmCase{true, true, 300, 200, 64, 1.f, 0.f}, GemmCase{false, true, 1, 5000, 256, 1.f, 0.f},
                      GemmCase{true, false, 5000, 1, 256, 1.f, 1.f}, GemmCase{false, false, 1, 1000, 64, 1.f, 0.f},
                      GemmCase{false, false, 3, 5, 1, 1.f, 0.f}, GemmCase{false, false, 7, 9, 0, 1.f, 0.5f}));

TEST(GemmWrapperTest, BatchedSplitsAcrossThreadsAndTiles) {
  // Big enough to be threaded: whole problems per thread (2, 16), tiles (1, 3, 5).
  const int64_t M = 64, N = 96, K = 64;
  for (int64_t batch : {1, 2, 3, 5, 16}) {
    std::vector<std::vector<double>> A, B, C;
    std::vector<std::vector<float>> af, bf, cf;
    for (int64_t i = 0; i < batch; ++i) {
      A.push_back(RandomVector(M * K, 10 + i));
      B.push_back(RandomVector(K * N, 50 + i));
      C.push_back(std::vector<double>(M * N, 0.0));
      af.emplace_back(A.back().begin(), A.back().end());
      bf.emplace_back(B.back().begin(), B.back().end());
      cf.emplace_back(M * N, 7.f);  // beta = 0 must overwrite, not accumulate
    }
    std::vector<const float*> ap, bp;
    std::vector<float*> cp;
    for (int64_t i = 0; i < batch; ++i) {
      ap.push_back(af[i].data());
      bp.push_back(bf[i].data());
      cp.push_back(cf[i].data());
    }
    ThreadPool pool(2);
    ASSERT_TRUE(
        BatchedGemm(false, false, M, N, K, 1.f, ap.data(), K, bp.data(), N, 0.f, cp.data(), N, batch, &pool).ok());
    for (int64_t i = 0; i < batch; ++i) {
      ReferenceGemm(false, false, M, N, K, 1.0, A[i], K, B[i], N, 0.0, C[i], N);
      for (int64_t j = 0; j < M * N; ++j) ASSERT_NEAR(cf[i][j], C[i][j], 1e-4) << "batch " << batch << " item " << i;
    }
  }
}

TEST(GemmWrapperTest, RejectsBadLeadingDimension) {
  std::vector<float> a(16), b(16), c(16);
  Status s = Gemm(false, false, 4, 4, 4, 1.f, a.data(), 3, b.data(), 4, 0.f, c.data(), 4, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  s = Gemm(false, false, -1, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4, nullptr);
  EXPECT_FALSE(s.ok());
}

// ---- MatMul ----

// Numpy matmul in double for any ranks (1-D operands promoted and squeezed).
std::vector<double> ReferenceMatMul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape as = a.shape(), bs = b.shape();
  const bool av = as.size() == 1, bv = bs.size() == 1;
  if (av) as.insert(as.begin(), 1);
  if (bv) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t r = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), r - ab.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  Shape ob(r);
  for (size_t i = 0; i < r; ++i) ob[i] = std::max(ab[i], bb[i]);
  std::vector<double> av_ = ToDoubles(a), bv_ = ToDoubles(b);
  const int64_t batch = NumElements(ob);
  std::vector<double> out(batch * M * N);
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < r; ++d) {
      ao = ao * ab[d] + (ab[d] == 1 ? 0 : idx[d]);
      bo = bo * bb[d] + (bb[d] == 1 ? 0 : idx[d]);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += av_[(ao * M + m) * K + k] * bv_[(bo * K + k) * N + n];
        out[(i * M + m) * N + n] = s;
      }
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++idx[d] == ob[d]; --d) idx[d] = 0;
  }
  *out_shape = ob;
  if (!av) out_shape->push_back(M);
  if (!bv) out_shape->push_back(N);
  return out;
}

template <typename T>
void RunMatMul(const Shape& a_shape, const Shape& b_shape, double tol, uint32_t seed = 7) {
  Tensor a = RandomTensor<T>(a_shape, -1, 1, seed), b = RandomTensor<T>(b_shape, -1, 1, seed + 1);
  Shape out_shape;
  std::vector<double> expected = ReferenceMatMul(a, b, &out_shape);
  OpTester("MatMul", 13).Input("A", a).Input("B", b).Output("Y", out_shape, expected, tol, tol).Run();
}

TEST(GemmMatMul, TwoDimensional) {
  RunMatMul<float>({64, 48}, {48, 80}, 1e-5);
  RunMatMul<double>({33, 17}, {17, 65}, 1e-12);
}

TEST(GemmMatMul, BroadcastsBatchDims) {
  RunMatMul<float>({2, 1, 3, 4, 5}, {3, 5, 6}, 1e-5);
  RunMatMul<float>({4, 5}, {3, 5, 6}, 1e-5);         // A shared by every batch
  RunMatMul<float>({2, 3, 40, 50}, {50, 30}, 1e-5);  // folded into one GEMM
  RunMatMul<double>({3, 1, 4, 5}, {1, 2, 5, 6}, 1e-12);
  RunMatMul<float>({3, 1, 64, 48}, {1, 2, 48, 80}, 1e-5);  // threaded over the batch
  RunMatMul<float>({3, 96, 48}, {3, 48, 64}, 1e-5);        // threaded over batch and tiles
}

TEST(GemmMatMul, VectorOperands) {
  RunMatMul<float>({7}, {7, 5}, 1e-5);
  RunMatMul<float>({2, 3, 7}, {7}, 1e-5);
  RunMatMul<float>({7}, {7}, 1e-5);
  RunMatMul<float>({7}, {4, 7, 3}, 1e-5);
}

TEST(GemmMatMul, HalfTypesComputeInFloat) {
  RunMatMul<Float16>({2, 16, 24}, {24, 8}, 2e-2);
  RunMatMul<BFloat16>({16, 24}, {3, 24, 8}, 5e-2);
}

TEST(GemmMatMul, MismatchedInnerDimIsAnError) {
  auto r = OpTester("MatMul", 13)
               .Input("A", RandomTensor<float>({3, 4}))
               .Input("B", RandomTensor<float>({5, 6}))
               .Output("Y", {3, 6}, {})
               .Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  EXPECT_NE(r.status().message().find("test_node"), std::string::npos);
}

TEST(GemmMatMul, IncompatibleBatchDimsAreAnError) {
  auto r = OpTester("MatMul", 13)
               .Input("A", RandomTensor<float>({2, 3, 4}))
               .Input("B", RandomTensor<float>({3, 4, 5}))
               .Output("Y", {2, 3, 5}, {})
               .Compute();
  EXPECT_FALSE(r.ok());
}

// ---- Gemm op ----

struct GemmOpCase {
  bool ta, tb;
  float alpha, beta;
  Shape c_shape;  // empty + no_c: C omitted
  bool has_c;
};

void RunGemmOp(const GemmOpCase& p, int opset = 13) {
  const int64_t M = 6, N = 5, K = 7;
  Tensor a = RandomTensor<float>(p.ta ? Shape{K, M} : Shape{M, K}, -1, 1, 3);
  Tensor b = RandomTensor<float>(p.tb ? Shape{N, K} : Shape{K, N}, -1, 1, 4);
  Tensor c = RandomTensor<float>(p.c_shape, -1, 1, 5);
  std::vector<double> ad = ToDoubles(a), bd = ToDoubles(b), cd = ToDoubles(c);
  std::vector<double> expected(M * N);
  const int64_t c_rows = p.c_shape.size() == 2 ? p.c_shape[0] : 1;
  const int64_t c_cols = p.c_shape.empty() ? 1 : p.c_shape.back();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += ad[p.ta ? k * M + m : m * K + k] * bd[p.tb ? n * K + k : k * N + n];
      double cv = p.has_c ? cd[(c_rows == 1 ? 0 : m) * c_cols + (c_cols == 1 ? 0 : n)] : 0.0;
      expected[m * N + n] = p.alpha * s + p.beta * cv;
    }
  OpTester t("Gemm", opset);
  t.Attr("transA", Attribute::Int(p.ta)).Attr("transB", Attribute::Int(p.tb));
  t.Attr("alpha", Attribute::Float(p.alpha)).Attr("beta", Attribute::Float(p.beta));
  t.Input("A", a).Input("B", b);
  if (p.has_c) t.Input("C", c);
  t.Output("Y", {M, N}, expected, 1e-5, 1e-5).Run();
}

TEST(GemmOp, TransposesAlphaBetaAndCBroadcast) {
  RunGemmOp({false, false, 1.f, 1.f, {6, 5}, true});
  RunGemmOp({true, false, 0.5f, 2.f, {5}, true});
  RunGemmOp({false, true, 1.5f, -1.f, {6, 1}, true});
  RunGemmOp({true, true, 1.f, 0.5f, {1, 5}, true});
  RunGemmOp({false, false, 1.f, 3.f, {}, true});  // scalar C
  RunGemmOp({true, true, 2.f, 1.f, {}, false});   // C omitted (opset 11+)
  RunGemmOp({false, false, 1.f, 1.f, {6, 5}, true}, 7);
}

TEST(GemmOp, DoubleAndHalf) {
  Tensor a = RandomTensor<double>({3, 4}, -1, 1, 1), b = RandomTensor<double>({4, 2}, -1, 1, 2);
  Shape s;
  OpTester("Gemm", 13).Input("A", a).Input("B", b).Output("Y", {3, 2}, ReferenceMatMul(a, b, &s), 1e-12, 1e-12).Run();
  Tensor ah = RandomTensor<Float16>({8, 16}, -1, 1, 1), bh = RandomTensor<Float16>({16, 4}, -1, 1, 2);
  OpTester("Gemm", 13).Input("A", ah).Input("B", bh).Output("Y", {8, 4}, ReferenceMatMul(ah, bh, &s), 1e-2, 1e-2).Run();
}

TEST(GemmOp, BadShapesAreErrors) {
  // K mismatch.
  auto r = OpTester("Gemm", 13)
               .Input("A", RandomTensor<float>({3, 4}))
               .Input("B", RandomTensor<float>({5, 2}))
               .Output("Y", {3, 2}, {})
               .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  // C that does not broadcast to [M, N].
  r = OpTester("Gemm", 13)
          .Input("A", RandomTensor<float>({3, 4}))
          .Input("B", RandomTensor<float>({4, 2}))
          .Input("C", RandomTensor<float>({3}))
          .Output("Y", {3, 2}, {})
          .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  // C required before opset 11.
  r = OpTester("Gemm", 9)
          .Input("A", RandomTensor<float>({3, 4}))
          .Input("B", RandomTensor<float>({4, 2}))
          .Output("Y", {3, 2}, {})
          .Compute();
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace tob
