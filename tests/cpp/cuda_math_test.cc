// The per-element arithmetic of the CUDA kernels (kernels/elementwise/elementwise_ops.h: ApplyUnary,
// ApplyBinary, CastElement over the elementwise_math.h functors), run on the host and compared
// with float64 references. These are the very functions the .cu kernels call per element, so this
// suite checks the GPU's math on machines without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kernels/elementwise/elementwise_ops.h"

namespace tob::cuda {
namespace {

// Relative precision of one rounding to each storage type (half an ulp at 1.0), plus slack for
// the float32 computation before that rounding.
template <typename T>
double StorageTolerance() {
  if constexpr (std::is_same_v<T, Float16>) return 1.0 / 2048 + 1e-6;
  else if constexpr (std::is_same_v<T, BFloat16>) return 1.0 / 256 + 1e-6;
  else if constexpr (std::is_same_v<T, float>) return 4e-7;
  else return 1e-15;
}

template <typename T>
std::vector<T> RandomValues(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) {
    double d = dist(gen);
    while (std::fabs(d) < 0.05) d = dist(gen);
    x = T(static_cast<float>(d));
  }
  return v;
}

template <typename T>
double AsDouble(T x) {
  return static_cast<double>(LoadElement(x));
}

// Checks op on every (a, b) pair against ref evaluated in double on the stored inputs.
template <typename T, typename Op, typename Ref>
void CheckBinary(const Op& op, Ref ref, const std::string& name) {
  const auto a = RandomValues<T>(257, -4.0, 4.0, 7);
  const auto b = RandomValues<T>(257, -4.0, 4.0, 11);
  const double tol = StorageTolerance<T>();
  for (size_t i = 0; i < a.size(); ++i) {
    const double expected = ref(AsDouble(a[i]), AsDouble(b[i]));
    const double got = AsDouble(ApplyBinary(op, a[i], b[i]));
    ASSERT_NEAR(got, expected, tol * std::fabs(expected) + 1e-30)
        << name << "(" << AsDouble(a[i]) << ", " << AsDouble(b[i]) << ")";
  }
}

template <typename T, typename Op, typename Ref>
void CheckUnary(const Op& op, Ref ref, const std::string& name, double lo = -6.0, double hi = 6.0,
                double extra_abs_tol = 0.0) {
  const auto x = RandomValues<T>(513, lo, hi, 3);
  const double tol = StorageTolerance<T>();
  for (T v : x) {
    const double expected = ref(AsDouble(v));
    const double got = AsDouble(ApplyUnary(op, v));
    ASSERT_NEAR(got, expected, tol * std::fabs(expected) + extra_abs_tol + 1e-30) << name << "(" << AsDouble(v) << ")";
  }
}

template <typename T>
void CheckArithmetic() {
  CheckBinary<T>(
      ew::AddOp{}, [](double a, double b) { return a + b; }, "Add");
  CheckBinary<T>(
      ew::SubOp{}, [](double a, double b) { return a - b; }, "Sub");
  CheckBinary<T>(
      ew::MulOp{}, [](double a, double b) { return a * b; }, "Mul");
  CheckBinary<T>(
      ew::DivOp{}, [](double a, double b) { return a / b; }, "Div");
}

double RefSigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double RefGelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double RefGeluTanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

template <typename T>
void CheckActivations() {
  // Transcendentals in float32 are a few ulp off the exact value; near zero crossings an
  // absolute term covers the relative error of tiny results.
  const double abs_tol = std::is_same_v<T, double> ? 1e-14 : 1e-6;
  CheckUnary<T>(
      ew::ReluOp{}, [](double x) { return x < 0 ? 0.0 : x; }, "Relu");
  CheckUnary<T>(ew::SigmoidOp{}, RefSigmoid, "Sigmoid", -30, 30, abs_tol);
  CheckUnary<T>(
      ew::TanhOp{}, [](double x) { return std::tanh(x); }, "Tanh", -6, 6, abs_tol);
  CheckUnary<T>(ew::GeluOp{}, RefGelu, "Gelu", -6, 6, abs_tol);
  CheckUnary<T>(ew::GeluTanhOp{}, RefGeluTanh, "GeluTanh", -6, 6, abs_tol);
}

TEST(CudaMath, ArithmeticFloat32) { CheckArithmetic<float>(); }
TEST(CudaMath, ArithmeticFloat64) { CheckArithmetic<double>(); }
TEST(CudaMath, ArithmeticFloat16) { CheckArithmetic<Float16>(); }
TEST(CudaMath, ArithmeticBFloat16) { CheckArithmetic<BFloat16>(); }

TEST(CudaMath, ActivationsFloat32) { CheckActivations<float>(); }
TEST(CudaMath, ActivationsFloat64) { CheckActivations<double>(); }
TEST(CudaMath, ActivationsFloat16) { CheckActivations<Float16>(); }
TEST(CudaMath, ActivationsBFloat16) { CheckActivations<BFloat16>(); }

TEST(CudaMath, Float16ResultsRoundToNearestEven) {
  // 1 + 2^-11 lies halfway between two float16 values; the even one (1.0) wins.
  const Float16 one(1.0f), tiny(std::ldexp(1.0f, -11));
  EXPECT_EQ(ApplyBinary(ew::AddOp{}, one, tiny).bits, Float16(1.0f).bits);
  // 1 + 3 * 2^-11 is halfway too; rounding goes up to the even 1 + 2^-9.
  const Float16 three_tiny(3 * std::ldexp(1.0f, -11));
  EXPECT_EQ(AsDouble(ApplyBinary(ew::AddOp{}, one, three_tiny)), 1.0 + std::ldexp(1.0, -9));
  // Overflow saturates to infinity, as float16 arithmetic on the GPU does.
  EXPECT_TRUE(std::isinf(AsDouble(ApplyBinary(ew::MulOp{}, Float16(300.0f), Float16(300.0f)))));
}

TEST(CudaMath, NaNAndInfinityPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(ApplyUnary(ew::ReluOp{}, nan)));
  EXPECT_TRUE(std::isnan(AsDouble(ApplyUnary(ew::SigmoidOp{}, Float16(nan)))));
  EXPECT_TRUE(std::isnan(AsDouble(ApplyBinary(ew::AddOp{}, BFloat16(nan), BFloat16(1.0f)))));
  EXPECT_EQ(ApplyUnary(ew::SigmoidOp{}, -inf), 0.0f);
  EXPECT_EQ(ApplyUnary(ew::SigmoidOp{}, inf), 1.0f);
  EXPECT_EQ(ApplyUnary(ew::TanhOp{}, -inf), -1.0f);
  EXPECT_EQ(ApplyBinary(ew::DivOp{}, 1.0f, 0.0f), inf);
  // Sigmoid never overflows: exp is only taken of non-positive numbers.
  EXPECT_GT(ApplyUnary(ew::SigmoidOp{}, -80.0f), 0.0f);
}

TEST(CudaMath, IntegerArithmeticWrapsAndTruncates) {
  EXPECT_EQ(ApplyBinary(ew::DivOp{}, int32_t{-7}, int32_t{2}), -3);  // toward zero
  EXPECT_EQ(ApplyBinary(ew::DivOp{}, int32_t{7}, int32_t{-2}), -3);
  EXPECT_EQ(ApplyBinary(ew::DivOp{}, int64_t{5}, int64_t{0}), 0);  // no trap
  EXPECT_EQ(ApplyBinary(ew::DivOp{}, std::numeric_limits<int32_t>::min(), int32_t{-1}),
            std::numeric_limits<int32_t>::min());  // wraps instead of trapping
  EXPECT_EQ(ApplyBinary(ew::AddOp{}, std::numeric_limits<int64_t>::max(), int64_t{1}),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ApplyBinary(ew::MulOp{}, int32_t{65536}, int32_t{65536}), 0);
  EXPECT_EQ(ApplyBinary(ew::SubOp{}, int64_t{-3}, int64_t{4}), -7);
}

TEST(CudaMath, CastFloatToInteger) {
  EXPECT_EQ((CastElement<int32_t>(2.9f)), 2);  // truncation
  EXPECT_EQ((CastElement<int32_t>(-2.9f)), -2);
  EXPECT_EQ((CastElement<int64_t>(std::numeric_limits<float>::quiet_NaN())), 0);
  EXPECT_EQ((CastElement<int64_t>(1e30f)), std::numeric_limits<int64_t>::max());  // saturates, no UB
  EXPECT_EQ((CastElement<int64_t>(-1e30)), std::numeric_limits<int64_t>::min());
  EXPECT_EQ((CastElement<uint8_t>(300.0f)), 44);  // 300 mod 256, as numpy on x86
  EXPECT_EQ((CastElement<int8_t>(Float16(-100.5f))), -100);
  EXPECT_EQ((CastElement<int16_t>(BFloat16(1000.0f))), 1000);
}

TEST(CudaMath, CastToAndFromBool) {
  EXPECT_TRUE((CastElement<bool>(std::numeric_limits<float>::quiet_NaN())));  // numpy: NaN is truthy
  EXPECT_FALSE((CastElement<bool>(-0.0f)));
  EXPECT_TRUE((CastElement<bool>(Float16(0.001f))));
  EXPECT_FALSE((CastElement<bool>(BFloat16(0.0f))));
  EXPECT_TRUE((CastElement<bool>(int64_t{-5})));
  EXPECT_FALSE((CastElement<bool>(uint8_t{0})));
  EXPECT_EQ((CastElement<float>(true)), 1.0f);
  EXPECT_EQ((CastElement<Float16>(true)).bits, Float16(1.0f).bits);
  EXPECT_EQ((CastElement<int64_t>(true)), 1);
  EXPECT_EQ((CastElement<double>(false)), 0.0);
}

TEST(CudaMath, CastBetweenFloatTypesRounds) {
  for (double v : {0.1, -3.14159, 65504.0, 1e-5, 1234.5678, -0.0}) {
    const float f = static_cast<float>(v);
    EXPECT_EQ((CastElement<Float16>(f)).bits, Float16(f).bits) << v;
    EXPECT_EQ((CastElement<BFloat16>(f)).bits, BFloat16(f).bits) << v;
    EXPECT_EQ((CastElement<float>(v)), f) << v;
    EXPECT_NEAR(AsDouble(CastElement<Float16>(v)), v, std::fabs(v) / 2048 + 1e-7) << v;
    EXPECT_NEAR(AsDouble(CastElement<BFloat16>(Float16(f))), v, std::fabs(v) / 128 + 1e-7) << v;
  }
  EXPECT_TRUE(std::isinf(AsDouble(CastElement<Float16>(1e6f))));
  EXPECT_EQ((CastElement<float>(Float16(0.5f))), 0.5f);
  EXPECT_EQ((CastElement<double>(BFloat16(-2.0f))), -2.0);
  // Integers beyond float16's exact range round to the nearest representable value.
  EXPECT_EQ(AsDouble(CastElement<Float16>(int64_t{2049})), 2048.0);
  EXPECT_EQ(AsDouble(CastElement<Float16>(int32_t{-3})), -3.0);
  EXPECT_EQ((CastElement<int32_t>(int64_t{1} << 32 | 5)), 5);  // integer narrowing wraps
  EXPECT_EQ((CastElement<uint8_t>(int8_t{-1})), 255);
}

}  // namespace
}  // namespace tob::cuda
