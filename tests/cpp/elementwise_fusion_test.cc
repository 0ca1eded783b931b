// ElementwiseFusion and the FusedElementwise kernel. Golden tests (Before / Expected) show which
// nodes fuse and which must not; the kernel tests run a fused session against a float64 reference
// over every broadcast pattern, and against the unfused session (the same per-element math, so
// the same float32 results).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

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

AttributeMap Program(std::vector<std::string> ops, std::vector<int64_t> operands, std::vector<int64_t> outputs) {
  return FusedProgramAttributes(std::move(ops), std::move(operands), std::move(outputs));
}

std::string AfterPass(Graph& g) {
  testing::RunPassWithBuiltins(CreateElementwiseFusionPass(), g);
  return GraphToText(g);
}

// ---- golden ----

TEST(OptimizerElementwiseFusion, GoldenSwiGluBecomesOneNode) {
  // LLaMA's MLP activation: silu(gate) * up = gate * sigmoid(gate) * up.
  Graph before;
  GraphBuilder b(before);
  b.Input("gate", F32({2, 8})).Input("up", F32({2, 8}));
  b.Op("Sigmoid", {"gate"}, {"s"}, {}, "", "sigmoid");
  b.Op("Mul", {"gate", "s"}, {"silu"}, {}, "", "mul_silu");
  b.Op("Mul", {"silu", "up"}, {"h"}, {}, "", "mul_up");
  b.Output("h");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("gate", F32({2, 8})).Input("up", F32({2, 8}));
  // Registers: 0 gate, 1 up, 2 s, 3 silu, 4 h.
  e.Op(kFusedElementwiseOp, {"gate", "up"}, {"h"},
       Program({"Sigmoid", "Mul", "Mul"}, {0, -1, -1, 0, 2, -1, 3, 1, -1}, {4}), kTobDomain, "mul_up_fused__1");
  e.Output("h");
  // The graph output keeps its external name (values are printed by it; intermediates as %n).
  EXPECT_EQ(AfterPass(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusion, GoldenAValueReadOutsideBecomesAnOutput) {
  // t = tanh(x + b) is also read by a MatMul (a saved activation): the fused node writes it too.
  Graph before;
  GraphBuilder b(before);
  b.Input("x", F32({4, 4})).Input("w", F32({4, 4}));
  b.Const("bias", {0.5f, -0.25f, 1.f, 2.f}, {4});
  b.Op("Add", {"x", "bias"}, {"a"}, {}, "", "add");
  b.Op("Tanh", {"a"}, {"t"}, {}, "", "tanh");
  b.Op("Mul", {"t", "t"}, {"sq"}, {}, "", "square");
  b.Op("MatMul", {"t", "w"}, {"p"}, {}, "", "matmul");
  b.Output("sq").Output("p");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("x", F32({4, 4})).Input("w", F32({4, 4}));
  e.Const("bias", {0.5f, -0.25f, 1.f, 2.f}, {4});
  e.Op(kFusedElementwiseOp, {"x", "bias"}, {"t", "sq"},
       Program({"Add", "Tanh", "Mul"}, {0, 1, -1, 2, -1, -1, 3, 3, -1}, {3, 4}), kTobDomain, "square_fused__2");
  e.Op("MatMul", {"t", "w"}, {"p"}, {}, "", "matmul");
  e.Output("sq").Output("p");
  EXPECT_EQ(AfterPass(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusion, GoldenShapesSplitGroups) {
  // RMSNorm's tail: rstd = 1 / sqrt(var + eps) is [4, 1], y = x * rstd * w is [4, 8]. The two
  // shapes fuse separately (the [4, 1] chain is computed once per row, not once per element).
  Graph before;
  GraphBuilder b(before);
  b.Input("x", F32({4, 8})).Input("var", F32({4, 1})).Input("w", F32({8}));
  b.Const("eps", {1e-6f}, {});
  b.Op("Add", {"var", "eps"}, {"ve"}, {}, "", "add_eps");
  b.Op("Sqrt", {"ve"}, {"sd"}, {}, "", "sqrt");
  b.Op("Reciprocal", {"sd"}, {"rstd"}, {}, "", "recip");
  b.Op("Mul", {"x", "rstd"}, {"xn"}, {}, "", "mul_rstd");
  b.Op("Mul", {"xn", "w"}, {"y"}, {}, "", "mul_w");
  b.Output("y");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("x", F32({4, 8})).Input("var", F32({4, 1})).Input("w", F32({8}));
  e.Const("eps", {1e-6f}, {});
  e.Op(kFusedElementwiseOp, {"var", "eps"}, {"rstd"},
       Program({"Add", "Sqrt", "Reciprocal"}, {0, 1, -1, 2, -1, -1, 3, -1, -1}, {4}), kTobDomain, "recip_fused__1");
  e.Op(kFusedElementwiseOp, {"x", "rstd", "w"}, {"y"}, Program({"Mul", "Mul"}, {0, 1, -1, 3, 2, -1}, {4}), kTobDomain,
       "mul_w_fused__3");
  e.Output("y");
  EXPECT_EQ(AfterPass(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusion, GoldenMustNotFire) {
  // Each pair below is kept apart by one rule: a dtype change (Cast), an integer op, a recompute
  // copy beside an original, a group that would be non-convex (a -> MatMul -> c, and a -> c), and
  // a value kept by name.
  auto build = [](Graph& g) {
    GraphBuilder b(g);
    b.Input("x", F32({4, 4})).Input("i", ValueType(DType::kInt64, Dims{4, 4}));
    b.Op("Relu", {"x"}, {"r"}, {}, "", "relu");
    b.Op("Cast", {"r"}, {"rd"}, {{"to", Attribute::Int(11)}}, "", "cast");  // float64
    b.Op("Neg", {"rd"}, {"nd"}, {}, "", "neg64");
    b.Op("Neg", {"i"}, {"ni"}, {}, "", "neg_int");
    b.Op("Abs", {"ni"}, {"ai"}, {}, "", "abs_int");
    b.Op("Exp", {"x"}, {"ex"}, {}, "", "exp");
    Node* copy = b.Op("Log", {"ex"}, {"lg"}, {}, "", "log_copy");
    copy->set_recompute(true);
    b.Op("Sigmoid", {"x"}, {"a"}, {}, "", "sigmoid");
    b.Op("MatMul", {"a", "x"}, {"m"}, {}, "", "matmul");
    b.Op("Add", {"a", "m"}, {"c"}, {}, "", "add_after_matmul");
    b.Op("Tanh", {"x"}, {"kept"}, {}, "", "tanh_kept");
    b.Op("Abs", {"kept"}, {"k2"}, {}, "", "abs_of_kept");
    b.Output("nd").Output("ai").Output("lg").Output("c").Output("k2");
  };
  Graph before, expected;
  build(before);
  build(expected);
  ASSERT_TRUE(InferShapes(before, OpSchemaRegistry::Global()).ok());
  PassContext ctx;
  ctx.keep_values = {"kept"};
  bool changed = true;
  ASSERT_TRUE(CreateElementwiseFusionPass()->Run(before, ctx, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerElementwiseFusion, TwoGroupsThatWouldFormACycleFuseOnlyOne) {
  // A = {exp, add_a} and B = {tanh, add_b} are each convex, but A feeds B through one MatMul and B
  // feeds A through another: fusing both would make a cycle, so only the first is fused.
  Graph g;
  GraphBuilder b(g);
  b.Input("x", F32({4, 4})).Input("y", F32({4, 4})).Input("w", F32({4, 4}));
  b.Op("Exp", {"x"}, {"a1"}, {}, "", "exp");
  b.Op("Tanh", {"y"}, {"b1"}, {}, "", "tanh");
  b.Op("MatMul", {"a1", "w"}, {"m1"}, {}, "", "mm_a");
  b.Op("MatMul", {"b1", "w"}, {"m2"}, {}, "", "mm_b");
  b.Op("Add", {"a1", "m2"}, {"a2"}, {}, "", "add_a");
  b.Op("Add", {"b1", "m1"}, {"b2"}, {}, "", "add_b");
  b.Output("a2").Output("b2");
  EXPECT_TRUE(testing::RunPassWithBuiltins(CreateElementwiseFusionPass(), g));  // verifies: no cycle
  int fused = 0, adds = 0;
  for (const Node* n : g.nodes()) {
    fused += n->op_type() == kFusedElementwiseOp;
    adds += n->op_type() == "Add";
  }
  EXPECT_EQ(fused, 1);
  EXPECT_EQ(adds, 1);
}

TEST(OptimizerElementwiseFusion, OnByDefaultAndTheEnvironmentVariableTurnsItOff) {
  auto has_fusion = [](OptLevel level = OptLevel::kAll) {
    const PassManager pipeline = BuildPipeline(level);
    bool found = false;
    for (const auto& p : pipeline.passes()) found |= std::string(p->name()) == "ElementwiseFusion";
    return found;
  };
  // On at level 99 by default; =0 turns it off (A/B runs). Other values are refused when a session is
  // created (env_switch_test.cc).
  unsetenv("TOB_ELEMENTWISE_FUSION");
  EXPECT_TRUE(has_fusion());
  EXPECT_FALSE(has_fusion(OptLevel::kExtended));
  setenv("TOB_ELEMENTWISE_FUSION", "0", 1);
  EXPECT_FALSE(has_fusion());
  setenv("TOB_ELEMENTWISE_FUSION", "1", 1);
  EXPECT_TRUE(has_fusion());
  unsetenv("TOB_ELEMENTWISE_FUSION");
}

TEST(OptimizerElementwiseFusion, OffWhenTheContextSaysSo) {
  Graph g;
  GraphBuilder b(g);
  b.Input("x", F32({4}));
  b.Op("Neg", {"x"}, {"n"});
  b.Op("Exp", {"n"}, {"y"});
  b.Output("y");
  ASSERT_TRUE(InferShapes(g, OpSchemaRegistry::Global()).ok());
  PassContext ctx;
  ctx.elementwise_fusion = false;
  bool changed = true;
  ASSERT_TRUE(CreateElementwiseFusionPass()->Run(g, ctx, &changed).ok());
  EXPECT_FALSE(changed);
}

// ---- the kernel, through a session ----

struct Run {
  std::vector<Tensor> outputs;
  int fused_nodes = 0;
  int nodes = 0;
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
  for (const Node* n : s.value()->graph().nodes()) {
    r.fused_nodes += n->op_type() == kFusedElementwiseOp;
    ++r.nodes;
  }
  Status st = s.value()->Run(names, feeds, {}, &r.outputs);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

// y = Where(c, sigmoid(x) * row + col, -mid / s) + gelu(x), z = exp(-(x * x)) over x [A, B, C, D]
// with every broadcast pattern: row [D], col [A, B, C, 1], mid [1, B, 1, D], scalar s [], and a
// bool condition [1, 1, C, 1].
std::unique_ptr<Graph> BroadcastGraph(const Shape& x_shape) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(*g, 20);
  const int64_t A = x_shape[0], B = x_shape[1], C = x_shape[2], D = x_shape[3];
  b.Input("x", F32({A, B, C, D})).Input("row", F32({D})).Input("col", F32({A, B, C, 1}));
  b.Input("mid", F32({1, B, 1, D})).Input("s", F32({})).Input("c", ValueType(DType::kBool, Dims{1, 1, C, 1}));
  b.Op("Sigmoid", {"x"}, {"sg"});
  b.Op("Mul", {"sg", "row"}, {"sr"});
  b.Op("Add", {"sr", "col"}, {"t"});
  b.Op("Neg", {"mid"}, {"nm"});
  b.Op("Div", {"nm", "s"}, {"q"});
  b.Op("Where", {"c", "t", "q"}, {"w"});
  b.Op("Gelu", {"x"}, {"ge"});
  b.Op("Add", {"w", "ge"}, {"y"});
  b.Op("Mul", {"x", "x"}, {"xx"});
  b.Op("Neg", {"xx"}, {"nxx"});
  b.Op("Exp", {"nxx"}, {"z"});
  b.Output("y").Output("z");
  return g;
}

void CheckBroadcastPatterns(const Shape& x_shape, int threads) {
  const int64_t A = x_shape[0], B = x_shape[1], C = x_shape[2], D = x_shape[3];
  const Tensor x = RandomTensor<float>(x_shape, -3, 3, 1), row = RandomTensor<float>({D}, -2, 2, 2),
               col = RandomTensor<float>({A, B, C, 1}, -2, 2, 3), mid = RandomTensor<float>({1, B, 1, D}, -2, 2, 4),
               s = Tensor::FromVector<float>({1.75f}, {});
  Tensor c = Tensor::Allocate(DType::kBool, {1, 1, C, 1}, CpuAllocator::Default()).value();
  for (int64_t k = 0; k < C; ++k) c.data<bool>()[k] = (k % 3) != 1;
  const std::vector<std::string> names = {"x", "row", "col", "mid", "s", "c"};
  const std::vector<Tensor> feeds = {x, row, col, mid, s, c};
  Run fused = RunGraph(BroadcastGraph(x_shape), OptLevel::kAll, names, feeds, threads);
  Run plain = RunGraph(BroadcastGraph(x_shape), OptLevel::kExtended, names, feeds, threads);
  // Two groups of the output shape (y's and z's share only x, which is not a fusion edge) and the
  // [1, B, 1, D] chain -mid / s, which has a shape of its own.
  EXPECT_EQ(fused.fused_nodes, 3);
  EXPECT_EQ(plain.fused_nodes, 0);
  ASSERT_EQ(fused.outputs.size(), 2u);
  ASSERT_EQ(fused.outputs[0].shape(), x_shape);
  const float* y = fused.outputs[0].data<float>();
  const float* z = fused.outputs[1].data<float>();
  double worst = 0;
  for (int64_t a = 0; a < A; ++a)
    for (int64_t bb = 0; bb < B; ++bb)
      for (int64_t cc = 0; cc < C; ++cc)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t i = ((a * B + bb) * C + cc) * D + d;
          const double xv = x.data<float>()[i];
          const double t =
              1.0 / (1.0 + std::exp(-xv)) * row.data<float>()[d] + col.data<float>()[(a * B + bb) * C + cc];
          const double q = -double(mid.data<float>()[bb * D + d]) / 1.75;
          const double ref_y = (c.data<bool>()[cc] ? t : q) + 0.5 * xv * (1.0 + std::erf(xv / std::sqrt(2.0)));
          const double ref_z = std::exp(-xv * xv);
          worst = std::max(worst, std::abs(y[i] - ref_y) / (1.0 + std::abs(ref_y)));
          worst = std::max(worst, std::abs(z[i] - ref_z) / (1.0 + std::abs(ref_z)));
        }
  EXPECT_LT(worst, 2e-6) << "largest relative error against float64";
  // The same per-element math as the unfused kernels: equal float32 results.
  for (size_t o = 0; o < 2; ++o)
    for (int64_t i = 0; i < fused.outputs[o].numel(); ++i)
      ASSERT_EQ(fused.outputs[o].data<float>()[i], plain.outputs[o].data<float>()[i]) << "output " << o << " at " << i;
}

TEST(FusedElementwiseKernel, EveryBroadcastPatternMatchesFloat64) { CheckBroadcastPatterns({2, 3, 5, 7}, 1); }

TEST(FusedElementwiseKernel, LongRowsAcrossBlocksAndThreads) { CheckBroadcastPatterns({2, 2, 3, 1300}, 2); }

TEST(FusedElementwiseKernel, RejectsAProgramReadingAnUndefinedRegister) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(*g);
  g->SetOpset(kTobDomain, 1);
  b.Input("x", F32({4}));
  b.Op(kFusedElementwiseOp, {"x"}, {"y"}, Program({"Exp", "Mul"}, {0, -1, -1, 1, 3, -1}, {2}), kTobDomain, "bad");
  b.Output("y");
  SessionOptions opts;
  auto s = Session::Create(std::move(g), opts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("instruction 1 (Mul) reads register 3"), std::string::npos)
      << s.status().ToString();
}

}  // namespace
}  // namespace tob
