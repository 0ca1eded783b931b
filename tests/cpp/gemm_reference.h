// Float32 GEMM cases against a float64 reference, shared by the SGEMM tests (small_gemm.h,
// sgemm_packed.h): random non-zero operands with padded strides, a tolerance from the sum of
// |terms|, and a sentinel past column N of C that must survive.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tob::gemm_testing {

inline std::vector<float> RandomNonZero(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> v(n);
  for (auto& x : v) {
    do x = dist(gen);
    while (std::fabs(x) < 0.05f);
  }
  return v;
}

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

inline std::string Label(const Case& t, float alpha, float beta, const char* isa) {
  return std::string(isa) + " ta=" + std::to_string(t.ta) + " tb=" + std::to_string(t.tb) +
         " M=" + std::to_string(t.M) + " N=" + std::to_string(t.N) + " K=" + std::to_string(t.K) +
         " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
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

}  // namespace tob::gemm_testing
