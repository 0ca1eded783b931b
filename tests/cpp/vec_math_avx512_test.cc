// The AVX-512 row primitives of the loss head (providers/cpu/nn/vec_math_avx512.h) against float64
// and against the AVX2 primitives they stand in for (vec_math.h, through the kernels' float32 exp
// simd::Exp): rows of every tail length, -inf entries, arguments whose exp is subnormal or
// overflows, NaN. Skipped where the CPU has no AVX-512 (the functions are then never called).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "providers/cpu/elementwise/vector_math_isa.h"
#include "providers/cpu/nn/vec_math_avx512.h"

namespace tob {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<float> Row(int64_t n, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-8.f, 8.f);
  std::vector<float> x(n);
  for (int64_t j = 0; j < n; ++j) {
    x[j] = u(gen);
    if (j % 13 == 4) x[j] = -kInf;
    if (j % 17 == 6) x[j] = -100.f + u(gen);  // exp subnormal or zero
  }
  return x;
}

TEST(VecMathAvx512, MaxAndLogSumExpAgainstFloat64) {
  if (!vec::avx512::Available()) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 gen(11);
  for (int64_t n = 1; n <= 200; n += (n < 70 ? 1 : 13)) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const std::vector<float> x = Row(n, gen);
    float m = -kInf;
    for (float v : x) m = std::max(m, v);
    EXPECT_EQ(vec::avx512::Max(x.data(), n), m);
    const float shift = std::isinf(m) ? 0.f : m;
    double exact = 0;
    for (float v : x) exact += std::exp(static_cast<double>(v - shift));  // the kernel subtracts in float32
    // n positive terms, each within 2 float32 ulps (2^-22 relative), summed in float32 (n - 1
    // roundings of at most 2^-24 relative of the running sum): (n + 4) 2^-24 of the sum.
    const float got = vec::avx512::ExpShiftedSumOnly(x.data(), n, shift);
    EXPECT_LE(std::fabs(got - exact), (n + 4) * std::ldexp(exact, -24));
  }
}

// ExpScaled(x, f) = exp(x) f with exp simd::Exp's bits: against ew::avx2::ExpArray (simd::Exp on
// 8 lanes) times f in float32, bit for bit, and against float64.
TEST(VecMathAvx512, ExpScaledIsTheProviderExpTimesTheFactor) {
  if (!vec::avx512::Available() || !ew::avx2::Available()) GTEST_SKIP() << "needs AVX-512 and AVX2";
  std::mt19937 gen(13);
  std::vector<float> special{kInf, -kInf, std::nanf(""), 0.f, -0.f, 88.7f, 88.8f, -87.5f, -103.9f, -104.f, -1e30f};
  for (int64_t n = 1; n <= 130; ++n) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    std::vector<float> x = Row(n, gen);
    for (size_t s = 0; s < special.size() && static_cast<int64_t>(s) < n; ++s) x[(s * 7) % n] = special[s];
    const float f = 0.37f;
    std::vector<float> y(n + 1, 123.f), e(n + (8 - n % 8) % 8), xp = x;
    xp.resize(e.size(), 0.f);
    ew::avx2::ExpArray(xp.data(), e.data(), static_cast<int64_t>(xp.size()));  // whole 8-lane vectors only
    vec::avx512::ExpScaled(x.data(), n, f, y.data());
    for (int64_t j = 0; j < n; ++j) {
      const float want = e[j] * f;
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[j])) << "x " << x[j];
        continue;
      }
      EXPECT_EQ(Bits(y[j]), Bits(want)) << "x " << x[j];
      // exp within 2 ulps, then the product's rounding: 3 ulps (2^-23 relative each), or one
      // subnormal ulp.
      const double exact = std::exp(static_cast<double>(x[j])) * f;
      if (std::isfinite(exact) && exact < 1e38)
        EXPECT_LE(std::fabs(y[j] - exact), 3 * std::ldexp(exact, -23) + std::ldexp(1.0, -149)) << "x " << x[j];
    }
    EXPECT_EQ(y[n], 123.f) << "wrote past n";
  }
}

}  // namespace
}  // namespace tob
