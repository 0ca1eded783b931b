// FlashAttention's bfloat16 row passes (providers/cpu/training/flash_attention_rows.h), every
// variant this machine runs (portable; AVX-512 where the CPU has it), against float64 references:
// exp over the whole float range (-inf masks, large negative arguments, subnormal results, NaN,
// overflow), row lengths that cross the vector width and leave every tail length, the bfloat16
// rounding against core/half.h's FloatToBFloat16Bits on special bit patterns, and the AVX-512
// exponentials bit for bit against the provider's AVX2 exp (simd::Exp, through ew::avx2::ExpArray).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "providers/cpu/elementwise/vector_math_isa.h"
#include "providers/cpu/training/flash_attention_rows.h"

namespace tob {
namespace {

using flash_rows::RowOps;

constexpr float kInf = std::numeric_limits<float>::infinity();
// The smallest positive subnormal float.
const double kDenorm = std::ldexp(1.0, -149);

struct Variant {
  const char* name;
  const RowOps* ops;
};

std::vector<Variant> Variants() {
  std::vector<Variant> v{{"portable", &flash_rows::portable::Ops()}};
  if (flash_rows::avx512::Available()) v.push_back({"avx512", &flash_rows::avx512::Ops()});
  return v;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// |got - exp(a)| within 2 float32 ulps of the exact value, or 1 subnormal ulp where the result is
// subnormal (one rounding of y 2^k, y carrying the polynomial's ~1 ulp): the Cephes bound the
// provider's exp is tested to (elementwise_test.cc).
void ExpectExp(float a, float got, const char* what) {
  if (std::isnan(a)) {
    EXPECT_TRUE(std::isnan(got)) << what << " exp(" << a << ") = " << got;
    return;
  }
  const double e = std::exp(static_cast<double>(a));
  if (e > std::numeric_limits<float>::max()) {
    EXPECT_EQ(got, kInf) << what << " exp(" << a << ")";
    return;
  }
  const double bound = std::max(2.0 * std::ldexp(1.0, -23) * e, kDenorm);
  EXPECT_LE(std::fabs(got - e), bound) << what << " exp(" << a << ") = " << got << ", exact " << e;
}

// Arguments over the whole float range: bit patterns stepped through both signs, the specials,
// and the region where exp's result is subnormal or overflows.
std::vector<float> ExpArguments() {
  std::vector<float> x;
  for (uint64_t b = 0; b < 0x80000000ull; b += 40009) {
    x.push_back(FromBits(static_cast<uint32_t>(b)));
    x.push_back(-FromBits(static_cast<uint32_t>(b)));
  }
  for (float v = -110.f; v <= 90.f; v += 0.0137f) x.push_back(v);
  for (float v : {-kInf, kInf, std::nanf(""), 0.f, -0.f, -87.336f, -103.28f, -103.97f, -104.f, -150.f, 88.72f, 88.73f,
                  -1e30f, 1e-40f, -1e-40f})
    x.push_back(v);
  while (x.size() % 16 != 0) x.push_back(-1.f);
  return x;
}

TEST(FlashAttentionRows, ExpOverTheFloatRangeAgainstFloat64) {
  const std::vector<float> args = ExpArguments();
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    std::vector<float> p = args;
    std::vector<uint16_t> p16(args.size());
    v.ops->exp_shifted_to_bf16(p.data(), static_cast<int64_t>(p.size()), 0.f, p16.data(),
                               static_cast<int64_t>(p16.size()));
    for (size_t i = 0; i < args.size(); ++i) {
      ExpectExp(args[i], p[i], "exp_shifted_to_bf16");
      EXPECT_EQ(p16[i], FloatToBFloat16Bits(p[i])) << "x " << args[i];
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// The AVX-512 exp is simd::Exp on 16 lanes: the same bits on every argument.
TEST(FlashAttentionRows, Avx512ExpIsTheProviderExpBitForBit) {
  if (!flash_rows::avx512::Available() || !ew::avx2::Available()) GTEST_SKIP() << "needs AVX-512 and AVX2";
  const std::vector<float> args = ExpArguments();
  std::vector<float> ref(args.size()), p = args;
  ew::avx2::ExpArray(args.data(), ref.data(), static_cast<int64_t>(args.size()));
  std::vector<uint16_t> p16(args.size());
  flash_rows::avx512::Ops().exp_shifted_to_bf16(p.data(), static_cast<int64_t>(p.size()), 0.f, p16.data(),
                                                static_cast<int64_t>(p16.size()));
  int64_t differ = 0;
  for (size_t i = 0; i < args.size(); ++i)
    if (Bits(p[i]) != Bits(ref[i]) && !(std::isnan(p[i]) && std::isnan(ref[i]))) ++differ;
  EXPECT_EQ(differ, 0);
}

// Score rows as the kernel forms them: random scores with -inf (masked keys), very negative
// entries (subnormal or zero probabilities) and every length up to past two AVX-512 vectors.
struct Row {
  std::vector<float> x;
  float shift;
};

std::vector<Row> ScoreRows() {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-6.f, 6.f);
  std::vector<Row> rows;
  for (int64_t n = 1; n <= 70; ++n) {
    Row r;
    for (int64_t j = 0; j < n; ++j) {
      float s = u(gen);
      if (j % 7 == 3) s = -kInf;
      if (j % 11 == 5) s = -95.f + u(gen);  // exp lands in float32's subnormal range
      r.x.push_back(s);
    }
    float m = -kInf;
    for (float s : r.x) m = std::max(m, s);
    r.shift = std::isinf(m) ? 0.f : m;
    rows.push_back(r);
  }
  rows.push_back({std::vector<float>(133, 0.25f), 0.5f});
  return rows;
}

TEST(FlashAttentionRows, ForwardAndBackwardProbabilitiesAgainstFloat64) {
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    for (const Row& r : ScoreRows()) {
      const int64_t n = static_cast<int64_t>(r.x.size()), n_even = n + (n & 1);
      SCOPED_TRACE(::testing::Message() << "n " << n);
      float m = -kInf;
      for (float s : r.x) m = std::max(m, s);
      EXPECT_EQ(v.ops->max(r.x.data(), n), m);
      // Forward: bfloat16 P and the float32 sum of the unrounded exponentials.
      std::vector<uint16_t> y(n_even + 1, 0xffff);
      const float sum = v.ops->exp_shifted_sum_to_bf16(r.x.data(), n, r.shift, y.data(), n_even);
      double exact_sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float a = r.x[j] - r.shift;  // the kernel subtracts in float32
        const double e = std::exp(static_cast<double>(a));
        exact_sum += e;
        // bfloat16's rounding (half an ulp: 2^-9 relative, 2^-134 where the value is subnormal in
        // bfloat16's 7-bit significand) of a value within 2 float32 ulps.
        EXPECT_LE(std::fabs(BFloat16BitsToFloat(y[j]) - e), std::ldexp(e, -8) + std::ldexp(1.0, -133)) << "j " << j;
      }
      for (int64_t j = n; j < n_even; ++j) EXPECT_EQ(y[j], 0) << "pad";
      EXPECT_EQ(y[n_even], 0xffff) << "wrote past n_even";
      // n positive terms, each within 2 float32 ulps (2^-22 relative), summed in float32 (n - 1
      // roundings of at most 2^-24 relative of the running sum): (n + 4) 2^-24 of the sum.
      EXPECT_LE(std::fabs(sum - exact_sum), (n + 4) * std::ldexp(exact_sum, -24) + n * kDenorm);
      // Backward: float32 P in place and its rounding.
      std::vector<float> p = r.x;
      std::vector<uint16_t> p16(n_even + 1, 0xffff);
      v.ops->exp_shifted_to_bf16(p.data(), n, r.shift, p16.data(), n_even);
      for (int64_t j = 0; j < n; ++j) {
        ExpectExp(r.x[j] - r.shift, p[j], "backward P");
        EXPECT_EQ(p16[j], FloatToBFloat16Bits(p[j]));
      }
      for (int64_t j = n; j < n_even; ++j) EXPECT_EQ(p16[j], 0) << "pad";
      EXPECT_EQ(p16[n_even], 0xffff) << "wrote past n_even";
      if (::testing::Test::HasFailure()) return;
    }
  }
}

// dS = bfloat16(p (dp - delta)): two exact float32 operations and the rounding, so every variant
// gives FloatToBFloat16Bits of the float32 result, also on NaN payloads, infinities, subnormals and
// rounding ties (p = 1, delta = 0 hands the value through unchanged).
TEST(FlashAttentionRows, SoftmaxGradientRoundsAsFloatToBFloat16Bits) {
  std::vector<float> specials;
  for (uint32_t b : {0x7fc00000u, 0x7f800001u, 0xffa00001u, 0x7f800000u, 0xff800000u, 0x00000001u, 0x807fffffu,
                     0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0x7f7f8000u, 0x00008000u, 0x80018000u})
    specials.push_back(FromBits(b));
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    const int64_t n = static_cast<int64_t>(specials.size());
    std::vector<float> ones(n, 1.f);
    std::vector<uint16_t> y(n + 1);
    v.ops->softmax_grad_row_to_bf16(ones.data(), specials.data(), 0.f, n, y.data(), n);
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(y[j], FloatToBFloat16Bits(specials[j])) << std::hex << Bits(specials[j]);
    for (int64_t len = 1; len <= 40; ++len) {
      std::vector<float> p(len), dp(len);
      for (int64_t j = 0; j < len; ++j) {
        p[j] = std::fabs(u(gen));
        dp[j] = u(gen);
      }
      const float delta = u(gen);
      const int64_t n_even = len + (len & 1);
      std::vector<uint16_t> ds(n_even + 1, 0xffff);
      v.ops->softmax_grad_row_to_bf16(p.data(), dp.data(), delta, len, ds.data(), n_even);
      for (int64_t j = 0; j < len; ++j) {
        volatile float diff = dp[j] - delta;  // two roundings, as the kernel (no fused multiply-add)
        EXPECT_EQ(ds[j], FloatToBFloat16Bits(p[j] * diff)) << "len " << len << " j " << j;
      }
      for (int64_t j = len; j < n_even; ++j) EXPECT_EQ(ds[j], 0);
      EXPECT_EQ(ds[n_even], 0xffff);
    }
  }
}

// delta = dY . Y over bfloat16 rows: exact products (8-bit significands), float32 sums.
TEST(FlashAttentionRows, DotOfBfloat16RowsAgainstFloat64) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (const Variant& v : Variants()) {
    SCOPED_TRACE(v.name);
    for (int64_t n = 1; n <= 80; ++n) {
      std::vector<BFloat16> a(n), b(n);
      double exact = 0, magnitude = 0;
      for (int64_t i = 0; i < n; ++i) {
        a[i] = BFloat16(u(gen));
        b[i] = BFloat16(u(gen));
        const double t = static_cast<double>(static_cast<float>(a[i])) * static_cast<float>(b[i]);
        exact += t;
        magnitude += std::fabs(t);
      }
      const float got = v.ops->dot_bf16(a.data(), b.data(), n);
      EXPECT_LE(std::fabs(got - exact), n * std::ldexp(magnitude, -24)) << "n " << n;
    }
  }
}

}  // namespace
}  // namespace tob
