// The bfloat16 GEMM (providers/cpu/nn/bf16_gemm.h, AVX512-BF16) and the 16-bit MatMul / Gemm ops
// against float64 references computed on the same (already rounded) 16-bit inputs.
//
// Tolerances follow from the arithmetic, not from what passed. With u = 2^-24 (float32's unit
// roundoff): products of two bfloat16 (8-bit significands) or float16 (11-bit) values are exact in
// float32, so the only errors of a float32-accumulated dot product of K terms are its K additions
// (VDPBF16PS adds its two products one after the other, each rounded): |error| <= K u sum|terms|.
// Scaling by alpha and adding beta C round twice more. A 16-bit result is then rounded once more,
// by at most 2^-8 (bfloat16) or 2^-11 (float16) of its magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "framework/thread_pool.h"
#include "op_tester.h"
#include "providers/cpu/nn/bf16_gemm.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

constexpr double kFloat32Unit = 0x1p-24;

#define SKIP_WITHOUT_BF16() \
  if (!Bf16GemmAvailable()) \
  GTEST_SKIP() << "this CPU has no AVX512-BF16 (or TOB_BF16_GEMM=0): gemm.cc computes bfloat16 in float32 there"

std::vector<BFloat16> RandomBf16(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<BFloat16> v(n);
  for (auto& x : v) {
    float f;
    do f = dist(gen);
    while (std::fabs(f) < 0.05f);
    x = BFloat16(f);
  }
  return v;
}

// One problem with padded strides: op(A) is M x K, op(B) K x N, C has ldc > N columns whose
// padding holds a sentinel that must survive.
struct Case {
  bool ta, tb;
  int64_t M, N, K, lda, ldb, ldc;
  std::vector<BFloat16> a, b;
  std::vector<float> c0;
  std::vector<double> dot, abs_dot;

  Case(bool ta_, bool tb_, int64_t M_, int64_t N_, int64_t K_, uint32_t seed) : ta(ta_), tb(tb_), M(M_), N(N_), K(K_) {
    lda = (ta ? M : K) + 3;
    ldb = (tb ? K : N) + 5;
    ldc = N + 7;
    a = RandomBf16(static_cast<size_t>((ta ? K : M) * lda), seed);
    b = RandomBf16(static_cast<size_t>((tb ? N : K) * ldb), seed + 1);
    std::vector<BFloat16> c16 = RandomBf16(static_cast<size_t>(M * ldc), seed + 2);
    c0.assign(c16.begin(), c16.end());
    dot.assign(static_cast<size_t>(M * N), 0.0);
    abs_dot.assign(static_cast<size_t>(M * N), 0.0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, s_abs = 0;
        for (int64_t k = 0; k < K; ++k) {
          double t =
              double(float(a[ta ? k * lda + m : m * lda + k])) * double(float(b[tb ? n * ldb + k : k * ldb + n]));
          s += t;
          s_abs += std::fabs(t);
        }
        dot[m * N + n] = s;
        abs_dot[m * N + n] = s_abs;
      }
  }

  // Runs gemm(c) from c0 (NaN in the first N columns when beta == 0: they must not be read) and
  // checks against alpha * dot + beta * c0 within (K + 3) u (|alpha| sum|terms| + |beta c|).
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
        const float got = c[m * ldc + n];
        if (n >= N) {
          if (got != kSentinel) {
            ADD_FAILURE() << label << ": wrote past column N at (" << m << ", " << n << ")";
            ++failures;
          }
          continue;
        }
        const double c_in = beta == 0.f ? 0.0 : double(c0[m * ldc + n]);
        const double want = alpha * dot[m * N + n] + beta * c_in;
        const double tol = (K + 3) * kFloat32Unit * (std::fabs(alpha) * abs_dot[m * N + n] + std::fabs(beta * c_in));
        if (!(std::fabs(got - want) <= tol)) {
          ADD_FAILURE() << label << " at (" << m << ", " << n << "): got " << got << ", want " << want << " (tol "
                        << tol << ")";
          ++failures;
        }
      }
  }

  // Bf16Gemm as gemm.cc drives it: A packed into even-K rows unless it already is.
  void RunKernel(float alpha, float beta, float* c, ThreadPool* pool, std::vector<BFloat16>* packed) const {
    const BFloat16* a_rows = a.data();
    int64_t a_ld = lda;
    if (ta || K % 2 != 0) {
      const int64_t k_even = K + K % 2;
      packed->assign(static_cast<size_t>(M * k_even), BFloat16(7.f));
      PackBf16Rows(ta, M, K, a.data(), lda, k_even, packed->data(), pool);
      a_rows = packed->data();
      a_ld = k_even;
    }
    const BFloat16* b_ptr = b.data();
    Bf16Gemm(tb, M, N, K, alpha, &a_rows, a_ld, &b_ptr, ldb, beta, &c, ldc, 1, pool);
  }
};

std::string Label(const Case& t, float alpha, float beta) {
  return "ta=" + std::to_string(t.ta) + " tb=" + std::to_string(t.tb) + " M=" + std::to_string(t.M) +
         " N=" + std::to_string(t.N) + " K=" + std::to_string(t.K) + " alpha=" + std::to_string(alpha) +
         " beta=" + std::to_string(beta);
}

// Every tile height (1..12 and a split of 13), both panel widths and their ragged edges, odd K and
// K across the 512-row blocks, all four transposition cases.
TEST(Bf16GemmTest, EveryShapeMatchesFloat64) {
  SKIP_WITHOUT_BF16();
  uint32_t seed = 1;
  std::vector<BFloat16> packed;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 5, 12, 13, 40})
        for (int64_t N : {1, 15, 16, 17, 32, 33, 70})
          for (int64_t K : {1, 2, 3, 64, 513, 1030}) {
            const Case t(ta, tb, M, N, K, seed += 3);
            for (float alpha : {1.f, 0.5f})
              for (float beta : {0.f, -0.75f})
                t.Check(alpha, beta, Label(t, alpha, beta),
                        [&](float* c) { t.RunKernel(alpha, beta, c, nullptr, &packed); });
            if (::testing::Test::HasFailure()) return;
          }
}

// On a pool: a narrow N with many rows is also cut into row chunks; a batch shares the pool.
TEST(Bf16GemmTest, ThreadedRowChunksAndBatches) {
  SKIP_WITHOUT_BF16();
  ThreadPool pool(2);
  std::vector<BFloat16> packed;
  for (bool tb : {false, true}) {
    const Case narrow(false, tb, 300, 20, 130, 41);
    narrow.Check(1.f, 1.f, "narrow " + Label(narrow, 1.f, 1.f),
                 [&](float* c) { narrow.RunKernel(1.f, 1.f, c, &pool, &packed); });
  }
  std::vector<Case> cases;
  for (uint32_t i = 0; i < 3; ++i) cases.emplace_back(false, true, 37, 70, 300, 100 + 7 * i);
  std::vector<std::vector<float>> out;
  std::vector<const BFloat16*> a, b;
  std::vector<float*> c;
  for (const Case& cs : cases) out.push_back(cs.c0);
  for (size_t i = 0; i < cases.size(); ++i) {
    a.push_back(cases[i].a.data());
    b.push_back(cases[i].b.data());
    c.push_back(out[i].data());
  }
  const Case& t = cases[0];
  Bf16Gemm(true, t.M, t.N, t.K, 0.5f, a.data(), t.lda, b.data(), t.ldb, -0.75f, c.data(), t.ldc, 3, &pool);
  for (size_t i = 0; i < cases.size(); ++i)
    cases[i].Check(0.5f, -0.75f, "batch " + std::to_string(i), [&](float* dst) {
      for (int64_t m = 0; m < t.M; ++m)
        for (int64_t n = 0; n < t.N; ++n) dst[m * t.ldc + n] = out[i][m * t.ldc + n];
    });
}

// Bf16GemmRounded: C in bfloat16 (its padding a sentinel that must survive), each result the
// float32 one rounded once: within 2^-8 |exact| + (1 + 2^-8) of the float32 bound.
TEST(Bf16GemmTest, RoundedOutputMatchesFloat64) {
  SKIP_WITHOUT_BF16();
  ThreadPool pool(2);
  uint32_t seed = 500;
  std::vector<BFloat16> packed;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t M : {1, 7, 12, 30})
        for (int64_t N : {3, 16, 33, 64})
          for (int64_t K : {int64_t{1}, int64_t{2}, int64_t{65}, kBf16GemmRoundedMaxK}) {
            const Case t(ta, tb, M, N, K, seed += 3);
            for (float beta : {0.f, -0.75f}) {
              const BFloat16 sentinel(12288.f);  // exact in bfloat16
              std::vector<BFloat16> c(static_cast<size_t>(M * t.ldc), sentinel);
              for (int64_t m = 0; m < M; ++m)
                for (int64_t n = 0; n < N; ++n)
                  c[m * t.ldc + n] =
                      beta == 0.f ? BFloat16(std::numeric_limits<float>::quiet_NaN()) : BFloat16(t.c0[m * t.ldc + n]);
              const BFloat16* a_rows = t.a.data();
              int64_t a_ld = t.lda;
              if (ta || K % 2 != 0) {
                packed.assign(static_cast<size_t>(M * (K + K % 2)), BFloat16(7.f));
                PackBf16Rows(ta, M, K, t.a.data(), t.lda, K + K % 2, packed.data(), &pool);
                a_rows = packed.data();
                a_ld = K + K % 2;
              }
              const BFloat16* b_ptr = t.b.data();
              BFloat16* c_ptr = c.data();
              Bf16GemmRounded(tb, M, N, K, 0.5f, &a_rows, a_ld, &b_ptr, t.ldb, beta, &c_ptr, t.ldc, 1, &pool);
              int failures = 0;
              for (int64_t m = 0; m < M && failures < 5; ++m)
                for (int64_t n = 0; n < t.ldc && failures < 5; ++n) {
                  const float got = c[m * t.ldc + n];
                  if (n >= N) {
                    if (got != 12288.f) ADD_FAILURE() << Label(t, 0.5f, beta) << ": wrote past N at " << m << ", " << n;
                    failures += got != 12288.f;
                    continue;
                  }
                  const double c_in = beta == 0.f ? 0.0 : double(t.c0[m * t.ldc + n]);
                  const double want = 0.5 * t.dot[m * N + n] + beta * c_in;
                  const double f32 = (K + 3) * kFloat32Unit * (0.5 * t.abs_dot[m * N + n] + std::fabs(beta * c_in));
                  const double tol = 0x1p-8 * std::fabs(want) + (1 + 0x1p-8) * f32;
                  if (!(std::fabs(got - want) <= tol)) {
                    ADD_FAILURE() << Label(t, 0.5f, beta) << " at (" << m << ", " << n << "): got " << got << ", want "
                                  << want << " (tol " << tol << ")";
                    ++failures;
                  }
                }
            }
            if (::testing::Test::HasFailure()) return;
          }
}

// ---- the ops: MatMul and Gemm on bfloat16 and float16 tensors (native kernel or float32) ----

// Numpy matmul of [.., M, K] x [K, N] or batched [B, M, K] x [B, K, N] (equal batches) in double,
// with sum|terms| per output for the tolerance.
void ReferenceBatchedMatMul(const Tensor& a, const Tensor& b, std::vector<double>* out, double* max_abs_dot) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const int64_t K = as.back(), N = bs.back(), M = as[as.size() - 2];
  const int64_t batch = a.numel() / (M * K);
  const bool b_shared = bs.size() == 2;
  std::vector<double> av = ToDoubles(a), bv = ToDoubles(b);
  out->assign(static_cast<size_t>(batch * M * N), 0.0);
  *max_abs_dot = 0;
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0, s_abs = 0;
        for (int64_t k = 0; k < K; ++k) {
          double t = av[(i * M + m) * K + k] * bv[((b_shared ? 0 : i) * K + k) * N + n];
          s += t;
          s_abs += std::fabs(t);
        }
        (*out)[(i * M + m) * N + n] = s;
        *max_abs_dot = std::max(*max_abs_dot, s_abs);
      }
}

// A 16-bit result: one float32-accumulated dot product (K u max sum|terms|, absolute) rounded
// once to T (relative).
template <typename T>
void RunMatMul(const Shape& a_shape, const Shape& b_shape, uint32_t seed) {
  Tensor a = RandomTensor<T>(a_shape, -1, 1, seed), b = RandomTensor<T>(b_shape, -1, 1, seed + 1);
  std::vector<double> expected;
  double max_abs_dot;
  ReferenceBatchedMatMul(a, b, &expected, &max_abs_dot);
  Shape out_shape = a_shape;
  out_shape.back() = b_shape.back();
  if (b_shape.size() == 3) out_shape[0] = b_shape[0];
  const double rounding = std::is_same_v<T, BFloat16> ? 0x1p-8 : 0x1p-11;
  const double accumulation = (a_shape.back() + 1) * kFloat32Unit * max_abs_dot * (1 + rounding);
  OpTester("MatMul", 13).Input("A", a).Input("B", b).Output("Y", out_shape, expected, rounding, accumulation).Run();
}

TEST(Bf16GemmTest, MatMulOnSixteenBitFloats) {
  // Linear layers (A's batch folded into M), attention (batched, K = head size), odd K, K across blocks.
  RunMatMul<BFloat16>({4, 32, 96}, {96, 80}, 1);
  RunMatMul<BFloat16>({6, 40, 16}, {6, 16, 40}, 3);
  RunMatMul<BFloat16>({33, 7}, {7, 65}, 5);
  RunMatMul<BFloat16>({130, 600}, {600, 24}, 7);
  RunMatMul<Float16>({4, 32, 96}, {96, 80}, 9);
  RunMatMul<Float16>({6, 40, 16}, {6, 16, 40}, 11);
  RunMatMul<Float16>({33, 7}, {7, 65}, 13);
}

// Gemm's flags (the backward's X^T dY and dY W^T), alpha, and a C broadcast with beta.
template <typename T>
void RunGemmOp(bool ta, bool tb, int64_t M, int64_t N, int64_t K, uint32_t seed) {
  const float alpha = 0.5f, beta = -1.5f;
  Tensor a = RandomTensor<T>(ta ? Shape{K, M} : Shape{M, K}, -1, 1, seed);
  Tensor b = RandomTensor<T>(tb ? Shape{N, K} : Shape{K, N}, -1, 1, seed + 1);
  Tensor c = RandomTensor<T>({N}, -1, 1, seed + 2);
  std::vector<double> av = ToDoubles(a), bv = ToDoubles(b), cv = ToDoubles(c), expected(M * N);
  double max_abs = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, s_abs = 0;
      for (int64_t k = 0; k < K; ++k) {
        double t = av[ta ? k * M + m : m * K + k] * bv[tb ? n * K + k : k * N + n];
        s += t;
        s_abs += std::fabs(t);
      }
      expected[m * N + n] = alpha * s + beta * cv[n];
      max_abs = std::max(max_abs, std::fabs(alpha) * s_abs + std::fabs(beta * cv[n]));
    }
  const double rounding = std::is_same_v<T, BFloat16> ? 0x1p-8 : 0x1p-11;
  OpTester("Gemm", 13)
      .Attr("transA", Attribute::Int(ta))
      .Attr("transB", Attribute::Int(tb))
      .Attr("alpha", Attribute::Float(alpha))
      .Attr("beta", Attribute::Float(beta))
      .Input("A", a)
      .Input("B", b)
      .Input("C", c)
      .Output("Y", {M, N}, expected, rounding, (K + 3) * kFloat32Unit * max_abs * (1 + rounding))
      .Run();
}

TEST(Bf16GemmTest, GemmOpOnSixteenBitFloats) {
  uint32_t seed = 20;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      RunGemmOp<BFloat16>(ta, tb, 70, 45, 129, seed += 3);
      RunGemmOp<Float16>(ta, tb, 70, 45, 129, seed += 3);
    }
}

}  // namespace
}  // namespace tob
