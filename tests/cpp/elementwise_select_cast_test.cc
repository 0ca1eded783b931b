// Elementwise family, selection and conversion: comparisons, logic, Where, Cast, Clip and the
// variadic ops (Min/Max/Sum/Mean) against float64 references, with broadcasting and every type.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "elementwise_test_util.h"
#include "op_tester.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;
using testing::elementwise::BinaryCase;
using testing::elementwise::BroadcastOffset;
using testing::elementwise::Ref1;
using testing::elementwise::Ref2;
using testing::elementwise::Values;

// ---------------------------------------------------------------- compare, logic, where

TEST(ElementwiseCompare, AllComparisonsWithBroadcast) {
  const std::vector<BinaryCase> cases{
      {"Equal", [](double a, double b) { return double(a == b); }},
      {"Less", [](double a, double b) { return double(a < b); }},
      {"Greater", [](double a, double b) { return double(a > b); }},
      {"LessOrEqual", [](double a, double b) { return double(a <= b); }},
      {"GreaterOrEqual", [](double a, double b) { return double(a >= b); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.op);
    // Small integers so equality actually happens.
    Tensor a = RandomTensor<int32_t>({5, 7}, -3, 3, 1, 0), b = RandomTensor<int32_t>({7}, -3, 3, 2, 0);
    OpTester(c.op, 16).Input("a", a).Input("b", b).Output("y", {5, 7}, Ref2(a, b, {5, 7}, c.ref)).Run();
    Tensor af = Values<float>({1, 2, 3, std::nan("")}), bf = Values<float>({2});
    OpTester(c.op, 16).Input("a", af).Input("b", bf).Output("y", {4}, Ref2(af, bf, {4}, c.ref)).Run();
    Tensor ah = RandomTensor<Float16>({3, 600}, -2, 2, 3), bh = RandomTensor<Float16>({3, 1}, -2, 2, 4);
    OpTester(c.op, 16).Input("a", ah).Input("b", bh).Output("y", {3, 600}, Ref2(ah, bh, {3, 600}, c.ref)).Run();
  }
}

TEST(ElementwiseLogic, AndOrXorNot) {
  Tensor a = Values<bool>({1, 1, 0, 0}, {2, 2}), b = Values<bool>({1, 0, 1, 0}, {2, 2}), s = Values<bool>({1}, {});
  OpTester("And", 7).Input("a", a).Input("b", b).Output("y", {2, 2}, {1, 0, 0, 0}).Run();
  OpTester("Or", 7).Input("a", a).Input("b", b).Output("y", {2, 2}, {1, 1, 1, 0}).Run();
  OpTester("Xor", 7).Input("a", a).Input("b", b).Output("y", {2, 2}, {0, 1, 1, 0}).Run();
  OpTester("Xor", 7).Input("a", a).Input("s", s).Output("y", {2, 2}, {0, 0, 1, 1}).Run();
  OpTester("Not", 1).Input("a", a).Output("y", {2, 2}, {0, 0, 1, 1}).Run();
  OpTester("Equal", 13).Input("a", a).Input("b", b).Output("y", {2, 2}, {1, 0, 0, 1}).Run();
}

TEST(ElementwiseWhere, ThreeWayBroadcastAllWidths) {
  Tensor c = Values<bool>({1, 0, 0, 1, 1, 0}, {2, 3});
  Tensor x = RandomTensor<float>({3}, -5, 5, 1), y = RandomTensor<float>({2, 1}, -5, 5, 2);
  std::vector<double> cv = ToDoubles(c), xv = ToDoubles(x), yv = ToDoubles(y), expected;
  for (int i = 0; i < 6; ++i) expected.push_back(cv[i] != 0 ? xv[i % 3] : yv[i / 3]);
  OpTester("Where", 16).Input("c", c).Input("x", x).Input("y", y).Output("z", {2, 3}, expected).Run();
  Tensor xi = Values<int64_t>({10, 20, 30}), yi = Values<int64_t>({-1}, {});
  OpTester("Where", 9).Input("c", c).Input("x", xi).Input("y", yi).Output("z", {2, 3}, {10, -1, -1, 10, 20, -1}).Run();
  Tensor xh = Values<Float16>({1.5, 2.5, 3.5}), yh = Values<Float16>({-1.5}, {});
  OpTester("Where", 16)
      .Input("c", c)
      .Input("x", xh)
      .Input("y", yh)
      .Output("z", {2, 3}, {1.5, -1.5, -1.5, 1.5, 2.5, -1.5})
      .Run();
  Tensor xb = Values<bool>({1, 1, 1}), yb = Values<bool>({0});
  OpTester("Where", 16).Input("c", c).Input("x", xb).Input("y", yb).Output("z", {2, 3}, cv).Run();
  // Scalar condition over a large tensor (a copy) on several threads.
  Tensor big_x = RandomTensor<double>({100, 700}, -1, 1, 3), big_y = RandomTensor<double>({100, 700}, -1, 1, 4);
  OpTester("Where", 16)
      .Input("c", Values<bool>({0}, {}))
      .Input("x", big_x)
      .Input("y", big_y)
      .Output("z", {100, 700}, ToDoubles(big_y))
      .Threads(4)
      .Run();
}

// ---------------------------------------------------------------- cast

template <typename T>
double CastRef(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (std::is_integral_v<T>)
    return static_cast<double>(static_cast<T>(static_cast<int64_t>(std::trunc(v))));
  else return static_cast<double>(static_cast<T>(static_cast<float>(v)));
}

template <typename S, typename D>
void CheckCast(const std::vector<double>& values) {
  std::vector<double> src_vals, expected;
  for (double v : values) src_vals.push_back(CastRef<S>(std::is_unsigned_v<S> ? std::fabs(v) : v));
  for (double v : src_vals) expected.push_back(CastRef<D>(v));
  SCOPED_TRACE(std::string(DTypeName(DTypeOf<S>())) + " -> " + DTypeName(DTypeOf<D>()));
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(static_cast<int64_t>(DTypeOf<D>())))
      .Input("x", Values<S>(src_vals))
      .Output("y", {static_cast<int64_t>(values.size())}, expected, 0, 0)
      .Run();
}

TEST(ElementwiseCast, EveryPairOfSupportedTypes) {
  const std::vector<double> values{0, 1, -1, 2.75, -3.5, 100.25, 0.3, -200.5, 30000};
  for (DType s : AllTypes())
    for (DType d : AllTypes())
      ew::Dispatch(ew::AllList{}, s, [&]<typename S>() {
        ew::Dispatch(ew::AllList{}, d, [&]<typename D>() { CheckCast<S, D>(values); });
      });
}

TEST(ElementwiseCast, FloatToIntTruncatesAndCastLikeFollowsTarget) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  // NaN and out-of-range values are implementation-defined in ONNX; here they must not crash
  // and give a defined answer (0 and saturation).
  OpTester("Cast", 19)
      .Attr("to", Attribute::Int(6))
      .Input("x", Values<float>({2.9, -2.9, nan, inf, -1e20}))
      .Output("y", {5}, {2, -2, 0, -1, 0})
      .Run();
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(9))
      .Input("x", Values<float>({0.0, -0.0, 0.1, nan}))
      .Output("y", {4}, {0, 0, 1, 1})
      .Run();
  OpTester("CastLike", 15)
      .Input("x", Values<double>({1.5, -7.25}))
      .Input("like", Values<Float16>({0}))
      .Output("y", {2}, {1.5, -7.25})
      .Run();
  Tensor big = RandomTensor<float>({250, 401}, -100, 100, 3);
  std::vector<double> expected;
  for (double v : ToDoubles(big)) expected.push_back(static_cast<float>(Float16(static_cast<float>(v))));
  OpTester("Cast", 13)
      .Attr("to", Attribute::Int(10))
      .Input("x", big)
      .Output("y", {250, 401}, expected, 0, 0)
      .Threads(4)
      .Run();
  auto bad = OpTester("Cast", 13).Attr("to", Attribute::Int(17)).Input("x", big).Output("y", {250, 401}, {}).Compute();
  EXPECT_FALSE(bad.ok());
}

TEST(ElementwiseBitCast, ReinterpretsBytesAndRefusesOtherWidths) {
  // float32 bits of 1.0f and -2.0f as int32; int16 -1 as uint16 65535.
  OpTester("BitCast", 26)
      .Attr("to", Attribute::Int(6))
      .Input("x", Values<float>({1.0, -2.0}))
      .Output("y", {2}, {1065353216.0, -1073741824.0}, 0, 0)
      .Run();
  OpTester("BitCast", 26)
      .Attr("to", Attribute::Int(4))
      .Input("x", Values<int16_t>({-1, 7}))
      .Output("y", {2}, {65535, 7}, 0, 0)
      .Run();
  auto bad = OpTester("BitCast", 26)
                 .Attr("to", Attribute::Int(7))
                 .Input("x", Values<float>({1.0}))
                 .Output("y", {1}, {})
                 .Compute();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("float32 is 32 bits, 'to' = int64 is 64"), std::string::npos)
      << bad.status().message();
}

// ---------------------------------------------------------------- clip and variadic

TEST(ElementwiseClip, AttributesInputsAndTypes) {
  Tensor x = RandomTensor<float>({6, 50}, -5, 5, 1);
  auto clip = [](double lo, double hi) { return [lo, hi](double v) { return std::min(std::max(v, lo), hi); }; };
  OpTester("Clip", 6)
      .Attr("min", Attribute::Float(-1))
      .Attr("max", Attribute::Float(2))
      .Input("x", x)
      .Output("y", {6, 50}, Ref1(x, clip(-1, 2)))
      .Run();
  OpTester("Clip", 6)
      .Attr("max", Attribute::Float(0.5))
      .Input("x", x)
      .Output("y", {6, 50}, Ref1(x, clip(-1e30, 0.5)))
      .Run();
  OpTester("Clip", 13)
      .Input("x", x)
      .Input("lo", Values<float>({-0.5}, {}))
      .Input("hi", Values<float>({1.5}, {}))
      .Output("y", {6, 50}, Ref1(x, clip(-0.5, 1.5)))
      .Run();
  OpTester("Clip", 13)
      .Input("x", x)
      .Input("", Tensor())
      .Input("hi", Values<float>({1.5}, {}))
      .Output("y", {6, 50}, Ref1(x, clip(-1e30, 1.5)))
      .Run();
  OpTester("Clip", 13).Input("x", x).Output("y", {6, 50}, ToDoubles(x)).Run();
  // min > max: everything becomes max; NaN passes through.
  OpTester("Clip", 13)
      .Input("x", Values<float>({-3, 0, 3, std::nan("")}))
      .Input("lo", Values<float>({2}, {}))
      .Input("hi", Values<float>({1}, {}))
      .Output("y", {4}, {1, 1, 1, std::nan("")})
      .Run();
  OpTester("Clip", 12)
      .Input("x", Values<int64_t>({-9, 4, 12}))
      .Input("lo", Values<int64_t>({0}, {}))
      .Input("hi", Values<int64_t>({10}, {}))
      .Output("y", {3}, {0, 4, 10})
      .Run();
  Tensor xh = RandomTensor<BFloat16>({600}, -3, 3, 2);
  OpTester("Clip", 13)
      .Input("x", xh)
      .Input("lo", Values<BFloat16>({-1}, {}))
      .Input("hi", Values<BFloat16>({1}, {}))
      .Output("y", {600}, Ref1(xh, clip(-1, 1)))
      .Run();
  auto bad = OpTester("Clip", 13).Input("x", x).Input("lo", Values<float>({0, 1})).Output("y", {6, 50}, {}).Compute();
  EXPECT_FALSE(bad.ok());
}

TEST(ElementwiseVariadic, MinMaxSumMeanBroadcast) {
  Tensor a = RandomTensor<float>({2, 1, 5}, -3, 3, 1), b = RandomTensor<float>({4, 1}, -3, 3, 2);
  Tensor c = RandomTensor<float>({5}, -3, 3, 3);
  Shape out{2, 4, 5};
  std::vector<double> av = ToDoubles(a), bv = ToDoubles(b), cv = ToDoubles(c);
  auto ref = [&](const std::function<double(double, double, double)>& f) {
    std::vector<double> r;
    for (int64_t i = 0; i < 40; ++i)
      r.push_back(f(av[BroadcastOffset(a.shape(), out, i)], bv[BroadcastOffset(b.shape(), out, i)],
                    cv[BroadcastOffset(c.shape(), out, i)]));
    return r;
  };
  auto run = [&](const char* op, int opset, const std::function<double(double, double, double)>& f) {
    OpTester(op, opset).Input("a", a).Input("b", b).Input("c", c).Output("y", out, ref(f)).Run();
  };
  run("Min", 13, [](double x, double y, double z) { return std::min({x, y, z}); });
  run("Max", 8, [](double x, double y, double z) { return std::max({x, y, z}); });
  run("Sum", 13, [](double x, double y, double z) { return x + y + z; });
  run("Mean", 13, [](double x, double y, double z) { return (x + y + z) / 3; });
  OpTester("Sum", 13).Input("a", a).Output("y", {2, 1, 5}, av).Run();
  OpTester("Mean", 13)
      .Input("a", a)
      .Input("b", b)
      .Output("y", out,
              [&] {
                std::vector<double> r;
                for (int64_t i = 0; i < 40; ++i)
                  r.push_back((av[BroadcastOffset(a.shape(), out, i)] + bv[BroadcastOffset(b.shape(), out, i)]) / 2);
                return r;
              }())
      .Run();
  OpTester("Max", 13)
      .Input("a", Values<uint8_t>({3, 200}))
      .Input("b", Values<uint8_t>({100}))
      .Output("y", {2}, {100, 200})
      .Run();
  OpTester("Min", 13)
      .Input("a", Values<float>({1, std::nan("")}))
      .Input("b", Values<float>({std::nan(""), 1}))
      .Output("y", {2}, {std::nan(""), std::nan("")})
      .Run();
  Tensor ah = RandomTensor<Float16>({3, 300}, -3, 3, 4), bh = RandomTensor<Float16>({300}, -3, 3, 5);
  OpTester("Mean", 13)
      .Input("a", ah)
      .Input("b", bh)
      .Output("y", {3, 300}, Ref2(ah, bh, {3, 300}, [](double x, double y) { return (x + y) / 2; }), 1e-3, 1e-3)
      .Run();
  auto bad = OpTester("Sum", 13).Input("a", a).Input("b", RandomTensor<float>({3})).Output("y", out, {}).Compute();
  EXPECT_FALSE(bad.ok());
}

}  // namespace
}  // namespace tob
