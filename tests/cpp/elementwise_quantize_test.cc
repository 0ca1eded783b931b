// QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear against float64 references on random
// data: per-tensor, per-axis (negative axis), blocked with a partial last block, every integer
// target (odd element counts of the packed ones), float8 with and without saturation, the
// precision attribute, float16 scales; and the named errors for bad scale / zero-point inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "low_precision_test_util.h"
#include "op_tester.h"

namespace tob {
namespace {

using testing::CodesOf;
using testing::CodesTensor;
using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

// The scale index of element `flat` of x (shape `x`): per tensor (scale has 1 value), per axis,
// or blocked along `axis`.
int64_t ScaleIndex(const Shape& x, int64_t flat, int64_t axis, int64_t block, const Shape& scale) {
  if (NumElements(scale) == 1) return 0;
  std::vector<int64_t> idx(x.size());
  for (size_t k = x.size(); k-- > 0;) {
    idx[k] = flat % x[k];
    flat /= x[k];
  }
  if (block == 0) return idx[axis];
  int64_t s = 0;
  for (size_t k = 0; k < x.size(); ++k) s = s * scale[k] + (static_cast<int64_t>(k) == axis ? idx[k] / block : idx[k]);
  return s;
}

double RoundHalfEven(double v) {
  const double f = std::floor(v), d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

struct IntTarget {
  DType type;
  int64_t lo, hi;
};

// Integer targets: y = clamp(round_half_even(x / s) + zp); x, s float32 (float32 division).
TEST(QuantizeLinear, IntegerTargetsPerAxisAndBlocked) {
  const IntTarget targets[] = {{DType::kInt8, -128, 127},  {DType::kUInt8, 0, 255}, {DType::kInt16, -32768, 32767},
                               {DType::kUInt16, 0, 65535}, {DType::kInt4, -8, 7},   {DType::kUInt4, 0, 15},
                               {DType::kInt2, -2, 1},      {DType::kUInt2, 0, 3}};
  struct Layout {
    Shape x, scale;
    int64_t axis, block;
  };
  // Per tensor; per axis on axis -2 (= 1); blocked on axis 2 with 7 = 3 + 3 + 1 (a partial block);
  // an odd element count (3 x 5 x 7 = 105).
  const Layout layouts[] = {
      {{3, 5, 7}, {}, 1, 0}, {{3, 5, 7}, {5}, -2, 0}, {{3, 5, 7}, {3, 5, 3}, 2, 3}, {{3, 5, 7}, {1, 5, 7}, 0, 4}};
  for (const IntTarget& t : targets) {
    for (const Layout& l : layouts) {
      SCOPED_TRACE(std::string(DTypeName(t.type)) + " scale " + ShapeToString(l.scale));
      const double range = static_cast<double>(t.hi - t.lo);
      Tensor x = RandomTensor<float>(l.x, -range, range, 11);
      Tensor s = RandomTensor<float>(l.scale, 0.3, 1.7, 12);
      std::vector<uint8_t> zp_codes;
      std::vector<double> zp_values;
      std::mt19937 gen(5);
      for (int64_t i = 0; i < NumElements(l.scale); ++i) {
        // Zero points at both ends of the range and between.
        const int64_t z = i % 3 == 0 ? t.lo : i % 3 == 1 ? t.hi : (t.lo + t.hi) / 2;
        zp_values.push_back(static_cast<double>(z));
      }
      Tensor zp;
      if (IsPackedDType(t.type)) {
        for (double z : zp_values) zp_codes.push_back(IntegerToCode(static_cast<int64_t>(z), DTypeBits(t.type)));
        zp = CodesTensor(t.type, zp_codes, l.scale);
      } else {
        Tensor raw = Tensor::Allocate(t.type, l.scale, CpuAllocator::Default()).value();
        for (int64_t i = 0; i < raw.numel(); ++i) {
          if (t.type == DType::kInt8) raw.data<int8_t>()[i] = static_cast<int8_t>(zp_values[i]);
          if (t.type == DType::kUInt8) raw.data<uint8_t>()[i] = static_cast<uint8_t>(zp_values[i]);
          if (t.type == DType::kInt16) raw.data<int16_t>()[i] = static_cast<int16_t>(zp_values[i]);
          if (t.type == DType::kUInt16) raw.data<uint16_t>()[i] = static_cast<uint16_t>(zp_values[i]);
        }
        zp = raw;
      }
      std::vector<double> expected(static_cast<size_t>(x.numel()));
      const std::vector<double> xv = ToDoubles(x), sv = ToDoubles(s);
      const int64_t axis = l.axis < 0 ? l.axis + static_cast<int64_t>(l.x.size()) : l.axis;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t k = ScaleIndex(l.x, i, axis, l.block, l.scale);
        const double q = static_cast<float>(static_cast<float>(xv[i]) / static_cast<float>(sv[k]));
        expected[i] = std::clamp(RoundHalfEven(q) + zp_values[k], double(t.lo), double(t.hi));
      }
      OpTester("QuantizeLinear", 25)
          .Attr("axis", Attribute::Int(l.axis))
          .Attr("block_size", Attribute::Int(l.block))
          .Input("x", x)
          .Input("s", s)
          .Input("zp", zp)
          .Output("y", l.x, expected, 0, 0)
          .Run();
      // DequantizeLinear of the result: (y - zp) * s in float32.
      auto outs = OpTester("QuantizeLinear", 25)
                      .Attr("axis", Attribute::Int(l.axis))
                      .Attr("block_size", Attribute::Int(l.block))
                      .Input("x", x)
                      .Input("s", s)
                      .Input("zp", zp)
                      .Output("y", l.x, expected)
                      .Compute();
      ASSERT_TRUE(outs.ok()) << outs.status().ToString();
      std::vector<double> deq(expected.size());
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t k = ScaleIndex(l.x, i, axis, l.block, l.scale);
        deq[i] = static_cast<float>(static_cast<float>(expected[i] - zp_values[k]) * static_cast<float>(sv[k]));
      }
      OpTester("DequantizeLinear", 25)
          .Attr("axis", Attribute::Int(l.axis))
          .Attr("block_size", Attribute::Int(l.block))
          .Input("y", outs.value()[0])
          .Input("s", s)
          .Input("zp", zp)
          .Output("x", l.x, deq, 0, 0)
          .Run();
    }
  }
}

// Every rounding tie: x / s = k + 0.5 for k around zero, with an odd zero point.
TEST(QuantizeLinear, TiesRoundHalfToEven) {
  std::vector<float> xs;
  std::vector<double> expected;
  for (int k = -6; k <= 6; ++k) {
    xs.push_back((k + 0.5f) * 2.f);  // scale 2: quotients are exact halves
    expected.push_back(std::clamp(RoundHalfEven(k + 0.5) + 3, -128.0, 127.0));
  }
  const Shape shape{static_cast<int64_t>(xs.size())};
  OpTester("QuantizeLinear", 13)
      .Input("x", Tensor::FromVector<float>(xs, shape))
      .Input("s", Tensor::FromVector<float>({2.f}, {}))
      .Input("zp", Tensor::FromVector<int8_t>({3}, {}))
      .Output("y", shape, expected, 0, 0)
      .Run();
}

// NaN to the range's low end, +-inf to its ends (onnxruntime's behaviour), saturation.
TEST(QuantizeLinear, NonFiniteAndSaturation) {
  const std::vector<float> xs{NAN, INFINITY, -INFINITY, 1e9f, -1e9f, 254.4f};
  OpTester("QuantizeLinear", 13)
      .Input("x", Tensor::FromVector<float>(xs, {6}))
      .Input("s", Tensor::FromVector<float>({1.f}, {}))
      .Input("zp", Tensor::FromVector<uint8_t>({1}, {}))
      .Output("y", {6}, {0, 255, 0, 255, 0, 255}, 0, 0)
      .Run();
}

// float8 targets: x / s rounded once, saturate or not; the float8 zero point's value is added.
TEST(QuantizeLinear, Float8TargetsSaturateOrNot) {
  const std::vector<float> xs{0.f, 1.f, -3.3f, 1e5f, -1e5f, INFINITY, NAN, 0.001f};
  const Shape shape{8};
  const struct {
    DType type;
    Float8Kind kind;
  } types[] = {{DType::kFloat8E4M3FN, Float8Kind::kE4M3FN},
               {DType::kFloat8E4M3FNUZ, Float8Kind::kE4M3FNUZ},
               {DType::kFloat8E5M2, Float8Kind::kE5M2},
               {DType::kFloat8E5M2FNUZ, Float8Kind::kE5M2FNUZ}};
  for (const auto& t : types) {
    for (int64_t saturate : {1, 0}) {
      auto outs = OpTester("QuantizeLinear", 21)
                      .Attr("saturate", Attribute::Int(saturate))
                      .Input("x", Tensor::FromVector<float>(xs, shape))
                      .Input("s", Tensor::FromVector<float>({0.5f}, {}))
                      .Input("zp", CodesTensor(t.type, {0}, {}))
                      .Output("y", shape, {})
                      .Compute();
      ASSERT_TRUE(outs.ok()) << outs.status().ToString();
      const std::vector<uint8_t> codes = CodesOf(outs.value()[0]);
      for (size_t i = 0; i < xs.size(); ++i)
        EXPECT_EQ(codes[i], DoubleToFloat8(static_cast<float>(xs[i] / 0.5f), t.kind, saturate == 1))
            << DTypeName(t.type) << " x = " << xs[i];
    }
  }
}

// float4e2m1 with a zero point and output_dtype; float16 x and scale (a float16 division); the
// precision attribute (float32 x divided in float16).
TEST(QuantizeLinear, Float4Float16AndPrecision) {
  OpTester("QuantizeLinear", 23)
      .Attr("axis", Attribute::Int(0))
      .Input("x", Tensor::FromVector<float>({0.f, 2.5f, 4.8f, 8.6f, -30.f, -20.f, 6.f, 9.f, -0.f}, {3, 3}))
      // Row 0: / 2 + 1 = 1, 2.25, 3.4; row 1: / 3 = 2.87, -10, -6.7 (saturated); row 2: / 4 - 0.5 =
      // 1, 1.75 (a tie: to the even code, 2), -0.5.
      .Input("s", Tensor::FromVector<float>({2.f, 3.f, 4.f}, {3}))
      .Input("zp", CodesTensor(DType::kFloat4E2M1, {0x2, 0x0, 0x9}, {3}))  // 1, 0, -0.5
      .Output("y", {3, 3}, {1, 2, 3, 3, -6, -6, 1, 2, -0.5}, 0, 0)
      .Run();
  // float16 x and scale: the quotient is rounded to float16 before the half-even rounding.
  Tensor xh = RandomTensor<Float16>({64}, -300, 300, 21);
  const Float16 sh(0.7f);
  std::vector<double> expected;
  for (double x : ToDoubles(xh)) {
    const float q = static_cast<float>(Float16(static_cast<float>(x) / static_cast<float>(sh)));
    expected.push_back(std::clamp(RoundHalfEven(q), -128.0, 127.0));
  }
  OpTester("QuantizeLinear", 19)
      .Input("x", xh)
      .Input("s", Tensor::FromVector<Float16>({sh}, {}))
      .Input("zp", Tensor::FromVector<int8_t>({0}, {}))
      .Output("y", {64}, expected, 0, 0)
      .Run();
  Tensor x = RandomTensor<float>({64}, -300, 300, 22);
  expected.clear();
  for (double v : ToDoubles(x)) {
    const float xh16 = static_cast<float>(Float16(static_cast<float>(v)));
    const float q = static_cast<float>(Float16(xh16 / static_cast<float>(Float16(0.7f))));
    expected.push_back(std::clamp(RoundHalfEven(q), -128.0, 127.0));
  }
  OpTester("QuantizeLinear", 23)
      .Attr("precision", Attribute::Int(static_cast<int64_t>(DType::kFloat16)))
      .Attr("output_dtype", Attribute::Int(static_cast<int64_t>(DType::kInt8)))
      .Input("x", x)
      .Input("s", Tensor::FromVector<float>({0.7f}, {}))
      .Output("y", {64}, expected, 0, 0)
      .Run();
}

// DequantizeLinear: float8 / float4 / int32 inputs, a float16 output rounded once from float32, a
// float8e8m0 scale with output_dtype.
TEST(DequantizeLinear, TypesAndOutputDtype) {
  OpTester("DequantizeLinear", 21)
      .Input("x", CodesTensor(DType::kFloat8E4M3FN, {0x00, 0x30, 0x38, 0x7E, 0xED}, {5}))  // 0 .5 1 448 -104
      .Input("s", Tensor::FromVector<float>({2.f}, {}))
      .Output("y", {5}, {0, 1, 2, 896, -208}, 0, 0)
      .Run();
  OpTester("DequantizeLinear", 13)
      .Input("x", Tensor::FromVector<int32_t>({-2147483647, 5, 16777217}, {3}))
      .Input("s", Tensor::FromVector<float>({0.5f}, {}))
      .Output("y", {3}, {-1073741824.0, 2.5, 8388608.0}, 0, 0)
      .Run();
  Tensor x = RandomTensor<int8_t>({2, 40}, -128, 127, 31, 0);
  std::vector<double> expected;
  for (double v : ToDoubles(x)) expected.push_back(static_cast<float>(Float16(static_cast<float>(v - 3) * 0.0123f)));
  OpTester("DequantizeLinear", 23)
      .Attr("output_dtype", Attribute::Int(static_cast<int64_t>(DType::kFloat16)))
      .Input("x", x)
      .Input("s", Tensor::FromVector<float>({0.0123f}, {}))
      .Input("zp", Tensor::FromVector<int8_t>({3}, {}))
      .Output("y", {2, 40}, expected, 0, 0)
      .Run();
  OpTester("DequantizeLinear", 24)
      .Attr("output_dtype", Attribute::Int(1))
      .Attr("axis", Attribute::Int(-1))
      .Input("x", CodesTensor(DType::kInt4, {0x1, 0xF, 0x7, 0x8, 0x2, 0x3}, {2, 3}))  // 1 -1 7 -8 2 3
      .Input("s", CodesTensor(DType::kFloat8E8M0, {127, 128, 125}, {3}))              // 1 2 0.25
      .Output("y", {2, 3}, {1, -2, 1.75, -8, 4, 0.75}, 0, 0)
      .Run();
}

TEST(DynamicQuantizeLinear, MatchesTheReferenceFormula) {
  Tensor x = RandomTensor<float>({3, 17}, -3.1, 7.9, 41);
  const std::vector<double> xv = ToDoubles(x);
  float lo = 0, hi = 0;
  for (double v : xv) lo = std::min(lo, static_cast<float>(v)), hi = std::max(hi, static_cast<float>(v));
  const float scale = (hi - lo) / 255.f;
  const float zp = std::rint(std::clamp(0.f - lo / scale, 0.f, 255.f));
  std::vector<double> y;
  for (double v : xv) y.push_back(std::clamp(RoundHalfEven(static_cast<float>(v) / scale) + zp, 0.0, 255.0));
  OpTester("DynamicQuantizeLinear", 11)
      .Input("x", x)
      .Output("y", {3, 17}, y, 0, 0)
      .Output("y_scale", {}, {scale}, 0, 0)
      .Output("y_zero_point", {}, {zp}, 0, 0)
      .Run();
}

std::string ErrorOf(OpTester& t) {
  auto r = t.Compute();
  return r.ok() ? std::string("(no error)") : r.status().ToString();
}

TEST(QuantizeLinear, NamedErrors) {
  Tensor x = RandomTensor<float>({2, 6}, -1, 1, 1);
  {  // per-axis scale of the wrong length
    OpTester t("QuantizeLinear", 21);
    t.Attr("axis", Attribute::Int(-1)).Input("x", x).Input("s", Tensor::FromVector<float>({1, 2, 3}, {3}));
    t.Output("y", {2, 6}, {});
    EXPECT_NE(ErrorOf(t).find("the scale has 3 values but axis -1 of the input [2, 6] has 6"), std::string::npos)
        << ErrorOf(t);
  }
  {  // blocked: block_size 4 makes 2 blocks of 6, the scale has 3
    OpTester t("QuantizeLinear", 21);
    t.Attr("axis", Attribute::Int(1)).Attr("block_size", Attribute::Int(4)).Input("x", x);
    t.Input("s", RandomTensor<float>({2, 3}, 0.5, 1, 2)).Output("y", {2, 6}, {});
    EXPECT_NE(ErrorOf(t).find("block_size 4 does not fit: 6 elements along axis 1 make 2 blocks, but the scale has 3"),
              std::string::npos)
        << ErrorOf(t);
  }
  {  // output_dtype and the zero point's type disagree
    OpTester t("QuantizeLinear", 21);
    t.Attr("output_dtype", Attribute::Int(static_cast<int64_t>(DType::kInt8))).Input("x", x);
    t.Input("s", Tensor::FromVector<float>({1}, {})).Input("zp", Tensor::FromVector<uint8_t>({1}, {}));
    t.Output("y", {2, 6}, {});
    EXPECT_NE(ErrorOf(t).find("output_dtype int8 differs from the zero point's type uint8"), std::string::npos)
        << ErrorOf(t);
  }
  {  // zero point shape differs from the scale's
    OpTester t("QuantizeLinear", 21);
    t.Attr("axis", Attribute::Int(1)).Input("x", x).Input("s", RandomTensor<float>({6}, 0.5, 1, 3));
    t.Input("zp", Tensor::FromVector<uint8_t>({1, 2}, {2})).Output("y", {2, 6}, {});
    EXPECT_NE(ErrorOf(t).find("the zero point's shape [2] differs from the scale's [6]"), std::string::npos)
        << ErrorOf(t);
  }
  {  // a type the opset does not have
    OpTester t("QuantizeLinear", 19);
    t.Input("x", x).Input("s", Tensor::FromVector<float>({1}, {})).Input("zp", CodesTensor(DType::kInt4, {1}, {}));
    t.Output("y", {2, 6}, {});
    EXPECT_NE(ErrorOf(t).find("cannot quantize to int4 at opset 19"), std::string::npos) << ErrorOf(t);
  }
  {  // DequantizeLinear: x and zero point of different types
    OpTester t("DequantizeLinear", 21);
    t.Input("x", Tensor::FromVector<int8_t>({1, 2}, {2})).Input("s", Tensor::FromVector<float>({1}, {}));
    t.Input("zp", Tensor::FromVector<uint8_t>({1}, {})).Output("y", {2}, {});
    EXPECT_NE(ErrorOf(t).find("the zero point's type uint8 differs from x's int8"), std::string::npos) << ErrorOf(t);
  }
  {  // an axis out of range
    OpTester t("DequantizeLinear", 21);
    t.Attr("axis", Attribute::Int(2)).Input("x", Tensor::FromVector<int8_t>({1, 2}, {2}));
    t.Input("s", Tensor::FromVector<float>({1, 2}, {2})).Output("y", {2}, {});
    EXPECT_NE(ErrorOf(t).find("axis 2 is out of range for the input's rank 1"), std::string::npos) << ErrorOf(t);
  }
}

}  // namespace
}  // namespace tob
