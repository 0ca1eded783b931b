// RotaryEmbeddingFusion: HuggingFace's apply_rotary_pos_emb (q * cos + rotate_half(q) * sin, with
// cos and sin made as cos(cat(f, f)) * scaling) becomes one RotaryEmbedding on the first halves of
// the tables. Golden tests show the rewrite and the chains it must leave alone (tables whose halves
// it cannot prove equal, a rotation of the wrong sign, an intermediate read elsewhere); numeric tests
// run sessions with and without the pass against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "graph_pass_test_util.h"
#include "low_precision_test_util.h"
#include "op_tester.h"
#include "ops/fused_elementwise_program.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::GraphBuilder;
using testing::RandomTensor;

constexpr int64_t kB = 2, kH = 3, kS = 5, kD = 8;

struct Form {
  int opset = 18;
  DType dtype = DType::kFloat32;
  int64_t table_batch = 1;        // cos / sin [1 or B, S, D]
  bool tables_as_inputs = false;  // cos and sin given as graph inputs: their halves are not provably equal
  bool wrong_sign = false;        // Concat(x1, Neg(x2)): not rotate_half
  std::string also_read;          // an intermediate also made a graph output
};

ValueType Of(DType t, Dims d) { return ValueType(t, std::move(d)); }

void Build(Graph& g, const Form& f) {
  GraphBuilder b(g, f.opset);
  b.Input("q", Of(f.dtype, {kB, kH, kS, kD}));
  b.ConstI64("one_axis", {1}, {1}).ConstI64("lo_s", {0}, {1}).ConstI64("lo_e", {kD / 2}, {1});
  b.ConstI64("hi_s", {kD / 2}, {1}).ConstI64("hi_e", {INT64_MAX}, {1}).ConstI64("ax", {-1}, {1});
  if (f.tables_as_inputs) {
    b.Input("cs", Of(f.dtype, {f.table_batch, kS, kD})).Input("ss", Of(f.dtype, {f.table_batch, kS, kD}));
  } else {
    // freqs [Bt, S, D / 2] in float32 (HF computes them so), then cos / sin, scaled, cast to q's type.
    b.Input("freqs", Of(DType::kFloat32, {f.table_batch, kS, kD / 2}));
    b.Const("scaling", {1.f}, {});
    b.Op("Concat", {"freqs", "freqs"}, {"emb"}, {{"axis", Attribute::Int(-1)}});
    b.Op("Cos", {"emb"}, {"c"});
    b.Op("Sin", {"emb"}, {"s"});
    b.Op("Mul", {"c", "scaling"}, {"c1"});
    b.Op("Mul", {"s", "scaling"}, {"s1"});
    if (f.dtype == DType::kFloat32) {
      b.Op("Identity", {"c1"}, {"cs"});
      b.Op("Identity", {"s1"}, {"ss"});
    } else {
      b.Op("Cast", {"c1"}, {"cs"}, {{"to", Attribute::Int(static_cast<int64_t>(f.dtype))}});
      b.Op("Cast", {"s1"}, {"ss"}, {{"to", Attribute::Int(static_cast<int64_t>(f.dtype))}});
    }
  }
  b.Op("Unsqueeze", {"cs", "one_axis"}, {"c4"});
  b.Op("Unsqueeze", {"ss", "one_axis"}, {"s4"});
  b.Op("Mul", {"q", "c4"}, {"qc"}, {}, "", "q_cos");
  b.Op("Slice", {"q", "lo_s", "lo_e", "ax"}, {"x1"}, {}, "", "lower");
  b.Op("Slice", {"q", "hi_s", "hi_e", "ax"}, {"x2"}, {}, "", "upper");
  b.Op("Neg", {"x2"}, {"nx2"}, {}, "", "negate");
  if (f.wrong_sign) b.Op("Concat", {"x1", "nx2"}, {"rot"}, {{"axis", Attribute::Int(3)}}, "", "rotate_half");
  else b.Op("Concat", {"nx2", "x1"}, {"rot"}, {{"axis", Attribute::Int(3)}}, "", "rotate_half");
  b.Op("Mul", {"rot", "s4"}, {"rs"}, {}, "", "rot_sin");
  b.Op("Add", {"qc", "rs"}, {"out"}, {}, "", "rope");
  b.Output("out");
  if (!f.also_read.empty()) b.Output(f.also_read);
}

std::vector<std::string> OpTypes(const Graph& g) {
  std::vector<std::string> ops;
  auto order = g.TopologicalOrder();
  EXPECT_TRUE(order.ok());
  for (const Node* n : order.value())
    ops.push_back(n->domain().empty() ? n->op_type() : n->domain() + "::" + n->op_type());
  return ops;
}

// ---- golden ----

TEST(OptimizerRotaryEmbeddingFusion, GoldenLlamaRotation) {
  // A table batch of 1 (HF's position_ids of one row) is sliced to its first half and expanded to
  // q's batch; a table batch of B is only sliced. ai.tob's op at every opset (its kernel repeats the
  // chain bit for bit).
  for (int64_t tb : {int64_t{1}, kB})
    for (int opset : {18, 23}) {
      Form f;
      f.table_batch = tb;
      f.opset = opset;
      Graph g;
      Build(g, f);
      EXPECT_TRUE(testing::RunPassWithBuiltins(CreateRotaryEmbeddingFusionPass(), g));
      const std::string rope = "ai.tob::RotaryEmbedding";
      // The node reads q and the tables' first halves (expanded to the batch when it is 1).
      const Node* fused = g.outputs()[0]->producer();
      ASSERT_NE(fused, nullptr);
      EXPECT_EQ(fused->op_type(), "RotaryEmbedding");
      EXPECT_EQ(fused->domain(), kTobDomain);
      ASSERT_EQ(fused->inputs().size(), 3u);
      EXPECT_EQ(fused->input(0)->name(), "q");
      for (int i : {1, 2}) {
        const Node* cache = fused->input(i)->producer();
        ASSERT_NE(cache, nullptr);
        EXPECT_EQ(cache->op_type(), tb == 1 ? "Expand" : "Slice");
        const Node* slice = tb == 1 ? cache->input(0)->producer() : cache;
        ASSERT_NE(slice, nullptr);
        EXPECT_EQ(slice->op_type(), "Slice");
        EXPECT_EQ(slice->input(0)->name(), i == 1 ? "cs" : "ss");
        ASSERT_TRUE(fused->input(i)->type().shape.has_value());
        EXPECT_EQ(*fused->input(i)->type().shape, (Dims{kB, kS, kD / 2}));
      }
      int rotations = 0;
      for (const std::string& op : OpTypes(g)) {
        EXPECT_NE(op, "Neg");
        EXPECT_NE(op, "Add");
        rotations += op == rope;
      }
      EXPECT_EQ(rotations, 1);
    }
}

TEST(OptimizerRotaryEmbeddingFusion, GoldenMustNotFire) {
  std::vector<std::pair<std::string, Form>> cases;
  auto add = [&](const std::string& why, auto&& edit) {
    Form f;
    edit(f);
    cases.emplace_back(why, f);
  };
  add("tables of unknown halves", [](Form& f) { f.tables_as_inputs = true; });
  add("rotation of the wrong sign", [](Form& f) { f.wrong_sign = true; });
  add("q * cos read elsewhere", [](Form& f) { f.also_read = "qc"; });
  add("rotate_half read elsewhere", [](Form& f) { f.also_read = "rot"; });
  add("a slice read elsewhere", [](Form& f) { f.also_read = "x1"; });
  for (auto& [why, f] : cases) {
    Graph g, expected;
    Build(g, f);
    Build(expected, f);
    EXPECT_FALSE(testing::RunPassWithBuiltins(CreateRotaryEmbeddingFusionPass(), g)) << why;
    EXPECT_EQ(testing::StructureText(g), testing::StructureText(expected)) << why;
  }
}

// ---- numbers ----

struct SessionRun {
  std::vector<Tensor> outputs;
  int fused = 0;
};

SessionRun RunForm(const Form& f, OptLevel level, const std::vector<Tensor>& feeds) {
  auto g = std::make_unique<Graph>();
  Build(*g, f);
  SessionOptions opts;
  opts.optimization_level = level;
  opts.intra_op_threads = 1;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  SessionRun r;
  if (!s.ok()) return r;
  for (const Node* n : s.value()->graph().nodes()) r.fused += n->op_type() == "RotaryEmbedding";
  Status ran = s.value()->Run({"q", "freqs"}, feeds, {}, &r.outputs);
  EXPECT_TRUE(ran.ok()) << ran.ToString();
  return r;
}

// out[b, h, s, i] = q[i] cos(f[i mod D/2]) + rotate_half(q)[i] sin(f[i mod D/2]), tables of `tb` rows.
std::vector<double> Reference(const std::vector<double>& q, const std::vector<double>& f, int64_t tb) {
  std::vector<double> out(q.size());
  const int64_t h = kD / 2;
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t hd = 0; hd < kH; ++hd)
      for (int64_t s = 0; s < kS; ++s) {
        const double* x = q.data() + ((b * kH + hd) * kS + s) * kD;
        double* y = out.data() + ((b * kH + hd) * kS + s) * kD;
        const double* angle = f.data() + ((tb == 1 ? 0 : b) * kS + s) * h;
        for (int64_t i = 0; i < h; ++i) {
          y[i] = x[i] * std::cos(angle[i]) - x[i + h] * std::sin(angle[i]);
          y[i + h] = x[i + h] * std::cos(angle[i]) + x[i] * std::sin(angle[i]);
        }
      }
  return out;
}

TEST(OptimizerRotaryEmbeddingFusion, MatchesTheChainBitForBitAndFloat64) {
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int64_t tb : {int64_t{1}, kB}) {
      Form f;
      f.dtype = t;
      f.table_batch = tb;
      const Tensor qf = RandomTensor<float>({kB, kH, kS, kD}, -2, 2, 41);
      const Tensor freqs = RandomTensor<float>({tb, kS, kD / 2}, -3, 3, 42);
      const Tensor q = t == DType::kFloat32    ? qf
                       : t == DType::kBFloat16 ? testing::Narrowed<BFloat16>(qf)
                                               : testing::Narrowed<Float16>(qf);
      SessionRun fused = RunForm(f, OptLevel::kAll, {q, freqs});
      SessionRun plain = RunForm(f, OptLevel::kExtended, {q, freqs});
      EXPECT_EQ(fused.fused, 1) << DTypeName(t);
      EXPECT_EQ(plain.fused, 0) << DTypeName(t);
      ASSERT_EQ(fused.outputs.size(), 1u);
      ASSERT_EQ(plain.outputs.size(), 1u);
      EXPECT_EQ(std::memcmp(fused.outputs[0].raw_data(), plain.outputs[0].raw_data(), fused.outputs[0].nbytes()), 0)
          << DTypeName(t) << " table batch " << tb << ": fused and unfused differ";
      const std::vector<double> want = Reference(testing::ToDoubles(q), testing::ToDoubles(freqs), tb);
      // float32: a few roundings of values below 4; 16-bit: the tables and the result are rounded to
      // the type (the chain also rounds each product).
      const double tol = t == DType::kFloat32 ? 1e-5 : t == DType::kBFloat16 ? 0.06 : 8e-3;
      for (const SessionRun* run : {&fused, &plain}) {
        ASSERT_EQ(run->outputs.size(), 1u);
        ASSERT_EQ(run->outputs[0].dtype(), t);
        const std::vector<double> got = testing::ToDoubles(run->outputs[0]);
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << DTypeName(t) << " " << i;
      }
    }
}

TEST(OptimizerRotaryEmbeddingFusion, TobKernelRunsTheOnnxSemantics) {
  // ai.tob's RotaryEmbedding is ai.onnx's at any opset: a 4-D X with [B, S, D / 2] caches.
  const Tensor x = RandomTensor<float>({1, 2, 3, 4}, -1, 1, 51);
  const Tensor c = RandomTensor<float>({1, 3, 2}, -1, 1, 52), s = RandomTensor<float>({1, 3, 2}, -1, 1, 53);
  std::vector<double> want(24);
  for (int64_t hd = 0; hd < 2; ++hd)
    for (int64_t p = 0; p < 3; ++p)
      for (int64_t i = 0; i < 2; ++i) {
        const float* xr = x.data<float>() + (hd * 3 + p) * 4;
        const double ck = c.data<float>()[p * 2 + i], sk = s.data<float>()[p * 2 + i];
        want[(hd * 3 + p) * 4 + i] = ck * xr[i] - sk * xr[i + 2];
        want[(hd * 3 + p) * 4 + i + 2] = sk * xr[i] + ck * xr[i + 2];
      }
  testing::OpTester t("RotaryEmbedding", 1, kTobDomain);
  t.Input("X", x).Input("cos_cache", c).Input("sin_cache", s);
  t.Output("Y", {1, 2, 3, 4}, want, 1e-6, 1e-6);
  t.Run();
}

}  // namespace
}  // namespace tob
