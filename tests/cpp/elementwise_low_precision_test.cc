// The low-precision types: core/low_precision.h's conversions against references computed from
// the formats' definitions (nearest value by search, ties to the even code), every tie and every
// special value with and without saturation, float8e8m0's three rounding modes, the packed
// layout with odd element counts, and Cast / CastLike through the kernel registry.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "low_precision_test_util.h"
#include "op_tester.h"

namespace tob {
namespace {

using testing::CodesOf;
using testing::CodesTensor;
using testing::FiniteMagnitudes;
using testing::FormatSpec;
using testing::NearestMagnitude;
using testing::OpTester;
using testing::SpecOf;
using testing::ValueOfMagnitude;

constexpr Float8Kind kKinds[] = {Float8Kind::kE4M3FN, Float8Kind::kE4M3FNUZ, Float8Kind::kE5M2, Float8Kind::kE5M2FNUZ};
const double kInf = std::numeric_limits<double>::infinity();

// onnx's Cast tables for float8: what x becomes, by search on the format's values.
uint8_t ReferenceFloat8(double x, Float8Kind kind, bool saturate) {
  const FormatSpec f = SpecOf(kind);
  const bool neg = std::signbit(x);
  const uint8_t sign = neg ? 0x80 : 0;
  const uint32_t top = FiniteMagnitudes(f).back();
  const uint8_t nan = f.fnuz ? 0x80 : static_cast<uint8_t>(sign | (f.ieee_inf ? 0x7E : 0x7F));
  const uint8_t overflow = f.ieee_inf ? static_cast<uint8_t>(sign | 0x7C) : nan;
  if (std::isnan(x)) return nan;
  if (std::isinf(x)) return saturate ? static_cast<uint8_t>(sign | top) : overflow;
  bool over = false;
  const uint32_t m = NearestMagnitude(f, std::fabs(x), &over);
  if (over) return saturate ? static_cast<uint8_t>(sign | top) : overflow;
  if (m == 0) return f.fnuz ? 0 : sign;
  return static_cast<uint8_t>(sign | m);
}

// Every float8 value, every midpoint between neighbours (the ties), points just beside them, the
// overflow boundary, +-0, +-inf, NaN: the encoder against the search, both saturation modes.
TEST(LowPrecisionConvert, Float8EveryTieAndSpecialValue) {
  for (Float8Kind kind : kKinds) {
    SCOPED_TRACE(static_cast<int>(kind));
    const FormatSpec f = SpecOf(kind);
    const std::vector<uint32_t> mags = FiniteMagnitudes(f);
    std::vector<double> xs{0.0, -0.0, kInf, -kInf, std::nan(""), 1e30, -1e30, 1e-30, -1e-30};
    for (size_t i = 0; i < mags.size(); ++i) {
      const double v = ValueOfMagnitude(f, mags[i]);
      const double next = i + 1 < mags.size() ? ValueOfMagnitude(f, mags[i + 1])
                                              : 2 * v - ValueOfMagnitude(f, mags[i - 1]);  // the overflow point
      const double mid = (v + next) / 2;
      for (double x : {v, mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf), next * 1.0000001})
        for (double s : {1.0, -1.0}) xs.push_back(s * x);
    }
    for (bool saturate : {true, false})
      for (double x : xs)
        ASSERT_EQ(DoubleToFloat8(x, kind, saturate), ReferenceFloat8(x, kind, saturate))
            << "x = " << x << " saturate " << saturate;
  }
}

TEST(LowPrecisionConvert, Float8DecodeMatchesDefinition) {
  for (Float8Kind kind : kKinds) {
    const FormatSpec f = SpecOf(kind);
    for (int code = 0; code < 256; ++code) {
      const double mag = ValueOfMagnitude(f, code & 0x7F);
      double expected = (code & 0x80) ? -mag : mag;
      if (f.fnuz && code == 0x80) expected = std::nan("");
      const float got = Float8ToFloat(static_cast<uint8_t>(code), kind);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << code;
      } else {
        EXPECT_EQ(static_cast<double>(got), expected) << "kind " << static_cast<int>(kind) << " code " << code;
        EXPECT_EQ(std::signbit(got), std::signbit(expected)) << code;
      }
    }
  }
}

// The spec's special rows, spelled out (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ).
TEST(LowPrecisionConvert, Float8SpecTables) {
  const uint8_t sat_inf[] = {0x7E, 0x7F, 0x7B, 0x7F};        // +inf, saturate: +max
  const uint8_t nosat_inf[] = {0x7F, 0x80, 0x7C, 0x80};      // +inf, no saturate: NaN / inf
  const uint8_t nosat_neg_inf[] = {0xFF, 0x80, 0xFC, 0x80};  // -inf, no saturate
  const uint8_t neg_zero[] = {0x80, 0x00, 0x80, 0x00};       // -0: the FNUZ types have none
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(DoubleToFloat8(kInf, kKinds[k], true), sat_inf[k]);
    EXPECT_EQ(DoubleToFloat8(-kInf, kKinds[k], true), sat_inf[k] | 0x80);
    EXPECT_EQ(DoubleToFloat8(kInf, kKinds[k], false), nosat_inf[k]);
    EXPECT_EQ(DoubleToFloat8(-kInf, kKinds[k], false), nosat_neg_inf[k]);
    EXPECT_EQ(DoubleToFloat8(-0.0, kKinds[k], true), neg_zero[k]);
    EXPECT_EQ(DoubleToFloat8(-1e-30, kKinds[k], false), neg_zero[k]);
    EXPECT_TRUE(std::isnan(Float8ToFloat(DoubleToFloat8(std::nan(""), kKinds[k], true), kKinds[k])));
  }
  EXPECT_EQ(DoubleToFloat8(464.0, Float8Kind::kE4M3FN, false), 0x7E);  // a tie to the even 448, not NaN
  EXPECT_EQ(DoubleToFloat8(465.0, Float8Kind::kE4M3FN, false), 0x7F);  // past the tie: NaN
  EXPECT_EQ(DoubleToFloat8(61440.0, Float8Kind::kE5M2, false), 0x7C);  // tie above 57344 (odd): inf
}

TEST(LowPrecisionConvert, Float4E2M1EveryTieAndSpecialValue) {
  const FormatSpec f = testing::Float4Spec();
  const std::vector<uint32_t> mags = FiniteMagnitudes(f);
  ASSERT_EQ(mags.size(), 8u);
  std::vector<double> xs{0.0, -0.0, 100.0, -100.0, 6.0, 7.0, 1e-9};
  for (size_t i = 0; i + 1 < mags.size(); ++i) {
    const double a = ValueOfMagnitude(f, mags[i]), b = ValueOfMagnitude(f, mags[i + 1]), mid = (a + b) / 2;
    for (double x : {a, mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)})
      for (double s : {1.0, -1.0}) xs.push_back(s * x);
  }
  for (double x : xs) {
    bool over = false;
    uint32_t m = NearestMagnitude(f, std::fabs(x), &over);
    if (over) m = 7;  // always saturating
    const uint8_t expected = static_cast<uint8_t>((std::signbit(x) ? 0x8 : 0) | m);
    EXPECT_EQ(DoubleToFloat4E2M1(x), expected) << x;
    EXPECT_EQ(static_cast<double>(Float4E2M1ToFloat(expected)), (std::signbit(x) ? -1 : 1) * ValueOfMagnitude(f, m));
  }
  EXPECT_EQ(DoubleToFloat4E2M1(kInf), 0x7);
  EXPECT_EQ(DoubleToFloat4E2M1(-kInf), 0xF);
  // No NaN in float4e2m1: onnx's reference (ml_dtypes) gives NaN the bits of -0 and -NaN those of +0.
  EXPECT_EQ(DoubleToFloat4E2M1(std::nan("")), 0x8);
  EXPECT_EQ(DoubleToFloat4E2M1(-std::nan("")), 0x0);
}

// float8e8m0 from its definition: 2^e, e = the float32 exponent field; up = the least power of
// two >= x, down = the greatest <= x, nearest = onnx's guard/round/sticky rule.
TEST(LowPrecisionConvert, Float8E8M0RoundingModes) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7FFFFFFF);
  for (int i = 0; i < 20000; ++i) {
    const uint32_t b = i < 64 ? (0x7F000000u + static_cast<uint32_t>(i) * 0x20000u) : bits(gen);
    float x;
    std::memcpy(&x, &b, 4);
    if (std::isnan(x) || std::isinf(x)) {
      EXPECT_EQ(FloatToFloat8E8M0(x, true, E8M0Rounding::kUp), 0xFF);
      continue;
    }
    const uint32_t e = b >> 23, frac = b & 0x7FFFFF;
    EXPECT_EQ(FloatToFloat8E8M0(x, false, E8M0Rounding::kDown), e);
    const uint32_t up = e + (frac != 0 ? 1 : 0);
    EXPECT_EQ(FloatToFloat8E8M0(x, false, E8M0Rounding::kUp), up);
    EXPECT_EQ(FloatToFloat8E8M0(x, true, E8M0Rounding::kUp), std::min<uint32_t>(up, 0xFE));
    const bool g = frac & 0x400000, r = frac & 0x200000, s = frac & 0x1FFFFF;
    const uint32_t nearest = e + ((g && (r || s || e > 0)) ? 1 : 0);
    EXPECT_EQ(FloatToFloat8E8M0(x, false, E8M0Rounding::kNearest), nearest);
    if (e > 0 && e < 0xFF) {
      EXPECT_EQ(static_cast<double>(Float8E8M0ToFloat(static_cast<uint8_t>(e))),
                std::ldexp(1.0, static_cast<int>(e) - 127));
    }
  }
  EXPECT_EQ(FloatToFloat8E8M0(std::ldexp(1.5f, 127), true, E8M0Rounding::kUp), 0xFE);   // saturates at 2^127
  EXPECT_EQ(FloatToFloat8E8M0(std::ldexp(1.5f, 127), false, E8M0Rounding::kUp), 0xFF);  // NaN without
  EXPECT_TRUE(std::isnan(Float8E8M0ToFloat(0xFF)));
  EXPECT_EQ(Float8E8M0ToFloat(0), std::ldexp(1.0f, -127));
}

// Cast through the kernel: float32 -> every float8 kind on values, ties, specials, with and
// without saturate, over more than one block and two threads; and back exactly.
TEST(LowPrecisionCast, FloatToFloat8AndBack) {
  const DType types[] = {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ};
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.f, 300.f);
  std::vector<float> xs{0.f, -0.f, INFINITY, -INFINITY, NAN, 464.f, 1e6f, -1e6f, 1e-7f};
  while (xs.size() < 1500) xs.push_back(dist(gen));
  const Shape shape{static_cast<int64_t>(xs.size())};
  for (int k = 0; k < 4; ++k) {
    for (int64_t saturate : {1, 0}) {
      SCOPED_TRACE(DTypeName(types[k]));
      auto outs = OpTester("Cast", 19)
                      .Attr("to", Attribute::Int(static_cast<int64_t>(types[k])))
                      .Attr("saturate", Attribute::Int(saturate))
                      .Input("x", Tensor::FromVector<float>(xs, shape))
                      .Output("y", shape, {})
                      .Compute();
      ASSERT_TRUE(outs.ok()) << outs.status().ToString();
      const std::vector<uint8_t> codes = CodesOf(outs.value()[0]);
      for (size_t i = 0; i < xs.size(); ++i)
        ASSERT_EQ(codes[i], ReferenceFloat8(xs[i], kKinds[k], saturate == 1)) << xs[i];
      // Back to float32 and float16: exact (float16 rounds the float8 value once, exactly).
      std::vector<double> back;
      for (uint8_t c : codes) back.push_back(Float8ToFloat(c, kKinds[k]));
      OpTester("Cast", 19)
          .Attr("to", Attribute::Int(1))
          .Input("x", outs.value()[0])
          .Output("y", shape, back, 0, 0)
          .Run();
    }
  }
}

// The packed types with odd element counts: Cast in and out, the codes and the values exact.
TEST(LowPrecisionCast, PackedTypesOddCounts) {
  struct Case {
    DType type;
    int64_t n;
  };
  for (Case c : {Case{DType::kInt4, 7}, Case{DType::kUInt4, 9}, Case{DType::kInt2, 5}, Case{DType::kUInt2, 3},
                 Case{DType::kFloat4E2M1, 11}, Case{DType::kInt4, 1}, Case{DType::kUInt2, 1030}}) {
    SCOPED_TRACE(DTypeName(c.type));
    std::vector<float> xs;
    std::vector<double> expected;
    for (int64_t i = 0; i < c.n; ++i) {
      const float x = static_cast<float>((i * 37) % 41) * 0.55f - 11.3f;
      xs.push_back(x);
      double e;
      const int bits = DTypeBits(c.type);
      if (c.type == DType::kFloat4E2M1) {
        e = Float4E2M1ToFloat(DoubleToFloat4E2M1(x));
      } else {
        // Truncate toward zero, keep the low bits, read back signed or not.
        const int64_t t = static_cast<int64_t>(std::trunc(x));
        const uint8_t code = static_cast<uint8_t>(static_cast<uint64_t>(t) & ((1u << bits) - 1));
        const bool is_signed = c.type == DType::kInt4 || c.type == DType::kInt2;
        e = is_signed && (code >> (bits - 1)) ? code - (1 << bits) : code;
      }
      expected.push_back(e);
    }
    const Shape shape{c.n};
    auto outs = OpTester("Cast", 25)
                    .Attr("to", Attribute::Int(static_cast<int64_t>(c.type)))
                    .Input("x", Tensor::FromVector<float>(xs, shape))
                    .Output("y", shape, expected, 0, 0)
                    .Compute();
    ASSERT_TRUE(outs.ok()) << outs.status().ToString();
    const Tensor& packed = outs.value()[0];
    EXPECT_EQ(packed.nbytes(), static_cast<size_t>((c.n * DTypeBits(c.type) + 7) / 8));
    testing::ExpectClose(packed, shape, expected, 0, 0);
    // Back to float32 and to int8 from the packed tensor.
    OpTester("Cast", 25).Attr("to", Attribute::Int(1)).Input("x", packed).Output("y", shape, expected, 0, 0).Run();
    if (c.type != DType::kFloat4E2M1)
      OpTester("Cast", 25).Attr("to", Attribute::Int(3)).Input("x", packed).Output("y", shape, expected, 0, 0).Run();
  }
}

// Between two low-precision types and from integers: int4 -> float8, float8 -> uint4, int64 -> int2.
TEST(LowPrecisionCast, BetweenLowPrecisionTypes) {
  const std::vector<uint8_t> int4_codes{0x0, 0x7, 0x8, 0xF, 0x3, 0x9, 0x1};  // 0 7 -8 -1 3 -7 1
  Tensor i4 = CodesTensor(DType::kInt4, int4_codes, {7});
  OpTester("Cast", 21)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kFloat8E5M2)))
      .Input("x", i4)
      .Output("y", {7}, {0, 7, -8, -1, 3, -7, 1}, 0, 0)
      .Run();
  Tensor f8 = CodesTensor(DType::kFloat8E4M3FN, {0x38, 0x52, 0xC4, 0x7E, 0x7F}, {5});  // 1, 10, -3, 448, NaN
  OpTester("Cast", 21)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kUInt4)))
      .Input("x", f8)
      .Output("y", {5}, {1, 10, 13, 0, 0}, 0, 0)  // -3 wraps to 13; 448 = 0x1C0 keeps 0; NaN gives 0
      .Run();
  OpTester("Cast", 25)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kInt2)))
      .Input("x", Tensor::FromVector<int64_t>({-3, -2, -1, 0, 1, 2, 3, 1000001}, {8}))
      .Output("y", {8}, {1, -2, -1, 0, 1, -2, -1, 1}, 0, 0)
      .Run();
}

TEST(LowPrecisionCast, Float8E8M0RoundModeAttribute) {
  const std::vector<float> xs{0.124f, 0.25f, 1.1f, 3.0f, 1.5f, 6.0f};
  const Shape shape{6};
  auto run = [&](const char* mode, int64_t saturate, std::vector<double> expected) {
    OpTester("Cast", 24)
        .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kFloat8E8M0)))
        .Attr("saturate", Attribute::Int(saturate))
        .Attr("round_mode", Attribute::String(mode))
        .Input("x", Tensor::FromVector<float>(xs, shape))
        .Output("y", shape, expected, 0, 0)
        .Run();
  };
  run("up", 1, {0.125, 0.25, 2, 4, 2, 8});
  run("down", 1, {0.0625, 0.25, 1, 2, 1, 4});
  run("nearest", 1, {0.125, 0.25, 1, 4, 2, 8});  // 1.5 and 3 and 6 are ties: up (onnx's rule)
}

TEST(LowPrecisionCast, NamedErrors) {
  auto st = OpTester("Cast", 21)
                .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kFloat4E2M1)))
                .Input("x", Tensor::FromVector<float>({1.f}, {1}))
                .Output("y", {1}, {1})
                .Compute();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().ToString().find("float4e2m1 is not a type of opset 21"), std::string::npos)
      << st.status().ToString();
  st = OpTester("Cast", 24)
           .Attr("to", Attribute::Int(static_cast<int64_t>(DType::kFloat8E8M0)))
           .Attr("round_mode", Attribute::String("sideways"))
           .Input("x", Tensor::FromVector<float>({1.f}, {1}))
           .Output("y", {1}, {1})
           .Compute();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().ToString().find("round_mode"), std::string::npos) << st.status().ToString();
}

// A packed tensor's bytes are its element count times the width, rounded up to whole bytes.
TEST(LowPrecisionCast, TensorBytesRoundUp) {
  EXPECT_EQ(DTypeStorageBytes(DType::kInt4, 7), 4u);
  EXPECT_EQ(DTypeStorageBytes(DType::kUInt2, 5), 2u);
  EXPECT_EQ(DTypeStorageBytes(DType::kFloat8E5M2, 5), 5u);
  EXPECT_EQ(DTypeStorageBytes(DType::kFloat4E2M1, 0), 0u);
  Tensor t = CodesTensor(DType::kInt2, {1, 2, 3, 0, 1}, {5});
  EXPECT_EQ(t.nbytes(), 2u);
  EXPECT_EQ(CodesOf(t), (std::vector<uint8_t>{1, 2, 3, 0, 1}));
  EXPECT_EQ(t.ElementAsDouble(1), -2.0);
}

}  // namespace
}  // namespace tob
