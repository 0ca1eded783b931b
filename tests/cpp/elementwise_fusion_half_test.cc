// ElementwiseFusion over float16/bfloat16 and the Casts between them (autocast's graphs). Golden
// tests show what fuses and what must not; the kernel tests run fused and unfused sessions of the
// same 16-bit graphs and require equal bits (each fused instruction rounds as the unfused kernel
// stores), and compare both with float64 within the roundings the graph asks for.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/domain.h"
#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "ops/fused_elementwise_program.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::F32;
using testing::GraphBuilder;
using testing::RandomTensor;

ValueType BF16(Dims dims) { return ValueType(DType::kBFloat16, std::move(dims)); }
ValueType F16(Dims dims) { return ValueType(DType::kFloat16, std::move(dims)); }
AttributeMap CastTo(DType t) { return {{"to", Attribute::Int(static_cast<int64_t>(t))}}; }
constexpr int64_t kF32 = 1, kF16 = 10, kBF16 = 16;

AttributeMap Program(std::vector<std::string> ops, std::vector<int64_t> operands, std::vector<int64_t> outputs,
                     std::vector<int64_t> types) {
  AttributeMap a{{"ops", Attribute::Strings(std::move(ops))},
                 {"operands", Attribute::Ints(std::move(operands))},
                 {"outputs", Attribute::Ints(std::move(outputs))}};
  if (!types.empty()) a["types"] = Attribute::Ints(std::move(types));
  return a;
}

std::string AfterPass(Graph& g) {
  testing::RunPassWithBuiltins(CreateElementwiseFusionPass(), g);
  return GraphToText(g);
}

// ---- golden ----

TEST(OptimizerElementwiseFusionHalf, GoldenWidenedGemmOutputAndResidualAdd) {
  // Autocast's residual: a bfloat16 GEMM output widened to float32 and added to the float32 stream.
  Graph before;
  GraphBuilder b(before);
  b.Input("h", BF16({4, 8})).Input("res", F32({4, 8}));
  b.Op("Cast", {"h"}, {"hf"}, CastTo(DType::kFloat32), "", "widen");
  b.Op("Add", {"hf", "res"}, {"y"}, {}, "", "residual");
  b.Output("y");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("h", BF16({4, 8})).Input("res", F32({4, 8}));
  // Registers: 0 h (bfloat16), 1 res, 2 hf, 3 y.
  e.Op(kFusedElementwiseOp, {"h", "res"}, {"y"},
       Program({"Cast", "Add"}, {0, -1, -1, 2, 1, -1}, {3}, {kBF16, kF32, kF32, kF32}), kTobDomain,
       "residual_fused__1");
  e.Output("y");
  EXPECT_EQ(AfterPass(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusionHalf, GoldenBfloat16GeluChainAndItsNarrowing) {
  // GPT-2's tanh GELU as the exporter writes it under autocast, bfloat16 throughout, then a float32
  // value rounded to bfloat16 and multiplied in (a Cast into the group).
  Graph before;
  GraphBuilder b(before);
  b.Input("x", BF16({2, 8})).Input("c", BF16({})).Input("g", F32({2, 8}));
  b.Op("Mul", {"x", "x"}, {"x2"}, {}, "", "square");
  b.Op("Mul", {"x2", "c"}, {"t"}, {}, "", "scale");
  b.Op("Tanh", {"t"}, {"th"}, {}, "", "tanh");
  b.Op("Cast", {"g"}, {"gb"}, CastTo(DType::kBFloat16), "", "narrow");
  b.Op("Mul", {"th", "gb"}, {"y"}, {}, "", "gate");
  b.Output("y");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("x", BF16({2, 8})).Input("c", BF16({})).Input("g", F32({2, 8}));
  // Registers: 0 x, 1 c, 2 g, 3 x2, 4 t, 5 th, 6 gb, 7 y.
  e.Op(kFusedElementwiseOp, {"x", "c", "g"}, {"y"},
       Program({"Mul", "Mul", "Tanh", "Cast", "Mul"}, {0, 0, -1, 3, 1, -1, 4, -1, -1, 2, -1, -1, 5, 6, -1}, {7},
               {kBF16, kBF16, kF32, kBF16, kBF16, kBF16, kBF16, kBF16}),
       kTobDomain, "gate_fused__1");
  e.Output("y");
  EXPECT_EQ(AfterPass(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusionHalf, GoldenMustNotFire) {
  // Each pair is kept apart by one rule: a Cast from an integer, a Cast to float64, a Pow whose
  // bfloat16 base has a float32 exponent (not one type), and a Cast beside a 16-bit node of another
  // output shape.
  auto build = [](Graph& g) {
    GraphBuilder b(g);
    b.Input("i", ValueType(DType::kInt32, Dims{4, 4})).Input("x", BF16({4, 4})).Input("e", F32({4, 4}));
    b.Input("r", BF16({4, 1}));
    b.Op("Cast", {"i"}, {"fi"}, CastTo(DType::kFloat32), "", "cast_int");
    b.Op("Relu", {"fi"}, {"ri"}, {}, "", "relu");
    b.Op("Cast", {"x"}, {"xd"}, CastTo(DType::kFloat64), "", "cast_f64");
    b.Op("Neg", {"xd"}, {"nd"}, {}, "", "neg_f64");
    b.Op("Pow", {"x", "e"}, {"p"}, {}, "", "pow_mixed");
    b.Op("Neg", {"p"}, {"np"}, {}, "", "neg_pow");
    b.Op("Cast", {"r"}, {"rf"}, CastTo(DType::kFloat32), "", "cast_row");
    b.Op("Add", {"rf", "e"}, {"s"}, {}, "", "add_row");  // [4, 1] + [4, 4]: another shape
    b.Output("ri").Output("nd").Output("np").Output("s");
  };
  Graph before, expected;
  build(before);
  build(expected);
  ASSERT_TRUE(InferShapes(before, OpSchemaRegistry::Global()).ok());
  PassContext ctx;
  bool changed = true;
  ASSERT_TRUE(CreateElementwiseFusionPass()->Run(before, ctx, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusionHalf, GoldenTanhGradJoinsTheGeluBackward) {
  // GPT-2's GELU backward under autocast: com.microsoft TanhGrad between bfloat16 Muls (the
  // exporter's tanh_backward). It joins their group: one node instead of three.
  Graph before;
  GraphBuilder b(before);
  before.SetOpset(kMicrosoftDomain, 1);
  b.Input("dy", BF16({4, 8})).Input("xh", BF16({4, 8})).Input("th", BF16({4, 8})).Input("k", BF16({}));
  b.Op("Mul", {"dy", "xh"}, {"a"}, {}, "", "outer");
  b.Op("TanhGrad", {"a", "th"}, {"g"}, {}, kMicrosoftDomain, "tanh_backward");
  b.Op("Mul", {"g", "k"}, {"y"}, {}, "", "inner");
  b.Output("y");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  expected.SetOpset(kMicrosoftDomain, 1);
  e.Input("dy", BF16({4, 8})).Input("xh", BF16({4, 8})).Input("th", BF16({4, 8})).Input("k", BF16({}));
  // Registers: 0 dy, 1 xh, 2 th, 3 k, 4 a, 5 g, 6 y.
  e.Op(kFusedElementwiseOp, {"dy", "xh", "th", "k"}, {"y"},
       Program({"Mul", "TanhGrad", "Mul"}, {0, 1, -1, 4, 2, -1, 5, 3, -1}, {6},
               {kBF16, kBF16, kBF16, kBF16, kBF16, kBF16, kBF16}),
       kTobDomain, "inner_fused__1");
  e.Output("y");
  EXPECT_EQ(AfterPass(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusionHalf, TanhGradSwitchOffKeepsItOut) {
  // TOB_TANHGRAD_FUSION=0 (core/env_switch.h): TanhGrad stays a node of its own, so neither Mul
  // has a fusible neighbour and the graph is unchanged.
  const char* old = std::getenv("TOB_TANHGRAD_FUSION");
  const std::string saved = old != nullptr ? old : "";
  setenv("TOB_TANHGRAD_FUSION", "0", 1);
  auto build = [](Graph& g) {
    GraphBuilder b(g);
    g.SetOpset(kMicrosoftDomain, 1);
    b.Input("dy", BF16({4, 8})).Input("xh", BF16({4, 8})).Input("th", BF16({4, 8})).Input("k", BF16({}));
    b.Op("Mul", {"dy", "xh"}, {"a"}, {}, "", "outer");
    b.Op("TanhGrad", {"a", "th"}, {"g"}, {}, kMicrosoftDomain, "tanh_backward");
    b.Op("Mul", {"g", "k"}, {"y"}, {}, "", "inner");
    b.Output("y");
  };
  Graph before, expected;
  build(before);
  build(expected);
  const bool changed = testing::RunPassWithBuiltins(CreateElementwiseFusionPass(), before);
  if (old != nullptr) setenv("TOB_TANHGRAD_FUSION", saved.c_str(), 1);
  else unsetenv("TOB_TANHGRAD_FUSION");
  EXPECT_FALSE(changed);
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusionHalf, TanhGradIsAnInstructionOnlyInTheMicrosoftDomain) {
  Graph g;
  GraphBuilder b(g);
  b.Input("a", BF16({4})).Input("t", BF16({4}));
  b.Op("TanhGrad", {"a", "t"}, {"ms"}, {}, kMicrosoftDomain, "ms");
  b.Op("TanhGrad", {"a", "t"}, {"plain"}, {}, "", "plain");
  std::optional<FusedOpCode> ms, plain;
  for (const Node* n : g.nodes()) (n->domain().empty() ? plain : ms) = FusedOpCodeOf(*n);
  ASSERT_TRUE(ms.has_value());
  EXPECT_EQ(*ms, FusedOpCode::kTanhGrad);
  EXPECT_STREQ(FusedOpName(*ms), "TanhGrad");
  EXPECT_EQ(FusedOpArity(*ms), 2);
  EXPECT_FALSE(plain.has_value());
}

// ---- the kernel, through sessions ----

struct Run {
  std::vector<Tensor> outputs;
  int fused_nodes = 0;
};

Run RunGraph(std::unique_ptr<Graph> g, OptLevel level, const std::vector<std::string>& names,
             const std::vector<Tensor>& feeds, int threads) {
  SessionOptions opts;
  opts.optimization_level = level;
  opts.intra_op_threads = threads;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  Run r;
  if (!s.ok()) return r;
  for (const Node* n : s.value()->graph().nodes()) r.fused_nodes += n->op_type() == kFusedElementwiseOp;
  Status st = s.value()->Run(names, feeds, {}, &r.outputs);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

template <typename T>
Tensor Narrowed(const Tensor& f) {
  std::vector<T> v(static_cast<size_t>(f.numel()));
  for (int64_t i = 0; i < f.numel(); ++i) v[i] = T(f.data<float>()[i]);
  return Tensor::FromVector<T>(v, f.shape());
}

template <typename T>
double At(const Tensor& t, int64_t i) {
  return static_cast<double>(static_cast<float>(t.data<T>()[i]));
}

// Over x [A, B, C, D] (bfloat16), res [A, B, C, D] (float32), row [D] (bfloat16), h [A, B, C, 1]
// (float16), s [] (bfloat16) and a bool mask [1, 1, C, 1]:
//   g = 0.5 x (1 + tanh(0.8 (x + 0.044715 x^3)))      bfloat16 ops (GPT-2's GELU)
//   y = float32(g) + res                                float32 output
//   w = Where(mask, g * row, -x / s)                    bfloat16 output
//   q = float16(sigmoid(float32(x))) + h                float16 output
std::unique_ptr<Graph> HalfGraph(const Shape& x_shape) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(*g, 20);
  const int64_t A = x_shape[0], B = x_shape[1], C = x_shape[2], D = x_shape[3];
  b.Input("x", BF16({A, B, C, D})).Input("res", F32({A, B, C, D})).Input("row", BF16({D}));
  b.Input("h", F16({A, B, C, 1})).Input("s", BF16({})).Input("mask", ValueType(DType::kBool, Dims{1, 1, C, 1}));
  for (auto [name, v] :
       {std::pair<const char*, float>{"k_cube", 0.044715f}, {"k_scale", 0.8f}, {"k_half", 0.5f}, {"k_one", 1.f}})
    EXPECT_TRUE(g->AddInitializer(name, Tensor::FromVector<BFloat16>({BFloat16(v)}, {})).ok());
  b.Op("Mul", {"x", "x"}, {"x2"});
  b.Op("Mul", {"x2", "x"}, {"x3"});
  b.Op("Mul", {"x3", "k_cube"}, {"t1"});
  b.Op("Add", {"x", "t1"}, {"t2"});
  b.Op("Mul", {"t2", "k_scale"}, {"t3"});
  b.Op("Tanh", {"t3"}, {"t4"});
  b.Op("Add", {"t4", "k_one"}, {"t5"});
  b.Op("Mul", {"x", "k_half"}, {"t6"});
  b.Op("Mul", {"t6", "t5"}, {"gelu"});
  b.Op("Cast", {"gelu"}, {"gf"}, CastTo(DType::kFloat32));
  b.Op("Add", {"gf", "res"}, {"y"});
  b.Op("Mul", {"gelu", "row"}, {"gr"});
  b.Op("Neg", {"x"}, {"nx"});
  b.Op("Div", {"nx", "s"}, {"nxs"});
  b.Op("Where", {"mask", "gr", "nxs"}, {"w"});
  b.Op("Cast", {"x"}, {"xf"}, CastTo(DType::kFloat32));
  b.Op("Sigmoid", {"xf"}, {"sg"});
  b.Op("Cast", {"sg"}, {"sgh"}, CastTo(DType::kFloat16));
  b.Op("Add", {"sgh", "h"}, {"q"});
  b.Output("y").Output("w").Output("q");
  return g;
}

void CheckHalfGraph(const Shape& x_shape, int threads) {
  const int64_t A = x_shape[0], B = x_shape[1], C = x_shape[2], D = x_shape[3];
  const Tensor x = Narrowed<BFloat16>(RandomTensor<float>(x_shape, -3, 3, 1));
  const Tensor res = RandomTensor<float>(x_shape, -2, 2, 2);
  const Tensor row = Narrowed<BFloat16>(RandomTensor<float>({D}, -2, 2, 3));
  const Tensor h = Narrowed<Float16>(RandomTensor<float>({A, B, C, 1}, -2, 2, 4));
  const Tensor s = Tensor::FromVector<BFloat16>({BFloat16(1.75f)}, {});
  Tensor mask = Tensor::Allocate(DType::kBool, {1, 1, C, 1}, CpuAllocator::Default()).value();
  for (int64_t k = 0; k < C; ++k) mask.data<bool>()[k] = (k % 3) != 1;
  const std::vector<std::string> names = {"x", "res", "row", "h", "s", "mask"};
  const std::vector<Tensor> feeds = {x, res, row, h, s, mask};
  Run fused = RunGraph(HalfGraph(x_shape), OptLevel::kAll, names, feeds, threads);
  Run plain = RunGraph(HalfGraph(x_shape), OptLevel::kExtended, names, feeds, threads);
  EXPECT_GE(fused.fused_nodes, 2);  // 19 nodes: more than one program's 16 instructions
  EXPECT_EQ(plain.fused_nodes, 0);
  ASSERT_EQ(fused.outputs.size(), 3u);
  ASSERT_EQ(fused.outputs[0].dtype(), DType::kFloat32);
  ASSERT_EQ(fused.outputs[1].dtype(), DType::kBFloat16);
  ASSERT_EQ(fused.outputs[2].dtype(), DType::kFloat16);
  // float64, without the intermediate roundings: the bfloat16 chain rounds about ten times (unit
  // roundoff u = 2^-8 each) on values up to ~3, so its results sit within ~16 u of the exact ones.
  double worst_y = 0, worst_w = 0, worst_q = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t i = ((a * B + bb) * C + c) * D + d, r = (a * B + bb) * C + c;
          const double xv = At<BFloat16>(x, i);
          const double gelu = 0.5 * xv * (1.0 + std::tanh(0.8 * (xv + 0.044715 * xv * xv * xv)));
          const double y = gelu + res.data<float>()[i];
          const double w = mask.data<bool>()[c] ? gelu * At<BFloat16>(row, d) : -xv / 1.75;
          const double q = 1.0 / (1.0 + std::exp(-xv)) + At<Float16>(h, r);
          worst_y = std::max(worst_y, std::abs(At<float>(fused.outputs[0], i) - y) / (1 + std::abs(y)));
          worst_w = std::max(worst_w, std::abs(At<BFloat16>(fused.outputs[1], i) - w) / (1 + std::abs(w)));
          worst_q = std::max(worst_q, std::abs(At<Float16>(fused.outputs[2], i) - q) / (1 + std::abs(q)));
        }
  EXPECT_LT(worst_y, 16 * std::ldexp(1.0, -8));
  EXPECT_LT(worst_w, 16 * std::ldexp(1.0, -8));
  EXPECT_LT(worst_q, 3 * std::ldexp(1.0, -11));  // float16: the sigmoid and the sum, each rounded once
  // The unfused kernels' roundings, one by one: equal bits.
  for (size_t o = 0; o < 3; ++o) {
    const Tensor& f = fused.outputs[o];
    const Tensor& p = plain.outputs[o];
    ASSERT_EQ(f.dtype(), p.dtype());
    ASSERT_EQ(f.numel(), p.numel());
    ASSERT_EQ(std::memcmp(f.raw_data(), p.raw_data(), f.numel() * DTypeSize(f.dtype())), 0) << "output " << o;
  }
}

TEST(FusedElementwiseKernelHalf, SixteenBitChainsEqualTheUnfusedKernelsBitForBit) { CheckHalfGraph({2, 3, 5, 7}, 1); }

TEST(FusedElementwiseKernelHalf, LongRowsAcrossBlocksAndThreads) { CheckHalfGraph({2, 2, 3, 1300}, 2); }

// Every instruction of the fused set, in float16 and bfloat16: u = op(x[, w]) then y = u + w, one
// FusedElementwise node. Fused and unfused outputs must be equal bit for bit, and y must be within
// the graph's two roundings of the float64 value: |y - (op + w)| <= u (|op| + |op + w|) (1 + u)
// with unit roundoff u = 2^-8 (bfloat16: 8 significant bits) or 2^-11 (float16: 11), plus 2^-18
// |op| for the float32 approximations of the transcendental functions (vector_math.h's, within a
// few float32 ulps), which sit far below either 16-bit rounding.
template <typename T>
void CheckEveryOp(DType t, double unit) {
  struct Case {
    const char* op;
    bool binary;
    bool positive;  // the base of Sqrt, Log, Pow
    double (*exact)(double, double);
    AttributeMap attrs;
  };
  const std::vector<Case> cases = {
      {"Add", true, false, [](double a, double b) { return a + b; }, {}},
      {"Sub", true, false, [](double a, double b) { return a - b; }, {}},
      {"Mul", true, false, [](double a, double b) { return a * b; }, {}},
      {"Div", true, false, [](double a, double b) { return a / b; }, {}},
      {"Pow", true, true, [](double a, double b) { return std::pow(a, b); }, {}},
      {"Neg", false, false, [](double a, double) { return -a; }, {}},
      {"Abs", false, false, [](double a, double) { return std::abs(a); }, {}},
      {"Reciprocal", false, false, [](double a, double) { return 1 / a; }, {}},
      {"Sqrt", false, true, [](double a, double) { return std::sqrt(a); }, {}},
      {"Exp", false, false, [](double a, double) { return std::exp(a); }, {}},
      {"Log", false, true, [](double a, double) { return std::log(a); }, {}},
      {"Tanh", false, false, [](double a, double) { return std::tanh(a); }, {}},
      {"Sigmoid", false, false, [](double a, double) { return 1 / (1 + std::exp(-a)); }, {}},
      {"Erf", false, false, [](double a, double) { return std::erf(a); }, {}},
      {"Relu", false, false, [](double a, double) { return std::max(a, 0.0); }, {}},
      {"Gelu", false, false, [](double a, double) { return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))); }, {}},
      {"Gelu",
       false,
       false,
       [](double a, double) {
         return 0.5 * a * (1 + std::tanh(std::sqrt(2 / 3.141592653589793) * (a + 0.044715 * a * a * a)));
       },
       {{"approximate", Attribute::String("tanh")}}},
  };
  const Shape shape{3, 257};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.op) + (c.attrs.empty() ? "" : " (tanh)") + " " + DTypeName(t));
    auto build = [&] {
      auto g = std::make_unique<Graph>();
      GraphBuilder b(*g, 20);
      b.Input("x", ValueType(t, Dims{3, 257})).Input("w", ValueType(t, Dims{257}));
      if (c.binary) b.Op(c.op, {"x", "w"}, {"u"}, c.attrs);
      else b.Op(c.op, {"x"}, {"u"}, c.attrs);
      b.Op("Add", {"u", "w"}, {"y"});
      b.Output("y");
      return g;
    };
    const double lo = c.positive ? 0.25 : -2.5;
    const Tensor x = Narrowed<T>(RandomTensor<float>(shape, lo, 2.5, 7, 0.25));
    const Tensor w = Narrowed<T>(RandomTensor<float>({257}, -2.5, 2.5, 8, 0.25));
    Run fused = RunGraph(build(), OptLevel::kAll, {"x", "w"}, {x, w}, 1);
    Run plain = RunGraph(build(), OptLevel::kExtended, {"x", "w"}, {x, w}, 1);
    ASSERT_EQ(fused.fused_nodes, 1);
    ASSERT_EQ(plain.fused_nodes, 0);
    ASSERT_EQ(fused.outputs.size(), 1u);
    ASSERT_EQ(plain.outputs.size(), 1u);
    ASSERT_EQ(fused.outputs[0].dtype(), t);
    EXPECT_EQ(std::memcmp(fused.outputs[0].raw_data(), plain.outputs[0].raw_data(), fused.outputs[0].numel() * 2), 0);
    double worst = 0;  // error over its bound
    for (int64_t i = 0; i < fused.outputs[0].numel(); ++i) {
      const double xv = At<T>(x, i), wv = At<T>(w, i % 257);
      const double op = c.exact(xv, wv), ref = op + wv;
      const double bound = unit * (std::abs(op) + std::abs(ref)) * (1 + unit) + std::ldexp(std::abs(op), -18);
      worst = std::max(worst, std::abs(At<T>(fused.outputs[0], i) - ref) / bound);
    }
    EXPECT_LE(worst, 1.0);
  }
}

TEST(FusedElementwiseKernelHalf, EveryInstructionInBfloat16) {
  CheckEveryOp<BFloat16>(DType::kBFloat16, std::ldexp(1.0, -8));
}

TEST(FusedElementwiseKernelHalf, EveryInstructionInFloat16) {
  CheckEveryOp<Float16>(DType::kFloat16, std::ldexp(1.0, -11));
}

// A GELU-backward-like chain with TanhGrad in it, fused and unfused, in float32, float16 and
// bfloat16: th = tanh(x), a = dy x, g = TanhGrad(a, th) = a (1 - th^2), y = g + dy. Equal bits, and
// within the graph's roundings of float64: th, a, g and y rounded once each (unit roundoff u); th's
// error enters g through 1 - th^2 at most twice (|th| < 1), so |g - exact| <= u (4 |a| + |g|) and
// y adds u |y|; 2^-18 |a| covers the float32 tanh approximation (a few float32 ulps).
template <typename T>
void CheckTanhGradChain(DType t, double unit) {
  SCOPED_TRACE(DTypeName(t));
  const Shape shape{3, 5, 263};
  auto build = [&] {
    auto g = std::make_unique<Graph>();
    GraphBuilder b(*g, 20);
    g->SetOpset(kMicrosoftDomain, 1);
    b.Input("dy", ValueType(t, Dims{3, 5, 263})).Input("x", ValueType(t, Dims{3, 5, 263}));
    b.Op("Tanh", {"x"}, {"th"});
    b.Op("Mul", {"dy", "x"}, {"a"});
    b.Op("TanhGrad", {"a", "th"}, {"g"}, {}, kMicrosoftDomain);
    b.Op("Add", {"g", "dy"}, {"y"});
    b.Output("y").Output("g");
    return g;
  };
  auto narrow = [&](const Tensor& f) {
    if constexpr (std::is_same_v<T, float>) return f;
    else return Narrowed<T>(f);
  };
  const Tensor dy = narrow(RandomTensor<float>(shape, -2.5, 2.5, 11, 0.25));
  const Tensor x = narrow(RandomTensor<float>(shape, -2.5, 2.5, 12, 0.25));
  Run fused = RunGraph(build(), OptLevel::kAll, {"dy", "x"}, {dy, x}, 2);
  Run plain = RunGraph(build(), OptLevel::kExtended, {"dy", "x"}, {dy, x}, 2);
  ASSERT_EQ(fused.fused_nodes, 1);
  ASSERT_EQ(plain.fused_nodes, 0);
  ASSERT_EQ(fused.outputs.size(), 2u);
  ASSERT_EQ(plain.outputs.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(fused.outputs[o].dtype(), t);
    EXPECT_EQ(
        std::memcmp(fused.outputs[o].raw_data(), plain.outputs[o].raw_data(), fused.outputs[o].numel() * DTypeSize(t)),
        0)
        << "output " << o;
  }
  double worst_y = 0, worst_g = 0;  // error over its bound
  for (int64_t i = 0; i < NumElements(shape); ++i) {
    const double dv = At<T>(dy, i), xv = At<T>(x, i), th = std::tanh(xv), a = dv * xv;
    const double g = a * (1 - th * th), y = g + dv;
    const double bound_g = unit * (4 * std::abs(a) + std::abs(g)) + std::ldexp(std::abs(a), -18);
    worst_g = std::max(worst_g, std::abs(At<T>(fused.outputs[1], i) - g) / bound_g);
    worst_y = std::max(worst_y, std::abs(At<T>(fused.outputs[0], i) - y) / (bound_g + unit * std::abs(y) * (1 + unit)));
  }
  EXPECT_LE(worst_g, 1.0);
  EXPECT_LE(worst_y, 1.0);
}

TEST(FusedElementwiseKernelHalf, TanhGradInstructionEqualsTheKernelBitForBit) {
  CheckTanhGradChain<BFloat16>(DType::kBFloat16, std::ldexp(1.0, -8));
  CheckTanhGradChain<Float16>(DType::kFloat16, std::ldexp(1.0, -11));
  CheckTanhGradChain<float>(DType::kFloat32, std::ldexp(1.0, -24));
}

// kFusedMaxInputs inputs in one node, some broadcast along rows and columns (the broadcast walk
// carries every input's offset): a bfloat16 chain y = ((x0 * x1 + x2) * x3 + ...) over 12 inputs,
// fused into one node, equal bit for bit to the unfused kernels and within the chain's roundings
// of float64 (11 ops, each rounded once: |y - exact| <= 11 u sum of the partial results' sizes).
TEST(FusedElementwiseKernelHalf, TwelveInputsWithBroadcastingInOneNode) {
  ASSERT_EQ(kFusedMaxInputs, 12);
  const int64_t R = 7, C = 300;
  std::vector<Shape> shapes;
  for (int i = 0; i < 12; ++i) shapes.push_back(i % 4 == 1 ? Shape{C} : i % 4 == 3 ? Shape{R, 1} : Shape{R, C});
  auto build = [&] {
    auto g = std::make_unique<Graph>();
    GraphBuilder b(*g, 20);
    for (int i = 0; i < 12; ++i) {
      Dims d;
      for (int64_t v : shapes[i]) d.push_back(Dim(v));
      b.Input("x" + std::to_string(i), BF16(d));
    }
    std::string acc = "x0";
    for (int i = 1; i < 12; ++i) {
      const std::string next = i == 11 ? "y" : "t" + std::to_string(i);
      b.Op(i % 2 ? "Mul" : "Add", {acc, "x" + std::to_string(i)}, {next});
      acc = next;
    }
    b.Output("y");
    return g;
  };
  std::vector<std::string> names;
  std::vector<Tensor> feeds;
  for (int i = 0; i < 12; ++i) {
    names.push_back("x" + std::to_string(i));
    feeds.push_back(Narrowed<BFloat16>(RandomTensor<float>(shapes[i], 0.5, 1.5, 30 + i, 0.25)));
  }
  tob::Run fused = RunGraph(build(), OptLevel::kAll, names, feeds, 2);
  tob::Run plain = RunGraph(build(), OptLevel::kExtended, names, feeds, 2);
  ASSERT_EQ(fused.fused_nodes, 1);
  ASSERT_EQ(plain.fused_nodes, 0);
  ASSERT_EQ(fused.outputs.size(), 1u);
  ASSERT_EQ(std::memcmp(fused.outputs[0].raw_data(), plain.outputs[0].raw_data(), R * C * 2), 0);
  const double u = std::ldexp(1.0, -8);
  double worst = 0;  // error over its bound
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      auto at = [&](int i) {
        const int64_t k = shapes[i].size() == 1 ? c : shapes[i][1] == 1 ? r : r * C + c;
        return At<BFloat16>(feeds[i], k);
      };
      double acc = at(0), sizes = 0;
      for (int i = 1; i < 12; ++i) {
        acc = i % 2 ? acc * at(i) : acc + at(i);
        sizes += std::abs(acc);
      }
      // Each rounding's error is carried through at most five later factors below 1.5 (1.5^5 < 7.6).
      const double bound = 11.4 * u * sizes * (1 + u);
      worst = std::max(worst, std::abs(At<BFloat16>(fused.outputs[0], r * C + c) - acc) / bound);
    }
  EXPECT_LE(worst, 1.0);
}

// The bfloat16 rounding inside the instructions' loops (round_16bit.h) on the values where rounding
// is delicate: infinities, NaNs, subnormals, the largest finite values (a product overflows to inf)
// and products that land halfway between two bfloat16 values (ties to even). The fused node's bits
// must equal the unfused kernels'.
TEST(FusedElementwiseKernelHalf, SpecialValuesRoundAsTheUnfusedKernels) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {inf,     -inf,     nan,       -nan,       0.f,        -0.f,   1e-39f,
                           -3e-40f, 3.38e38f, -3.38e38f, 1.0078125f, 1.0234375f, 255.5f, -0.33203125f};
  std::vector<float> ws = {0.5f, 2.f, -1.f, 3.f, inf, 1e-38f, 1.00390625f, 1.5f, 1.0078125f, 1.99f};
  std::vector<BFloat16> x, w;
  for (size_t i = 0; i < 600; ++i) {
    // Beyond the special values: products of two 8-bit significands, many of them ties.
    x.push_back(BFloat16(i < xs.size() ? xs[i] : 1.f + static_cast<float>(i % 97) / 128.f));
    w.push_back(BFloat16(ws[i % ws.size()] * (i % 2 ? 1.f : -1.f)));
  }
  auto build = [] {
    auto g = std::make_unique<Graph>();
    GraphBuilder b(*g, 20);
    b.Input("x", BF16({600})).Input("w", BF16({600}));
    EXPECT_TRUE(g->AddInitializer("k", Tensor::FromVector<float>({0.3f}, {})).ok());
    b.Op("Mul", {"x", "w"}, {"u"});
    b.Op("Add", {"u", "x"}, {"v"});
    b.Op("Cast", {"v"}, {"vf"}, CastTo(DType::kFloat32));
    b.Op("Mul", {"vf", "k"}, {"y"});
    b.Op("Cast", {"y"}, {"yb"}, CastTo(DType::kBFloat16));
    b.Op("Div", {"yb", "w"}, {"z"});
    b.Output("v").Output("z");
    return g;
  };
  const Tensor xt = Tensor::FromVector<BFloat16>(x, {600}), wt = Tensor::FromVector<BFloat16>(w, {600});
  tob::Run fused = RunGraph(build(), OptLevel::kAll, {"x", "w"}, {xt, wt}, 1);
  tob::Run plain = RunGraph(build(), OptLevel::kExtended, {"x", "w"}, {xt, wt}, 1);
  ASSERT_EQ(fused.fused_nodes, 1);
  ASSERT_EQ(plain.fused_nodes, 0);
  ASSERT_EQ(fused.outputs.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(fused.outputs[o].dtype(), DType::kBFloat16);
    const uint16_t* f = static_cast<const uint16_t*>(fused.outputs[o].raw_data());
    const uint16_t* p = static_cast<const uint16_t*>(plain.outputs[o].raw_data());
    for (int64_t i = 0; i < 600; ++i) ASSERT_EQ(f[i], p[i]) << "output " << o << " element " << i;
  }
  // The cases do reach infinities, NaNs and subnormal results.
  int infs = 0, nans = 0, subnormals = 0;
  for (int64_t i = 0; i < 600; ++i) {
    const float v = At<BFloat16>(fused.outputs[0], i);
    infs += std::isinf(v);
    nans += std::isnan(v);
    subnormals += v != 0 && std::fpclassify(v) == FP_SUBNORMAL;
  }
  EXPECT_GT(infs, 0);
  EXPECT_GT(nans, 0);
  EXPECT_GT(subnormals, 0);
}

TEST(FusedElementwiseKernelHalf, RejectsOperandsOfAnotherTypeThanTheResult) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(*g);
  g->SetOpset(kTobDomain, 1);
  b.Input("x", BF16({4})).Input("y", F32({4}));
  b.Op(kFusedElementwiseOp, {"x", "y"}, {"z"}, Program({"Add"}, {0, 1, -1}, {2}, {kBF16, kF32, kBF16}), kTobDomain,
       "bad");
  b.Output("z");
  auto s = Session::Create(std::move(g), SessionOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("instruction 0 (Add) computes bfloat16 but operand 1 (register 1) is float32"),
            std::string::npos)
      << s.status().ToString();
}

TEST(FusedElementwiseKernelHalf, RejectsTypesOfTheWrongLengthOrKind) {
  for (const std::vector<int64_t>& types :
       {std::vector<int64_t>{kBF16, kBF16}, std::vector<int64_t>{kBF16, 11, kBF16}}) {
    auto g = std::make_unique<Graph>();
    GraphBuilder b(*g);
    g->SetOpset(kTobDomain, 1);
    b.Input("x", BF16({4}));
    b.Op(kFusedElementwiseOp, {"x"}, {"z"}, Program({"Cast", "Neg"}, {0, -1, -1, 1, -1, -1}, {2}, types), kTobDomain,
         "bad");
    b.Output("z");
    auto s = Session::Create(std::move(g), SessionOptions{});
    ASSERT_FALSE(s.ok());
    const std::string want = types.size() == 2
                                 ? "'types' must hold one element type per register (3), got 2"
                                 : "register 1 has type 11 (float64), expected float32, float16 or bfloat16";
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().ToString();
  }
}

}  // namespace
}  // namespace tob
