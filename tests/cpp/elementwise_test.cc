// Elementwise family, arithmetic: binary and unary ops and activations against a float64 reference
// on random non-zero data, the broadcasting fast paths, 16-bit types, integer semantics, the
// vectorised transcendental approximations, and malformed inputs. Compare/logic/where, Cast, Clip
// and the variadic ops are in elementwise_select_cast_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "elementwise_test_util.h"
#include "math/elementwise_math.h"
#include "op_tester.h"
#include "providers/cpu/elementwise/broadcast.h"
#include "providers/cpu/elementwise/elementwise_loops.h"
#include "providers/cpu/elementwise/vector_math.h"
#include "providers/cpu/elementwise/vector_math_isa.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;
using testing::elementwise::BinaryCase;
using testing::elementwise::Fn1;
using testing::elementwise::Fn2;
using testing::elementwise::Ref1;
using testing::elementwise::Ref2;
using testing::elementwise::Values;

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
// 0.5 x (1 + tanh(z)) written as x sigmoid(2z), which keeps the negative tail exact in double.
double GeluTanh(double x) { return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// ---------------------------------------------------------------- binary arithmetic

const std::vector<BinaryCase>& ArithmeticCases() {
  static const std::vector<BinaryCase> cases{
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
  };
  return cases;
}

void RunBinaryFloat(const char* op, const Fn2& ref, const Shape& sa, const Shape& sb, const Shape& out,
                    int threads = 2) {
  Tensor a = RandomTensor<float>(sa, -3, 3, 11);
  Tensor b = RandomTensor<float>(sb, -3, 3, 22);
  OpTester(op, 14)
      .Input("a", a)
      .Input("b", b)
      .Output("y", out, Ref2(a, b, out, ref), 1e-6, 1e-6)
      .Threads(threads)
      .Run();
}

TEST(ElementwiseBinary, SameShapeAndEveryBroadcastPath) {
  for (const auto& c : ArithmeticCases()) {
    SCOPED_TRACE(c.op);
    RunBinaryFloat(c.op, c.ref, {3, 5}, {3, 5}, {3, 5});                    // same shape
    RunBinaryFloat(c.op, c.ref, {4, 7}, {}, {4, 7});                        // scalar right
    RunBinaryFloat(c.op, c.ref, {1}, {4, 7}, {4, 7});                       // scalar left
    RunBinaryFloat(c.op, c.ref, {6, 9}, {9}, {6, 9});                       // row vector
    RunBinaryFloat(c.op, c.ref, {6, 1}, {6, 9}, {6, 9});                    // column vector
    RunBinaryFloat(c.op, c.ref, {2, 3, 4, 5}, {1, 3, 1, 1}, {2, 3, 4, 5});  // per-channel bias
    RunBinaryFloat(c.op, c.ref, {2, 1, 4, 1}, {3, 1, 5}, {2, 3, 4, 5});     // both sides broadcast
    RunBinaryFloat(c.op, c.ref, {0, 3}, {3}, {0, 3});                       // empty
  }
}

TEST(ElementwiseBinary, LargeTensorsSplitAcrossThreads) {
  // Chunk boundaries fall inside rows, so the span iterator must resume mid-row correctly.
  for (const auto& c : ArithmeticCases()) {
    SCOPED_TRACE(c.op);
    RunBinaryFloat(c.op, c.ref, {300, 333}, {300, 333}, {300, 333}, 4);
    RunBinaryFloat(c.op, c.ref, {299, 333}, {333}, {299, 333}, 3);
    RunBinaryFloat(c.op, c.ref, {7, 1, 97, 1}, {1, 51, 1, 29}, {7, 51, 97, 29}, 4);
  }
}

TEST(ElementwiseBinary, Float64AndSixteenBitTypes) {
  Tensor a64 = RandomTensor<double>({5, 6}, -3, 3, 1), b64 = RandomTensor<double>({6}, -3, 3, 2);
  OpTester("Mul", 14)
      .Input("a", a64)
      .Input("b", b64)
      .Output("y", {5, 6}, Ref2(a64, b64, {5, 6}, [](double a, double b) { return a * b; }), 1e-14, 0)
      .Run();
  for (const auto& c : ArithmeticCases()) {
    SCOPED_TRACE(c.op);
    Tensor ah = RandomTensor<Float16>({3, 700}, -3, 3, 3), bh = RandomTensor<Float16>({700}, -3, 3, 4);
    OpTester(c.op, 14)
        .Input("a", ah)
        .Input("b", bh)
        .Output("y", {3, 700}, Ref2(ah, bh, {3, 700}, c.ref), 1e-3, 1e-3)
        .Run();
    Tensor ab = RandomTensor<BFloat16>({3, 700}, -3, 3, 5), bb = RandomTensor<BFloat16>({3, 1}, -3, 3, 6);
    OpTester(c.op, 14)
        .Input("a", ab)
        .Input("b", bb)
        .Output("y", {3, 700}, Ref2(ab, bb, {3, 700}, c.ref), 8e-3, 8e-3)
        .Run();
  }
}

TEST(ElementwiseBinary, IntegerSemantics) {
  Tensor a = Values<int32_t>({7, -7, 7, -7, 5, INT32_MIN, 9, 0});
  Tensor b = Values<int32_t>({2, 2, -2, -2, 0, -1, 3, 4});
  // Division truncates toward zero; x / 0 is 0 and INT_MIN / -1 wraps instead of trapping.
  OpTester("Div", 14).Input("a", a).Input("b", b).Output("y", {8}, {3, -3, -3, 3, 0, INT32_MIN, 3, 0}).Run();
  // Mod (fmod=0): sign of the divisor; fmod=1: sign of the dividend.
  OpTester("Mod", 13).Input("a", a).Input("b", b).Output("y", {8}, {1, 1, -1, -1, 0, 0, 0, 0}).Run();
  OpTester("Mod", 13)
      .Attr("fmod", Attribute::Int(1))
      .Input("a", a)
      .Input("b", b)
      .Output("y", {8}, {1, -1, 1, -1, 0, 0, 0, 0})
      .Run();
  // Wrapping arithmetic on narrow types.
  OpTester("Add", 14)
      .Input("a", Values<int8_t>({127, -128, 5}))
      .Input("b", Values<int8_t>({1, -1, 3}))
      .Output("y", {3}, {-128, 127, 8})
      .Run();
  OpTester("Mul", 14)
      .Input("a", Values<uint16_t>({65535, 300}))
      .Input("b", Values<uint16_t>({65535, 300}))
      .Output("y", {2}, {1, 24464})
      .Run();
  OpTester("Sub", 14)
      .Input("a", Values<uint8_t>({3, 10}))
      .Input("b", Values<uint8_t>({5, 1}))
      .Output("y", {2}, {254, 9})
      .Run();
  Tensor a64 = RandomTensor<int64_t>({4, 50}, -1000, 1000, 9), b64 = RandomTensor<int64_t>({50}, -30, 30, 10, 1);
  OpTester("Div", 14)
      .Input("a", a64)
      .Input("b", b64)
      .Output("y", {4, 50}, Ref2(a64, b64, {4, 50}, [](double x, double y) { return std::trunc(x / y); }))
      .Run();
}

TEST(ElementwiseBinary, FloatMod) {
  Tensor a = RandomTensor<float>({40}, -10, 10, 3), b = RandomTensor<float>({40}, -3, 3, 4);
  OpTester("Mod", 13)
      .Attr("fmod", Attribute::Int(1))
      .Input("a", a)
      .Input("b", b)
      .Output("y", {40}, Ref2(a, b, {40}, [](double x, double y) { return std::fmod(x, y); }), 1e-5, 1e-5)
      .Run();
  OpTester("Mod", 13)
      .Input("a", a)
      .Input("b", b)
      .Output("y", {40}, Ref2(a, b, {40}, [](double x, double y) { return x - std::floor(x / y) * y; }), 1e-5, 1e-5)
      .Run();
}

TEST(ElementwiseBinary, PowMixedTypes) {
  Tensor base = RandomTensor<float>({3, 4}, 0.5, 3, 1), expo = RandomTensor<float>({4}, -2, 2, 2);
  OpTester("Pow", 15)
      .Input("a", base)
      .Input("b", expo)
      .Output("y", {3, 4}, Ref2(base, expo, {3, 4}, [](double x, double y) { return std::pow(x, y); }), 1e-5)
      .Run();
  OpTester("Pow", 15)
      .Input("a", Values<float>({1.5, -2, 3}))
      .Input("b", Values<int64_t>({2, 3, -1}))
      .Output("y", {3}, {2.25, -8, 1.0 / 3})
      .Run();
  OpTester("Pow", 15)
      .Input("a", Values<int32_t>({2, -3, 5, 1, -1, 2}))
      .Input("b", Values<int32_t>({10, 3, 0, -4, -3, -1}))
      .Output("y", {6}, {1024, -27, 1, 1, -1, 0})
      .Run();
  OpTester("Pow", 15)
      .Input("a", Values<int64_t>({4, 9, 2}))
      .Input("b", Values<float>({0.5, 0.5, 1.5}))
      .Output("y", {3}, {2, 3, 2})
      .Run();
  OpTester("Pow", 7)
      .Input("a", Values<Float16>({2, 0.5}))
      .Input("b", Values<Float16>({3, 2}))
      .Output("y", {2}, {8, 0.25})
      .Run();
}

TEST(ElementwiseBinary, PRelu) {
  Tensor x = RandomTensor<float>({2, 3, 4}, -2, 2, 1), slope = RandomTensor<float>({3, 1}, 0.1, 0.5, 2);
  auto ref = [](double v, double s) { return v < 0 ? s * v : v; };
  OpTester("PRelu", 16).Input("x", x).Input("s", slope).Output("y", {2, 3, 4}, Ref2(x, slope, {2, 3, 4}, ref)).Run();
  Tensor xi = Values<int32_t>({-4, 3, -2}), si = Values<int32_t>({2});
  OpTester("PRelu", 16).Input("x", xi).Input("s", si).Output("y", {3}, {-8, 3, -4}).Run();
}

TEST(ElementwiseBinary, LegacyOpset6Broadcast) {
  Tensor a = RandomTensor<float>({2, 3, 4}, -2, 2, 1), b = RandomTensor<float>({3}, -2, 2, 2);
  std::vector<double> av = ToDoubles(a), bv = ToDoubles(b), expected;
  for (int64_t i = 0; i < 24; ++i) expected.push_back(av[i] + bv[(i / 4) % 3]);
  OpTester("Add", 6)
      .Attr("broadcast", Attribute::Int(1))
      .Attr("axis", Attribute::Int(1))
      .Input("a", a)
      .Input("b", b)
      .Output("y", {2, 3, 4}, expected)
      .Run();
  Tensor b4 = RandomTensor<float>({4}, -2, 2, 3);
  OpTester("Mul", 6)
      .Attr("broadcast", Attribute::Int(1))
      .Input("a", a)
      .Input("b", b4)
      .Output("y", {2, 3, 4}, Ref2(a, b4, {2, 3, 4}, [](double x, double y) { return x * y; }))
      .Run();
  // Without broadcast=1, opset 6 needs equal shapes.
  auto r = OpTester("Add", 6).Input("a", a).Input("b", b4).Output("y", {2, 3, 4}, {}).Compute();
  EXPECT_FALSE(r.ok());
}

TEST(ElementwiseBinary, NonBroadcastableShapesAreErrors) {
  for (const char* op : {"Add", "Div", "Equal", "Pow", "And"}) {
    DType t = std::string(op) == "And" ? DType::kBool : DType::kFloat32;
    Tensor a = t == DType::kBool ? Values<bool>({1, 0, 1, 1, 0, 1}, {2, 3}) : RandomTensor<float>({2, 3});
    Tensor b = t == DType::kBool ? Values<bool>({1, 0, 1, 1}) : RandomTensor<float>({4});
    auto r = OpTester(op, 17).Input("a", a).Input("b", b).Output("y", {2, 3}, {}).Compute();
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel) << r.status().ToString();
    EXPECT_NE(r.status().message().find("broadcast"), std::string::npos) << r.status().ToString();
  }
  auto mixed = OpTester("Add", 14)
                   .Input("a", RandomTensor<float>({2}))
                   .Input("b", RandomTensor<double>({2}))
                   .Output("y", {2}, {})
                   .Compute();
  EXPECT_FALSE(mixed.ok());
  auto where = OpTester("Where", 16)
                   .Input("c", Values<bool>({1, 0, 1}))
                   .Input("x", RandomTensor<float>({2}))
                   .Input("y", RandomTensor<float>({3}))
                   .Output("z", {3}, {})
                   .Compute();
  EXPECT_FALSE(where.ok());
}

TEST(ElementwiseBroadcast, PlanCollapsesDims) {
  Shape a{2, 3, 4, 5}, b{1, 3, 1, 1}, out{2, 3, 4, 5};
  auto plan = ew::MakeBroadcastPlan({&a, &b}, out);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan.value().dims, (std::vector<int64_t>{2, 3, 20}));
  EXPECT_EQ(plan.value().strides[0], (std::vector<int64_t>{60, 20, 1}));
  EXPECT_EQ(plan.value().strides[1], (std::vector<int64_t>{0, 1, 0}));

  Shape row{5}, mat{4, 5};
  auto p2 = ew::MakeBroadcastPlan({&mat, &row}, mat);
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2.value().dims, (std::vector<int64_t>{4, 5}));
  Shape same{4, 1, 5};
  auto p3 = ew::MakeBroadcastPlan({&same, &same}, same);
  ASSERT_TRUE(p3.ok());
  EXPECT_EQ(p3.value().dims, (std::vector<int64_t>{20}));
  Shape bad{3};
  EXPECT_FALSE(ew::MakeBroadcastPlan({&mat, &bad}, mat).ok());
}

TEST(ElementwiseBroadcast, SymbolicShapeInference) {
  Graph g;
  g.SetOpset("", 17);
  ASSERT_TRUE(g.AddInput("a", ValueType(DType::kFloat32, Dims{Dim::Symbol("batch"), 1, 8})).ok());
  ASSERT_TRUE(g.AddInput("b", ValueType(DType::kFloat32, Dims{Dim::Symbol("seq"), 1})).ok());
  auto node = g.AddNode("Add", "", {"a", "b"}, {"y"});
  ASSERT_TRUE(node.ok());
  InferenceContext ctx(*node.value(), 17, {&g.FindValue("a")->type(), &g.FindValue("b")->type()}, {nullptr, nullptr});
  ASSERT_TRUE(OpSchemaRegistry::Global().Infer(ctx).ok());
  EXPECT_EQ(DimsToString(*ctx.output_types()[0].shape),
            DimsToString(Dims{Dim::Symbol("batch"), Dim::Symbol("seq"), 8}));
}

// ---------------------------------------------------------------- unary

struct UnaryCase {
  const char* op;
  Fn1 ref;
  double lo, hi;
  int opset;
};

const std::vector<UnaryCase>& UnaryCases() {
  static const std::vector<UnaryCase> cases{
      {"Neg", [](double x) { return -x; }, -5, 5, 13},
      {"Abs", [](double x) { return std::fabs(x); }, -5, 5, 13},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0.01, 100, 13},
      {"Reciprocal", [](double x) { return 1 / x; }, -5, 5, 13},
      {"Exp", [](double x) { return std::exp(x); }, -80, 80, 13},
      {"Log", [](double x) { return std::log(x); }, 1e-6, 1e6, 13},
      {"Tanh", [](double x) { return std::tanh(x); }, -12, 12, 13},
      {"Sigmoid", Sigmoid, -30, 30, 13},
      {"Erf", [](double x) { return std::erf(x); }, -5, 5, 13},
      {"Relu", [](double x) { return x < 0 ? 0 : x; }, -5, 5, 14},
      {"Floor", [](double x) { return std::floor(x); }, -50, 50, 13},
      {"Ceil", [](double x) { return std::ceil(x); }, -50, 50, 13},
      {"Round", [](double x) { return std::nearbyint(x); }, -50, 50, 22},
      {"Sign", [](double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }, -5, 5, 13},
      {"Sin", [](double x) { return std::sin(x); }, -10, 10, 7},
      {"Cos", [](double x) { return std::cos(x); }, -10, 10, 7},
      {"Softplus", [](double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }, -30, 30, 1},
      {"Softsign", [](double x) { return x / (1 + std::fabs(x)); }, -5, 5, 1},
      {"HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, -5, 5, 14},
      {"Gelu", Gelu, -6, 6, 20},
      {"Elu", [](double x) { return x < 0 ? std::expm1(x) : x; }, -5, 5, 6},
      // Attribute defaults are float32 values, so the reference uses them rounded to float.
      {"Selu",
       [](double x) {
         return double(1.05070102214813232421875f) * (x <= 0 ? double(1.67326319217681884765625f) * std::expm1(x) : x);
       },
       -5, 5, 6},
      {"HardSigmoid", [](double x) { return std::clamp(double(0.2f) * x + 0.5, 0.0, 1.0); }, -5, 5, 6},
      {"LeakyRelu", [](double x) { return x < 0 ? double(0.01f) * x : x; }, -5, 5, 16},
  };
  return cases;
}

TEST(ElementwiseUnary, Float32AgainstFloat64Reference) {
  for (const auto& c : UnaryCases()) {
    SCOPED_TRACE(c.op);
    // 1003 elements: 8-wide vector body plus a masked tail.
    Tensor x = RandomTensor<float>({17, 59}, c.lo, c.hi, 7);
    OpTester(c.op, c.opset).Input("x", x).Output("y", {17, 59}, Ref1(x, c.ref), 2e-6, 1e-6).Run();
  }
}

TEST(ElementwiseUnary, Float64AndSixteenBit) {
  for (const auto& c : UnaryCases()) {
    SCOPED_TRACE(c.op);
    int opset = std::max(c.opset, 13);
    if (std::string(c.op) == "Softplus" || std::string(c.op) == "Round" || std::string(c.op) == "Sin" ||
        std::string(c.op) == "Cos" || std::string(c.op) == "Elu" || std::string(c.op) == "Selu" ||
        std::string(c.op) == "HardSigmoid" || std::string(c.op) == "HardSwish" || std::string(c.op) == "Softsign")
      opset = 22;
    double lo = std::max(c.lo, -8.0), hi = std::min(c.hi, 8.0);
    Tensor xd = RandomTensor<double>({3, 40}, lo, hi, 8);
    OpTester(c.op, opset).Input("x", xd).Output("y", {3, 40}, Ref1(xd, c.ref), 1e-12, 1e-13).Run();
    Tensor xh = RandomTensor<Float16>({3, 600}, lo, hi, 9);
    OpTester(c.op, opset).Input("x", xh).Output("y", {3, 600}, Ref1(xh, c.ref), 2e-3, 2e-3).Run();
    Tensor xb = RandomTensor<BFloat16>({3, 600}, lo, hi, 10);
    OpTester(c.op, opset).Input("x", xb).Output("y", {3, 600}, Ref1(xb, c.ref), 1e-2, 1e-2).Run();
  }
}

TEST(ElementwiseUnary, IntegerOps) {
  Tensor x = Values<int32_t>({-5, 0, 7, INT32_MIN + 1});
  OpTester("Neg", 13).Input("x", x).Output("y", {4}, {5, 0, -7, INT32_MAX}).Run();
  OpTester("Abs", 13).Input("x", x).Output("y", {4}, {5, 0, 7, INT32_MAX}).Run();
  OpTester("Sign", 13).Input("x", x).Output("y", {4}, {-1, 0, 1, -1}).Run();
  OpTester("Relu", 14).Input("x", Values<int8_t>({-3, 4})).Output("y", {2}, {0, 4}).Run();
  OpTester("Sign", 13).Input("x", Values<uint8_t>({0, 9})).Output("y", {2}, {0, 1}).Run();
}

// Exact comparison that treats inf == inf and NaN == NaN (ExpectClose subtracts, so inf fails).
void ExpectSpecial(OpTester& t, const std::vector<double>& expected) {
  auto out = t.Compute();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<double> got = ToDoubles(out.value()[0]);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
    else if (std::isinf(expected[i])) EXPECT_EQ(got[i], expected[i]) << "element " << i;
    else EXPECT_NEAR(got[i], expected[i], 1e-6 * std::fabs(expected[i])) << "element " << i;
  }
}

TEST(ElementwiseUnary, RoundHalfToEvenAndSpecialValues) {
  OpTester("Round", 11)
      .Input("x", Values<float>({0.5, 1.5, 2.5, -0.5, -2.5, 2.4, -2.6}))
      .Output("y", {7}, {0, 2, 2, 0, -2, 2, -3})
      .Run();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor special = Values<float>({inf, -inf, nan, 0.0});
  auto check = [](const char* op, Tensor x, std::vector<double> expected) {
    SCOPED_TRACE(op);
    OpTester t(op, 13);
    t.Input("x", x).Output("y", x.shape(), {});
    ExpectSpecial(t, expected);
  };
  check("Exp", special, {inf, 0, nan, 1});
  check("Tanh", special, {1, -1, nan, 0});
  check("Sigmoid", special, {1, 0, nan, 0.5});
  check("Erf", special, {1, -1, nan, 0});
  check("Relu", special, {inf, 0, nan, 0});
  check("Log", Values<float>({0.0, -1.0, inf, 1.0, 1e-40}), {-inf, nan, inf, 0, std::log(double(1e-40f))});
  check("Exp", Values<Float16>({12.0, -20.0}), {inf, 0});
  OpTester("IsNaN", 13).Input("x", special).Output("y", {4}, {0, 0, 1, 0}).Run();
  OpTester("IsInf", 20).Input("x", special).Output("y", {4}, {1, 1, 0, 0}).Run();
  OpTester("IsInf", 10)
      .Attr("detect_negative", Attribute::Int(0))
      .Input("x", special)
      .Output("y", {4}, {1, 0, 0, 0})
      .Run();
  OpTester("IsInf", 20)
      .Attr("detect_positive", Attribute::Int(0))
      .Input("x", Values<Float16>({inf, -inf, 1}))
      .Output("y", {3}, {0, 1, 0})
      .Run();
}

using ArrayFn = void (*)(const float*, float*, int64_t);

struct AccuracyCase {
  const char* name;
  ArrayFn fn;
  Fn1 ref;
  double lo, hi, rtol;
  // GELU of a negative x is x times (1 + erf), a cancellation every float32 implementation
  // (torch's included) pays for, so it is held to an absolute bound there.
  double atol = 0;
};

// Relative error where the result is not tiny; results below ~1e-30 only need to be tiny. The
// 200003 points cover the vector body and a masked tail.
void CheckAccuracy(const AccuracyCase& c) {
  SCOPED_TRACE(c.name);
  const int64_t n = 200003;
  std::vector<float> x(n), y(n);
  const bool log_spaced = c.lo > 0;
  for (int64_t i = 0; i < n; ++i) {
    double t = static_cast<double>(i) / (n - 1);
    x[i] = log_spaced ? static_cast<float>(std::exp(std::log(c.lo) + t * (std::log(c.hi) - std::log(c.lo))))
                      : static_cast<float>(c.lo + t * (c.hi - c.lo));
  }
  c.fn(x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    double e = c.ref(x[i]);
    if (std::fabs(e) > std::numeric_limits<float>::max()) {  // overflows float32
      ASSERT_TRUE(std::isinf(y[i]) && (y[i] > 0) == (e > 0)) << "x=" << x[i] << " got " << y[i];
      continue;
    }
    double err = std::max(std::fabs(y[i] - e) - c.atol, 0.0) / std::max(std::fabs(e), 1e-30);
    if (std::fabs(e) < 1e-30) err = std::fabs(y[i]) < 1e-29 ? 0 : 1;
    ASSERT_LE(err, c.rtol) << "x=" << x[i] << " got " << y[i] << " expected " << e;
  }
}

// Every ISA variant this machine can run, over the whole float range, against libm in double.
TEST(ElementwiseVectorMath, IsaVariantsAccuracy) {
  struct Variant {
    const char* isa;
    bool available;
    ArrayFn exp, tanh, sigmoid, erf, gelu, gelu_tanh, log, softplus;
  };
  const Variant variants[] = {
      {"avx2", ew::avx2::Available(), ew::avx2::ExpArray, ew::avx2::TanhArray, ew::avx2::SigmoidArray,
       ew::avx2::ErfArray, ew::avx2::GeluArray, ew::avx2::GeluTanhArray, ew::avx2::LogArray, ew::avx2::SoftplusArray},
      {"avx512", ew::avx512::Available(), ew::avx512::ExpArray, ew::avx512::TanhArray, ew::avx512::SigmoidArray,
       ew::avx512::ErfArray, ew::avx512::GeluArray, ew::avx512::GeluTanhArray, ew::avx512::LogArray,
       ew::avx512::SoftplusArray},
  };
  for (const Variant& v : variants) {
    if (!v.available) continue;
    SCOPED_TRACE(v.isa);
    CheckAccuracy({"exp", v.exp, [](double x) { return std::exp(x); }, -110, 89, 1e-6});
    CheckAccuracy({"tanh", v.tanh, [](double x) { return std::tanh(x); }, -10, 10, 1e-6});
    CheckAccuracy({"sigmoid", v.sigmoid, Sigmoid, -80, 40, 1e-6});
    CheckAccuracy({"erf", v.erf, [](double x) { return std::erf(x); }, -5, 5, 1e-6});
    CheckAccuracy({"gelu", v.gelu, Gelu, -10, 10, 2e-6, 1e-6});
    // In the far negative tail the result is exp(-70)-small and inherits float32's rounding of
    // the exp argument (condition number ~70), so the absolute bound applies there too.
    CheckAccuracy({"gelu_tanh", v.gelu_tanh, GeluTanh, -10, 10, 2e-6, 1e-6});
    CheckAccuracy({"log", v.log, [](double x) { return std::log(x); }, 1e-44, 3e38, 1e-6});
    CheckAccuracy({"log_near_1", v.log, [](double x) { return std::log(x); }, 0.5, 2, 1e-6});
    CheckAccuracy({"softplus", v.softplus,
                   [](double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); }, -80, 80, 1e-6});
    // Special values, in short runs that only exercise the masked tails.
    const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
    std::vector<float> lx{0.0f, -1.0f, inf, nan, 1.0f}, ly(5);
    v.log(lx.data(), ly.data(), 5);
    EXPECT_EQ(ly[0], -inf);
    EXPECT_TRUE(std::isnan(ly[1]));
    EXPECT_EQ(ly[2], inf);
    EXPECT_TRUE(std::isnan(ly[3]));
    EXPECT_EQ(ly[4], 0.0f);
    std::vector<float> ex{inf, -inf, nan, 0.0f, 200.0f, -1.5f}, ey(6);
    v.exp(ex.data(), ey.data(), 6);
    EXPECT_EQ(ey[0], inf);
    EXPECT_EQ(ey[1], 0.0f);
    EXPECT_TRUE(std::isnan(ey[2]));
    EXPECT_EQ(ey[3], 1.0f);
    EXPECT_EQ(ey[4], inf);
    EXPECT_NEAR(ey[5], std::exp(-1.5), 1e-6);
  }
}

TEST(ElementwiseVectorMath, AccuracyOverWideRanges) {
  const std::vector<AccuracyCase> cases{
      {"exp", ew::ExpArray, [](double x) { return std::exp(x); }, -100, 88.7, 1e-6},
      {"log", ew::LogArray, [](double x) { return std::log(x); }, 1e-30, 1e30, 1e-6},
      {"tanh", ew::TanhArray, [](double x) { return std::tanh(x); }, -10, 10, 1e-6},
      {"sigmoid", ew::SigmoidArray, Sigmoid, -80, 40, 1e-6},
      {"erf", ew::ErfArray, [](double x) { return std::erf(x); }, -5, 5, 1e-6},
      {"gelu", ew::GeluArray, Gelu, -10, 10, 2e-6, 1e-6},
      {"gelu_tanh", ew::GeluTanhArray, GeluTanh, -10, 10, 2e-6, 1e-6},
      {"softplus", ew::SoftplusArray, [](double x) { return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0); },
       -80, 80, 1e-6},
  };
  for (const auto& c : cases) CheckAccuracy(c);
}

TEST(ElementwiseVectorMath, ScalarFunctorsMatchVectorisedPath) {
  // The CUDA kernels use the scalar functors; they must agree with the CPU vector path.
  std::vector<float> x(1000), y(1000);
  for (int i = 0; i < 1000; ++i) x[i] = -6.0f + 0.012f * i;
  ew::GeluArray(x.data(), y.data(), 1000);
  for (int i = 0; i < 1000; ++i) EXPECT_NEAR(y[i], ew::GeluOp{}(x[i]), 2e-6 * (1 + std::fabs(y[i])));
  ew::SigmoidArray(x.data(), y.data(), 1000);
  for (int i = 0; i < 1000; ++i) EXPECT_NEAR(y[i], ew::SigmoidOp{}(x[i]), 2e-6 * y[i]);
}

TEST(ElementwiseActivation, AttributesAndGeluForms) {
  Tensor x = RandomTensor<float>({4, 33}, -4, 4, 3);
  OpTester("LeakyRelu", 16)
      .Attr("alpha", Attribute::Float(0.3f))
      .Input("x", x)
      .Output("y", {4, 33}, Ref1(x, [](double v) { return v < 0 ? 0.3 * v : v; }), 1e-6, 1e-7)
      .Run();
  OpTester("Elu", 6)
      .Attr("alpha", Attribute::Float(2.0f))
      .Input("x", x)
      .Output("y", {4, 33}, Ref1(x, [](double v) { return v < 0 ? 2 * std::expm1(v) : v; }), 2e-6, 1e-6)
      .Run();
  OpTester("Selu", 6)
      .Attr("alpha", Attribute::Float(2.0f))
      .Attr("gamma", Attribute::Float(3.0f))
      .Input("x", x)
      .Output("y", {4, 33}, Ref1(x, [](double v) { return 3 * (v <= 0 ? 2 * std::expm1(v) : v); }), 2e-6, 1e-6)
      .Run();
  OpTester("HardSigmoid", 6)
      .Attr("alpha", Attribute::Float(0.5f))
      .Attr("beta", Attribute::Float(0.6f))
      .Input("x", x)
      .Output("y", {4, 33}, Ref1(x, [](double v) { return std::clamp(0.5 * v + 0.6, 0.0, 1.0); }), 1e-6, 1e-7)
      .Run();
  OpTester("Gelu", 20)
      .Attr("approximate", Attribute::String("tanh"))
      .Input("x", x)
      .Output("y", {4, 33}, Ref1(x, GeluTanh), 2e-6, 1e-6)
      .Run();
  OpTester("Gelu", 1, kMicrosoftDomain).Input("x", x).Output("y", {4, 33}, Ref1(x, Gelu), 2e-6, 1e-6).Run();

  Tensor bias = RandomTensor<float>({33}, -1, 1, 4);
  auto plus = [](const Fn1& f) { return [f](double a, double b) { return f(a + b); }; };
  OpTester("FastGelu", 1, kMicrosoftDomain)
      .Input("x", x)
      .Input("b", bias)
      .Output("y", {4, 33}, Ref2(x, bias, {4, 33}, plus(GeluTanh)), 2e-6, 1e-6)
      .Run();
  OpTester("FastGelu", 1, kMicrosoftDomain).Input("x", x).Output("y", {4, 33}, Ref1(x, GeluTanh), 2e-6, 1e-6).Run();
  OpTester("BiasGelu", 1, kMicrosoftDomain)
      .Input("x", x)
      .Input("b", bias)
      .Output("y", {4, 33}, Ref2(x, bias, {4, 33}, plus(Gelu)), 2e-6, 1e-6)
      .Run();
  Tensor xh = RandomTensor<Float16>({4, 600}, -4, 4, 5), bh = RandomTensor<Float16>({600}, -1, 1, 6);
  OpTester("BiasGelu", 1, kMicrosoftDomain)
      .Input("x", xh)
      .Input("b", bh)
      .Output("y", {4, 600}, Ref2(xh, bh, {4, 600}, plus(Gelu)), 2e-3, 2e-3)
      .Run();

  auto bad = OpTester("Gelu", 20)
                 .Attr("approximate", Attribute::String("fast"))
                 .Input("x", x)
                 .Output("y", {4, 33}, {})
                 .Compute();
  EXPECT_FALSE(bad.ok());
  auto bad_bias = OpTester("BiasGelu", 1, kMicrosoftDomain)
                      .Input("x", x)
                      .Input("b", RandomTensor<float>({5}))
                      .Output("y", {4, 33}, {})
                      .Compute();
  EXPECT_FALSE(bad_bias.ok());
}

}  // namespace
}  // namespace tob
