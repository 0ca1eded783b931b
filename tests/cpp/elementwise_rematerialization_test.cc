// ElementwiseRematerialization: golden tests (Before / Expected) of which values a FusedElementwise
// consumer recomputes from its producer's inputs and which it must keep reading; a training
// backward's tanh-GELU gradient (the recomputed layer of the memory optimizer, in miniature) run
// with the pass on and off, against float64 and bit for bit against each other.
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

bool RunPass(Graph& g, std::vector<std::string> keep = {}) {
  EXPECT_TRUE(InferShapes(g, OpSchemaRegistry::Global()).ok());
  PassContext ctx;
  ctx.keep_values = std::move(keep);
  bool changed = false;
  Status s = CreateElementwiseRematerializationPass()->Run(g, ctx, &changed);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Status valid = VerifyGraph(g, OpSchemaRegistry::Global());
  EXPECT_TRUE(valid.ok()) << valid.ToString() << "\n" << GraphToText(g);
  return changed;
}

// The producer P computes s = x / 2, t = tanh(x), u = 1 + t and h = s * u (the GELU's pieces);
// h goes to a MatMul, s, t and u only to the gradient's node C.
void BuildGeluPieces(Graph& g, bool h_only_to_matmul = true) {
  GraphBuilder b(g);
  g.SetOpset(kTobDomain, 1);
  b.Input("x", F32({4, 8})).Input("dy", F32({4, 8})).Input("w", F32({8, 8}));
  b.Const("half", {0.5f}, {}).Const("one", {1.f}, {});
  // Registers: 0 x, 1 half, 2 one; 3 s, 4 t, 5 u, 6 h.
  b.Op(kFusedElementwiseOp, {"x", "half", "one"}, {"s", "t", "u", "h"},
       Program({"Mul", "Tanh", "Add", "Mul"}, {0, 1, -1, 0, -1, -1, 4, 2, -1, 3, 5, -1}, {3, 4, 5, 6}), kTobDomain,
       "gelu");
  b.Op("MatMul", {"h", "w"}, {"m"}, {}, "", "matmul");
  // Registers: 0 dy, 1 s, 2 t, 3 u; 4 dy (1 - t^2), 5 that * s, 6 dy * u, 7 the sum.
  b.Op(kFusedElementwiseOp, {"dy", "s", "t", "u"}, {"g"},
       Program({"TanhGrad", "Mul", "Mul", "Add"}, {0, 2, -1, 4, 1, -1, 0, 3, -1, 5, 6, -1}, {7}), kTobDomain, "grad");
  b.Output("m").Output("g");
  if (!h_only_to_matmul) b.Output("s");
}

TEST(OptimizerElementwiseRemat, GoldenGeluPiecesRecomputedFromX) {
  Graph before;
  BuildGeluPieces(before);

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("x", F32({4, 8})).Input("dy", F32({4, 8})).Input("w", F32({8, 8}));
  e.Const("half", {0.5f}, {}).Const("one", {1.f}, {});
  // P keeps h alone (all four instructions compute it).
  e.Op(kFusedElementwiseOp, {"x", "half", "one"}, {"h"},
       Program({"Mul", "Tanh", "Add", "Mul"}, {0, 1, -1, 0, -1, -1, 4, 2, -1, 3, 5, -1}, {6}), kTobDomain,
       "gelu_remat__3");
  e.Op("MatMul", {"h", "w"}, {"m"}, {}, "", "matmul");
  // C reads x and the constants: registers 0 dy, 1 x, 2 half, 3 one; 4 s, 5 t, 6 u, then its own.
  e.Op(kFusedElementwiseOp, {"dy", "x", "half", "one"}, {"g"},
       Program({"Mul", "Tanh", "Add", "TanhGrad", "Mul", "Mul", "Add"},
               {1, 2, -1, 1, -1, -1, 5, 3, -1, 0, 5, -1, 7, 4, -1, 0, 6, -1, 8, 9, -1}, {10}),
       kTobDomain, "grad_remat__1");
  e.Output("m").Output("g");
  EXPECT_TRUE(RunPass(before));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerElementwiseRemat, GoldenAProducerLeftWithNoOutputIsRemoved) {
  // P's only output, e = exp(x) + 1, is read by C alone, and C already reads x: nothing is left
  // to P, and C computes e itself.
  Graph before;
  GraphBuilder b(before);
  before.SetOpset(kTobDomain, 1);
  b.Input("x", F32({4, 8})).Input("w", F32({8, 8}));
  b.Const("one", {1.f}, {});
  b.Op(kFusedElementwiseOp, {"x", "one"}, {"e"}, Program({"Exp", "Add"}, {0, -1, -1, 2, 1, -1}, {3}), kTobDomain, "p");
  b.Op("MatMul", {"x", "w"}, {"m"}, {}, "", "matmul");
  b.Op(kFusedElementwiseOp, {"m", "e", "x"}, {"y"}, Program({"Mul", "Sub"}, {0, 1, -1, 3, 2, -1}, {4}), kTobDomain,
       "c");
  b.Output("y");

  Graph expected;
  GraphBuilder e(expected);
  expected.SetOpset(kTobDomain, 1);
  e.Input("x", F32({4, 8})).Input("w", F32({8, 8}));
  e.Const("one", {1.f}, {});
  e.Op("MatMul", {"x", "w"}, {"m"}, {}, "", "matmul");
  // Registers: 0 m, 1 x, 2 one; 3 exp, 4 e, 5 m * e, 6 - x.
  e.Op(kFusedElementwiseOp, {"m", "x", "one"}, {"y"},
       Program({"Exp", "Add", "Mul", "Sub"}, {1, -1, -1, 3, 2, -1, 0, 4, -1, 5, 1, -1}, {6}), kTobDomain, "c_remat__1");
  e.Output("y");
  EXPECT_TRUE(RunPass(before));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerElementwiseRemat, GoldenMustNotFire) {
  // Each consumer below keeps reading its value: (1) t is also read by a MatMul, so it stays
  // materialised anyway; (2) one value for one leaf of its size (z) that would otherwise die at
  // the producer (no byte saved); (3) a value broadcast into the consumer ([4, 1] into [4, 8]: it
  // would be recomputed per element); (4) a plain Tanh's output (no fused program to copy); (5)
  // a value kept by name.
  auto build = [](Graph& g) {
    GraphBuilder b(g);
    g.SetOpset(kTobDomain, 1);
    b.Input("x", F32({4, 8})).Input("y", F32({4, 8})).Input("z", F32({4, 8})).Input("r", F32({4, 1}));
    b.Input("w", F32({8, 8}));
    b.Const("one", {1.f}, {});
    b.Op(kFusedElementwiseOp, {"x", "one"}, {"t1"}, Program({"Tanh", "Add"}, {0, -1, -1, 2, 1, -1}, {3}), kTobDomain,
         "p1");
    b.Op("MatMul", {"t1", "w"}, {"m1"}, {}, "", "mm1");
    b.Op(kFusedElementwiseOp, {"y", "t1"}, {"c1"}, Program({"Mul", "Neg"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain,
         "c1");
    b.Op(kFusedElementwiseOp, {"z", "one"}, {"t2"}, Program({"Exp", "Add"}, {0, -1, -1, 2, 1, -1}, {3}), kTobDomain,
         "p2");
    b.Op(kFusedElementwiseOp, {"x", "t2"}, {"c2"}, Program({"Mul", "Neg"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain,
         "c2");
    b.Op(kFusedElementwiseOp, {"r", "one"}, {"t3"}, Program({"Exp", "Add"}, {0, -1, -1, 2, 1, -1}, {3}), kTobDomain,
         "p3");
    b.Op(kFusedElementwiseOp, {"x", "t3"}, {"c3"}, Program({"Mul", "Neg"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain,
         "c3");
    b.Op("Tanh", {"y"}, {"t4"}, {}, "", "p4");
    b.Op(kFusedElementwiseOp, {"x", "t4"}, {"c4"}, Program({"Mul", "Neg"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain,
         "c4");
    b.Op(kFusedElementwiseOp, {"x", "one"}, {"t5"}, Program({"Sigmoid", "Add"}, {0, -1, -1, 2, 1, -1}, {3}), kTobDomain,
         "p5");
    b.Op(kFusedElementwiseOp, {"x", "t5"}, {"c5"}, Program({"Mul", "Neg"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain,
         "c5");
    b.Output("m1").Output("c1").Output("c2").Output("c3").Output("c4").Output("c5");
  };
  Graph before, expected;
  build(before);
  build(expected);
  EXPECT_FALSE(RunPass(before, {"t5"}));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerElementwiseRemat, AValueWhoseLeafLivesOnAnywayIsRecomputed) {
  // One value for one leaf (case (2) above), but the leaf y is read after the consumer (by an
  // Add), so it is alive there anyway: recomputing t frees t and holds nothing longer.
  Graph g;
  GraphBuilder b(g);
  g.SetOpset(kTobDomain, 1);
  b.Input("x", F32({4, 8})).Input("y", F32({4, 8})).Input("w", F32({8, 8}));
  b.Const("one", {1.f}, {});
  b.Op(kFusedElementwiseOp, {"y", "one"}, {"t"}, Program({"Exp", "Add"}, {0, -1, -1, 2, 1, -1}, {3}), kTobDomain, "p");
  b.Op(kFusedElementwiseOp, {"x", "t"}, {"c"}, Program({"Mul", "Neg"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain, "c");
  b.Op("MatMul", {"c", "w"}, {"m"}, {}, "", "mm");
  b.Op("Add", {"y", "m"}, {"m2"}, {}, "", "add_y");
  b.Output("m2");
  EXPECT_TRUE(RunPass(g));
  int fused = 0;
  for (const Node* n : g.nodes()) {
    if (n->op_type() != kFusedElementwiseOp) continue;
    ++fused;
    std::vector<std::string> ops;
    ASSERT_TRUE(n->GetAttr("ops", &ops).ok());
    EXPECT_EQ(ops, (std::vector<std::string>{"Exp", "Add", "Mul", "Neg"}));
    ASSERT_EQ(n->inputs().size(), 3u);
    EXPECT_EQ(n->input(0)->name(), "x");
    EXPECT_EQ(n->input(1)->name(), "y");
  }
  EXPECT_EQ(fused, 1);
}

TEST(OptimizerElementwiseRemat, NoPointHoldsMoreThanBefore) {
  // Two producers for one consumer. p1 (early) writes v1 from a and b, both dying at p1: taking
  // v1 would hold a and b (2 tensors) from p1 to c for v1 (1), more bytes until p2 runs, even
  // though p2's three values, recomputed from z (read by c anyway), free more than that in total.
  // Only p2's values are taken.
  Graph g;
  GraphBuilder b(g);
  g.SetOpset(kTobDomain, 1);
  b.Input("a", F32({4, 8})).Input("b", F32({4, 8})).Input("z", F32({4, 8})).Input("w", F32({8, 8}));
  b.Op(kFusedElementwiseOp, {"a", "b"}, {"v1"}, Program({"Mul", "Exp"}, {0, 1, -1, 2, -1, -1}, {3}), kTobDomain, "p1");
  b.Op("MatMul", {"z", "w"}, {"m"}, {}, "", "mm");
  b.Op(kFusedElementwiseOp, {"m"}, {"q1", "q2", "q3"},
       Program({"Tanh", "Sigmoid", "Exp"}, {0, -1, -1, 0, -1, -1, 0, -1, -1}, {1, 2, 3}), kTobDomain, "p2");
  b.Op(kFusedElementwiseOp, {"v1", "q1", "q2", "q3", "m"}, {"c"},
       Program({"Add", "Add", "Add", "Mul"}, {0, 1, -1, 5, 2, -1, 6, 3, -1, 7, 4, -1}, {8}), kTobDomain, "c");
  b.Output("c");
  EXPECT_TRUE(RunPass(g));
  const Node* c = nullptr;
  for (const Node* n : g.nodes())
    if (n->op_type() == kFusedElementwiseOp && n->name().rfind("c_remat", 0) == 0) c = n;
  ASSERT_NE(c, nullptr) << GraphToText(g);
  std::vector<std::string> inputs;
  for (const Value* v : c->inputs()) inputs.push_back(v->name());
  EXPECT_EQ(inputs, (std::vector<std::string>{"v1", "m"}));
  EXPECT_NE(g.FindValue("v1")->producer(), nullptr);  // p1 stays
}

TEST(OptimizerElementwiseRemat, OnByDefaultAfterElementwiseFusionAndTheSwitchTurnsItOff) {
  auto passes = [] {
    std::vector<std::string> names;
    const PassManager pipeline = BuildPipeline(OptLevel::kAll);
    for (const auto& p : pipeline.passes()) names.push_back(p->name());
    return names;
  };
  unsetenv("TOB_ELEMENTWISE_REMAT");
  std::vector<std::string> names = passes();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[names.size() - 2], "ElementwiseFusion");
  EXPECT_EQ(names.back(), "ElementwiseRematerialization");
  setenv("TOB_ELEMENTWISE_REMAT", "0", 1);
  EXPECT_EQ(passes().back(), "ElementwiseFusion");
  unsetenv("TOB_ELEMENTWISE_REMAT");
  setenv("TOB_ELEMENTWISE_FUSION", "0", 1);
  for (const std::string& n : passes()) EXPECT_NE(n, "ElementwiseRematerialization");
  unsetenv("TOB_ELEMENTWISE_FUSION");
}

// ---- a recomputed layer's MLP backward, through sessions ----

// x = a @ W1 and GPT-2's tanh GELU h = x/2 (1 + tanh(k (x + c x^3))) are the recompute copies
// (marked, as the memory optimizer's backward has them); the backward reads dh = g @ W2t, takes
// dW2 = h^T g and the GELU's gradient dx = dh (u/2 + s (1 - t^2) k (1 + 3 c x^2)), u = 1 + t,
// s = x / 2, as torch's gelu_backward writes it (with Sub for TanhGrad).
constexpr float kK = 0.7978845608f, kC = 0.044715f;

std::unique_ptr<Graph> MlpBackward(int64_t n, int64_t d, int64_t hdim) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(*g);
  b.Input("a", F32({n, d})).Input("w1", F32({d, hdim})).Input("w2t", F32({d, hdim})).Input("g", F32({n, d}));
  b.Const("half", {0.5f}, {}).Const("one", {1.f}, {}).Const("k", {kK}, {}).Const("c", {kC}, {});
  b.Const("three", {3.f}, {});
  auto copy = [&](Node* node) { node->set_recompute(true); };
  copy(b.Op("MatMul", {"a", "w1"}, {"x"}));
  copy(b.Op("Mul", {"x", "x"}, {"x2"}));
  copy(b.Op("Mul", {"x2", "x"}, {"x3"}));
  copy(b.Op("Mul", {"x3", "c"}, {"cx3"}));
  copy(b.Op("Add", {"x", "cx3"}, {"inner"}));
  copy(b.Op("Mul", {"inner", "k"}, {"kin"}));
  copy(b.Op("Tanh", {"kin"}, {"t"}));
  copy(b.Op("Add", {"t", "one"}, {"u"}));
  copy(b.Op("Mul", {"x", "half"}, {"s"}));
  copy(b.Op("Mul", {"s", "u"}, {"h"}));
  b.Op("MatMul", {"g", "w2t"}, {"dh"});
  b.Op("Gemm", {"h", "g"}, {"dw2"}, {{"transA", Attribute::Int(1)}});
  b.Op("Mul", {"dh", "u"}, {"du"});
  b.Op("Mul", {"du", "half"}, {"d1"});
  b.Op("Mul", {"dh", "s"}, {"ds"});
  b.Op("Mul", {"t", "t"}, {"tt"});
  b.Op("Sub", {"one", "tt"}, {"omt"});
  b.Op("Mul", {"ds", "omt"}, {"dt"});
  b.Op("Mul", {"dt", "k"}, {"dk"});
  b.Op("Mul", {"x2", "c"}, {"cx2"});
  b.Op("Mul", {"cx2", "three"}, {"c3x2"});
  b.Op("Add", {"c3x2", "one"}, {"poly"});
  b.Op("Mul", {"dk", "poly"}, {"d2"});
  b.Op("Add", {"d1", "d2"}, {"dx"});
  b.Output("dx").Output("dw2");
  return g;
}

struct MlpRun {
  std::vector<Tensor> outputs;
  int fused_outputs = 0;  // values FusedElementwise nodes write
};

MlpRun RunMlp(const char* remat, const std::vector<Tensor>& feeds, int64_t n, int64_t d, int64_t hdim) {
  if (remat) setenv("TOB_ELEMENTWISE_REMAT", remat, 1);
  else unsetenv("TOB_ELEMENTWISE_REMAT");
  SessionOptions opts;
  opts.optimization_level = OptLevel::kAll;
  opts.intra_op_threads = 2;
  auto s = Session::Create(MlpBackward(n, d, hdim), opts);
  unsetenv("TOB_ELEMENTWISE_REMAT");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  MlpRun r;
  if (!s.ok()) return r;
  for (const Node* node : s.value()->graph().nodes())
    if (node->op_type() == kFusedElementwiseOp) r.fused_outputs += static_cast<int>(node->outputs().size());
  Status st = s.value()->Run({"a", "w1", "w2t", "g"}, feeds, {}, &r.outputs);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

TEST(OptimizerElementwiseRemat, GeluBackwardMatchesFloat64AndTheUnrewrittenGraphBitForBit) {
  const int64_t n = 6, d = 5, hdim = 1100;  // rows longer than the kernel's 512-element blocks
  const Tensor a = RandomTensor<float>({n, d}, -1, 1, 11), w1 = RandomTensor<float>({d, hdim}, -1, 1, 12),
               w2t = RandomTensor<float>({d, hdim}, -1, 1, 13), g = RandomTensor<float>({n, d}, -1, 1, 14);
  const std::vector<Tensor> feeds = {a, w1, w2t, g};
  MlpRun on = RunMlp(nullptr, feeds, n, d, hdim);
  MlpRun off = RunMlp("0", feeds, n, d, hdim);
  // Off: the recompute group writes h, x2, t, u, s (the gradient's group reads the last four);
  // on: h alone, the gradient recomputing the rest from x.
  EXPECT_EQ(off.fused_outputs, 6);
  EXPECT_EQ(on.fused_outputs, 2);
  ASSERT_EQ(on.outputs.size(), 2u);
  ASSERT_EQ(off.outputs.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    ASSERT_EQ(on.outputs[o].shape(), off.outputs[o].shape());
    for (int64_t i = 0; i < on.outputs[o].numel(); ++i)
      ASSERT_EQ(on.outputs[o].data<float>()[i], off.outputs[o].data<float>()[i]) << "output " << o << " at " << i;
  }
  // float64 reference.
  double worst = 0;
  std::vector<double> hh(n * hdim);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < hdim; ++j) {
      double x = 0, dh = 0;
      for (int64_t q = 0; q < d; ++q) {
        x += double(a.data<float>()[r * d + q]) * w1.data<float>()[q * hdim + j];
        dh += double(g.data<float>()[r * d + q]) * w2t.data<float>()[q * hdim + j];
      }
      const double t = std::tanh(double(kK) * (x + double(kC) * x * x * x));
      hh[r * hdim + j] = 0.5 * x * (1 + t);
      const double dx = dh * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * kK * (1 + 3 * double(kC) * x * x));
      const double got = on.outputs[0].data<float>()[r * hdim + j];
      worst = std::max(worst, std::abs(got - dx) / (1 + std::abs(dx)));
    }
  for (int64_t j = 0; j < hdim; ++j)
    for (int64_t q = 0; q < d; ++q) {
      double dw = 0;
      for (int64_t r = 0; r < n; ++r) dw += hh[r * hdim + j] * g.data<float>()[r * d + q];
      const double got = on.outputs[1].data<float>()[j * d + q];
      worst = std::max(worst, std::abs(got - dw) / (1 + std::abs(dw)));
    }
  EXPECT_LT(worst, 1e-5) << "largest relative error against float64";
}

}  // namespace
}  // namespace tob
