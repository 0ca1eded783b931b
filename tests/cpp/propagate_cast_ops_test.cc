// PropagateCastOps: golden Before/Expected tests per strategy and level (the graph text shows each
// value's dtype), the must-not-fire cases (float32 -> L -> float32 rounds, so it stays; level -1
// does nothing), and the numbers: a level-1 move gives bit-identical results, a level-2 move stays
// within the low type's rounding of a float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "ops/fused_elementwise_program.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;
using Strategy = CastPropagationOptions::Strategy;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF16 = DType::kFloat16;
constexpr DType kBF16 = DType::kBFloat16;

CastPropagationOptions Options(Strategy strategy, int level, std::vector<std::string> allow = {}, DType low = kF16) {
  CastPropagationOptions o;
  o.strategy = strategy;
  o.level = level;
  o.allow = std::move(allow);
  o.low_precision = low;
  return o;
}

AttributeMap To(DType t) { return {{"to", Attribute::Int(static_cast<int64_t>(t))}}; }

std::string Typed(const Graph& g) {
  GraphTextOptions o;
  o.show_types = true;
  return GraphToText(g, o);
}

// The pass alone, with the engine's schemas and kernels (the kernel check decides what may move),
// on a graph whose types were inferred first, as in the pipeline.
bool RunCastPass(Graph& g, const CastPropagationOptions& options) {
  Status inferred = InferShapes(g, OpSchemaRegistry::Global());
  EXPECT_TRUE(inferred.ok()) << inferred.ToString();
  PassContext ctx;
  bool changed = false;
  Status s = CreatePropagateCastOpsPass(options)->Run(g, ctx, &changed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Status valid = VerifyGraph(g, OpSchemaRegistry::Global());
  EXPECT_TRUE(valid.ok()) << valid.ToString() << "\n" << GraphToText(g);
  return changed;
}

// The expected graph's text with its types inferred, as the pass's output has them.
std::string Expected(Graph& g) {
  Status inferred = InferShapes(g, OpSchemaRegistry::Global());
  EXPECT_TRUE(inferred.ok()) << inferred.ToString();
  return Typed(g);
}

ValueType T(DType t, Dims dims) { return ValueType(t, std::move(dims)); }

// ---- strategy NONE: the reductions only ----

void BuildReductions(Graph& g) {
  testing::GraphBuilder b(g);
  b.Input("a", T(kF16, {2, 3})).Input("x", T(kF32, {2, 3}));
  b.Op("Cast", {"a"}, {"a_f"}, To(kF32));
  b.Op("Cast", {"a_f"}, {"a_h"}, To(kF16));   // float16 -> float32 -> float16: the identity
  b.Op("Cast", {"a_f"}, {"a_f2"}, To(kF32));  // a second float32 cast of a float32 value
  b.Op("Cast", {"x"}, {"x_h1"}, To(kF16));
  b.Op("Cast", {"x"}, {"x_h2"}, To(kF16));     // sibling of x_h1
  b.Op("Cast", {"x_h1"}, {"x_hf"}, To(kF32));  // float32 -> float16 -> float32 rounds: stays
  b.Op("Relu", {"a_h"}, {"r"});
  b.Op("Add", {"a_f2", "x_hf"}, {"s"});
  b.Op("Relu", {"x_h2"}, {"t"});
  b.Output("r").Output("s").Output("t");
}

TEST(OptimizerPropagateCastOps, GoldenNoneRemovesOnlyExactCasts) {
  Graph before;
  BuildReductions(before);
  EXPECT_TRUE(RunCastPass(before, Options(Strategy::kNone, 1)));

  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("a", T(kF16, {2, 3})).Input("x", T(kF32, {2, 3}));
  b.Op("Cast", {"a"}, {"a_f"}, To(kF32));
  b.Op("Cast", {"x"}, {"x_h"}, To(kF16));
  b.Op("Cast", {"x_h"}, {"x_hf"}, To(kF32));
  b.Op("Relu", {"a"}, {"r"});
  b.Op("Add", {"a_f", "x_hf"}, {"s"});
  b.Op("Relu", {"x_h"}, {"t"});
  b.Output("r").Output("s").Output("t");
  EXPECT_EQ(Typed(before), Expected(expected));
}

TEST(OptimizerPropagateCastOps, GoldenLevelMinusOneDoesNothing) {
  Graph before, expected;
  BuildReductions(before);
  BuildReductions(expected);
  EXPECT_FALSE(RunCastPass(before, Options(Strategy::kFloodFill, -1)));
  EXPECT_EQ(Typed(before), Expected(expected));
}

// ---- FLOOD_FILL ----

// An autocast graph: a low-precision value h goes to float32 for a Transpose and a Relu, then back
// to the low type for the next MatMul.
void BuildAutocastChain(Graph& g, DType low) {
  testing::GraphBuilder b(g);
  b.Input("h", T(low, {2, 3, 4})).Input("w", T(low, {3, 5}));
  b.Op("Cast", {"h"}, {"hf"}, To(kF32));
  b.Op("Transpose", {"hf"}, {"t"}, {{"perm", Attribute::Ints({0, 2, 1})}});
  b.Op("Relu", {"t"}, {"r"});
  b.Op("Cast", {"r"}, {"rh"}, To(low));
  b.Op("MatMul", {"rh", "w"}, {"y"});
  b.Output("y");
}

TEST(OptimizerPropagateCastOps, GoldenFloodFillLevel1MovesDataMovementIntoTheLowType) {
  for (DType low : {kF16, kBF16}) {
    Graph before;
    BuildAutocastChain(before, low);
    EXPECT_TRUE(RunCastPass(before, Options(Strategy::kFloodFill, 1, {}, low)));

    Graph expected;
    testing::GraphBuilder b(expected);
    b.Input("h", T(low, {2, 3, 4})).Input("w", T(low, {3, 5}));
    b.Op("Transpose", {"h"}, {"t"}, {{"perm", Attribute::Ints({0, 2, 1})}});
    b.Op("Relu", {"t"}, {"r"});
    b.Op("MatMul", {"r", "w"}, {"y"});
    b.Output("y");
    EXPECT_EQ(Typed(before), Expected(expected)) << DTypeName(low);
  }
}

TEST(OptimizerPropagateCastOps, GoldenFloodFillLevel0MovesOnlyTheAllowList) {
  Graph before, expected;
  BuildAutocastChain(before, kF16);
  BuildAutocastChain(expected, kF16);
  // Neither Transpose nor Relu is allowed at level 0 without an allow list.
  EXPECT_FALSE(RunCastPass(before, Options(Strategy::kFloodFill, 0)));
  EXPECT_EQ(Typed(before), Expected(expected));
}

// (a + b) -> Relu between float16 inputs and a float16 output: Add is a level-2 op.
void BuildAddRelu(Graph& g) {
  testing::GraphBuilder b(g);
  b.Input("a", T(kF16, {4})).Input("b", T(kF16, {4}));
  b.Op("Cast", {"a"}, {"af"}, To(kF32));
  b.Op("Cast", {"b"}, {"bf"}, To(kF32));
  b.Op("Add", {"af", "bf"}, {"s"});
  b.Op("Relu", {"s"}, {"r"});
  b.Op("Cast", {"r"}, {"out"}, To(kF16));
  b.Output("out");
}

TEST(OptimizerPropagateCastOps, GoldenFloodFillLevel1StopsAtAdd) {
  Graph before;
  BuildAddRelu(before);
  EXPECT_TRUE(RunCastPass(before, Options(Strategy::kFloodFill, 1)));
  // The float16 Cast moved above the Relu (up to the Add, which level 1 does not move).
  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("a", T(kF16, {4})).Input("b", T(kF16, {4}));
  b.Op("Cast", {"a"}, {"af"}, To(kF32));
  b.Op("Cast", {"b"}, {"bf"}, To(kF32));
  b.Op("Add", {"af", "bf"}, {"s"});
  b.Op("Cast", {"s"}, {"sh"}, To(kF16));
  b.Op("Relu", {"sh"}, {"out"});
  b.Output("out");
  EXPECT_EQ(Typed(before), Expected(expected));
}

TEST(OptimizerPropagateCastOps, GoldenFloodFillLevel2MovesAdd) {
  Graph before;
  BuildAddRelu(before);
  EXPECT_TRUE(RunCastPass(before, Options(Strategy::kFloodFill, 2)));
  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("a", T(kF16, {4})).Input("b", T(kF16, {4}));
  b.Op("Add", {"a", "b"}, {"s"});
  b.Op("Relu", {"s"}, {"out"});
  b.Output("out");
  EXPECT_EQ(Typed(before), Expected(expected));
}

TEST(OptimizerPropagateCastOps, GoldenFloodFillLevel0AllowListMovesAddOnly) {
  Graph before;
  BuildAddRelu(before);
  EXPECT_TRUE(RunCastPass(before, Options(Strategy::kFloodFill, 0, {"Add"})));
  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("a", T(kF16, {4})).Input("b", T(kF16, {4}));
  b.Op("Add", {"a", "b"}, {"s"});
  b.Op("Cast", {"s"}, {"sf"}, To(kF32));
  b.Op("Relu", {"sf"}, {"r"});
  b.Op("Cast", {"r"}, {"out"}, To(kF16));
  b.Output("out");
  EXPECT_EQ(Typed(before), Expected(expected));
}

TEST(OptimizerPropagateCastOps, GoldenFloodFillLevel1KeepsAValueOtherReadersNeedInFloat32) {
  // r feeds a float16 Cast and also a float32 graph output: at level 1 the Relu stays float32.
  auto build = [](Graph& g) {
    testing::GraphBuilder b(g);
    b.Input("x", T(kF32, {4}));
    b.Op("Relu", {"x"}, {"r"});
    b.Op("Cast", {"r"}, {"rh"}, To(kF16));
    b.Op("Neg", {"rh"}, {"n"});
    b.Output("n").Output("r");
  };
  Graph before, expected;
  build(before);
  build(expected);
  EXPECT_FALSE(RunCastPass(before, Options(Strategy::kFloodFill, 1)));
  EXPECT_EQ(Typed(before), Expected(expected));
}

// ---- INSERT_AND_REDUCE ----

TEST(OptimizerPropagateCastOps, GoldenInsertAndReduceCastsAroundAllowedOps) {
  Graph before;
  {
    testing::GraphBuilder b(before);
    b.Input("x", T(kF32, {2, 3}));
    b.Op("Relu", {"x"}, {"r"});
    b.Op("Transpose", {"r"}, {"t"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("Softmax", {"t"}, {"y"});  // not an allowed op: stays float32
    b.Output("y");
  }
  EXPECT_TRUE(RunCastPass(before, Options(Strategy::kInsertAndReduce, 1)));
  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("x", T(kF32, {2, 3}));
  b.Op("Cast", {"x"}, {"xh"}, To(kF16));
  b.Op("Relu", {"xh"}, {"r"});
  b.Op("Transpose", {"r"}, {"t"}, {{"perm", Attribute::Ints({1, 0})}});
  b.Op("Cast", {"t"}, {"tf"}, To(kF32));
  b.Op("Softmax", {"tf"}, {"y"});
  b.Output("y");
  EXPECT_EQ(Typed(before), Expected(expected));
}

TEST(OptimizerPropagateCastOps, InsertAndReduceKeepsGraphOutputTypes) {
  Graph g;
  testing::GraphBuilder b(g);
  b.Input("x", T(kF32, {4}));
  b.Op("Relu", {"x"}, {"r"});
  b.Output("r");
  EXPECT_TRUE(RunCastPass(g, Options(Strategy::kInsertAndReduce, 1)));
  EXPECT_EQ(g.outputs()[0]->type().dtype, kF32);
  EXPECT_EQ(g.outputs()[0]->producer()->op_type(), "Cast");
}

// ---- the numbers, through a session ----

std::vector<Tensor> RunSession(std::unique_ptr<Graph> g, const CastPropagationOptions& casts,
                               const std::vector<std::string>& names, const std::vector<Tensor>& feeds,
                               int* casts_left) {
  SessionOptions opts;
  opts.intra_op_threads = 1;
  opts.propagate_cast_ops = casts;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  // Casts left as nodes, and those ElementwiseFusion folded into a FusedElementwise program
  // (where each still rounds as the Cast node does).
  *casts_left = 0;
  for (const Node* n : s.value()->graph().nodes()) {
    *casts_left += n->op_type() == "Cast";
    std::vector<std::string> ops;
    if (n->op_type() == kFusedElementwiseOp && n->GetAttr("ops", &ops).ok())
      *casts_left += static_cast<int>(std::count(ops.begin(), ops.end(), "Cast"));
  }
  std::vector<Tensor> out;
  Status run = s.value()->Run(names, feeds, {}, &out);
  EXPECT_TRUE(run.ok()) << run.ToString();
  return out;
}

TEST(OptimizerPropagateCastOps, Level1GivesBitIdenticalResults) {
  const Tensor h = RandomTensor<Float16>({2, 3, 4}, -2, 2, 11), w = RandomTensor<Float16>({3, 5}, -1, 1, 12);
  int kept = 0, moved = 0;
  auto plain = std::make_unique<Graph>();
  BuildAutocastChain(*plain, kF16);
  auto optimized = std::make_unique<Graph>();
  BuildAutocastChain(*optimized, kF16);
  std::vector<Tensor> a = RunSession(std::move(plain), Options(Strategy::kFloodFill, -1), {"h", "w"}, {h, w}, &kept);
  std::vector<Tensor> b =
      RunSession(std::move(optimized), Options(Strategy::kFloodFill, 1), {"h", "w"}, {h, w}, &moved);
  EXPECT_EQ(kept, 2);
  EXPECT_EQ(moved, 0);
  ASSERT_EQ(a[0].numel(), b[0].numel());
  for (int64_t i = 0; i < a[0].numel(); ++i) EXPECT_EQ(a[0].data<Float16>()[i].bits, b[0].data<Float16>()[i].bits) << i;
}

TEST(OptimizerPropagateCastOps, Level2StaysWithinFloat16Rounding) {
  const Tensor a = RandomTensor<Float16>({4}, -4, 4, 21), b = RandomTensor<Float16>({4}, -4, 4, 22);
  auto g = std::make_unique<Graph>();
  BuildAddRelu(*g);
  int casts = 0;
  std::vector<Tensor> out = RunSession(std::move(g), Options(Strategy::kFloodFill, 2), {"a", "b"}, {a, b}, &casts);
  EXPECT_EQ(casts, 0);
  ASSERT_EQ(out.size(), 1u);
  for (int64_t i = 0; i < 4; ++i) {
    const double ref = std::max(0.0, double(float(a.data<Float16>()[i])) + double(float(b.data<Float16>()[i])));
    // The float16 Add rounds once, as the float32 Add followed by the Cast to float16 did: half an
    // ulp of float16 (2^-11 relative).
    EXPECT_NEAR(float(out[0].data<Float16>()[i]), ref, std::fabs(ref) * std::ldexp(1.0, -11) + 1e-7) << i;
  }
}

}  // namespace
}  // namespace tob
