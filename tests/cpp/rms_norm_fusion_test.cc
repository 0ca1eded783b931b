// RmsNormFusion: LLaMA's hand-written RMSNorm (float32, and autocast's 16-bit form with its Casts)
// becomes one RMSNormalization. Golden tests show the rewrite and every chain it must leave alone;
// the numeric tests run sessions with and without the pass against a float64 reference, including
// the training forward's form, whose inverse RMS is a graph output.
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

using testing::F32;
using testing::GraphBuilder;
using testing::RandomTensor;

constexpr int64_t kRows = 6, kD = 8;
constexpr float kEps = 1e-6f;

AttributeMap CastTo(DType t) { return {{"to", Attribute::Int(static_cast<int64_t>(t))}}; }

// How the chain is spelt and what around it may stop the fusion.
struct Form {
  int opset = 18;
  DType x = DType::kFloat32;      // X's type: 16-bit X is widened by a Cast first
  DType out = DType::kFloat32;    // Y's (and W's) type: not float32 adds the Cast before the weight
  std::string square = "Mul";     // Mul(xf, xf) or Pow(xf, 2)
  std::string inverse = "Recip";  // Recip: Mul(xf, Reciprocal(Sqrt)); DivOne: Mul(xf, Div(1, Sqrt)); Div: Div(xf, Sqrt)
  bool save_inverse = false;      // r is a graph output (AOTAutograd's saved value)
  // Guards: each makes the chain something the fused op is not.
  int64_t axis = -1;
  int64_t keepdims = 1;
  float exponent = 2.f;
  Dims x_dims{2, 3, kD};
  bool eps_input = false;     // eps a graph input, not a constant
  Dims weight{kD};            // W's shape
  std::string also_read;      // an intermediate also made a graph output
  bool other_factor = false;  // n = Mul(other, r) instead of Mul(xf, r)
};

void Build(Graph& g, const Form& f) {
  GraphBuilder b(g, f.opset);
  b.Input("x", ValueType(f.x, f.x_dims)).Input("w", ValueType(f.out, f.weight));
  if (f.eps_input) b.Input("eps", F32({}));
  else b.Const("eps", {kEps}, {});
  if (f.other_factor) b.Input("other", F32({2, 3, kD}));
  b.Const("two", {f.exponent}, {}).Const("one", {1.f}, {}).ConstI64("axes", {f.axis}, {1});
  std::string xf = "x";
  if (f.x != DType::kFloat32) {
    b.Op("Cast", {"x"}, {"xf"}, CastTo(DType::kFloat32), "", "widen");
    xf = "xf";
  }
  if (f.square == "Mul") b.Op("Mul", {xf, xf}, {"sq"}, {}, "", "square");
  else b.Op("Pow", {xf, "two"}, {"sq"}, {}, "", "square");
  AttributeMap mean_attrs{{"keepdims", Attribute::Int(f.keepdims)}};
  if (f.opset >= 18) {
    b.Op("ReduceMean", {"sq", "axes"}, {"ms"}, mean_attrs, "", "mean");
  } else {
    mean_attrs["axes"] = Attribute::Ints({f.axis});
    b.Op("ReduceMean", {"sq"}, {"ms"}, mean_attrs, "", "mean");
  }
  b.Op("Add", {"ms", "eps"}, {"ve"}, {}, "", "add_eps");
  b.Op("Sqrt", {"ve"}, {"s"}, {}, "", "sqrt");
  const std::string factor = f.other_factor ? "other" : xf;
  if (f.inverse == "Div") {
    b.Op("Div", {factor, "s"}, {"n"}, {}, "", "normalize");
  } else {
    if (f.inverse == "Recip") b.Op("Reciprocal", {"s"}, {"r"}, {}, "", "rsqrt");
    else b.Op("Div", {"one", "s"}, {"r"}, {}, "", "rsqrt");
    b.Op("Mul", {factor, "r"}, {"n"}, {}, "", "normalize");
  }
  std::string nc = "n";
  if (f.out != DType::kFloat32) {
    b.Op("Cast", {"n"}, {"nc"}, CastTo(f.out), "", "narrow");
    nc = "nc";
  }
  b.Op("Mul", {"w", nc}, {"y"}, {}, "", "scale");
  b.Output("y");
  if (f.save_inverse) b.Output("r");
  if (!f.also_read.empty()) b.Output(f.also_read);
}

std::string AfterPass(Graph& g, bool* changed = nullptr) {
  const bool c = testing::RunPassWithBuiltins(CreateRmsNormFusionPass(), g);
  if (changed != nullptr) *changed = c;
  return testing::StructureText(g);
}

// The fused graph: RMSNormalization(x, w) -> y [, r].
std::string Fused(const Form& f, const std::string& domain) {
  Graph g;
  GraphBuilder b(g, f.opset);
  if (!domain.empty()) g.SetOpset(domain, 1);
  b.Input("x", ValueType(f.x, Dims{2, 3, kD})).Input("w", ValueType(f.out, f.weight));
  // The chain's constants have no reader left (the printer leaves such values out); the widening
  // Cast stays for dead-code elimination.
  if (f.x != DType::kFloat32) b.Op("Cast", {"x"}, {"xf"}, CastTo(DType::kFloat32), "", "widen");
  std::vector<std::string> outs{"y"};
  if (f.save_inverse) outs.push_back("r");
  b.Op("RMSNormalization", {"x", "w"}, outs, {{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(kEps)}},
       domain, "mean_RMSNormalization");
  b.Output("y");
  if (f.save_inverse) b.Output("r");
  return testing::StructureText(g);
}

// ---- golden ----

TEST(OptimizerRmsNormFusion, GoldenLlamaFloat32) {
  // Every spelling of the square and the inverse, at opsets with and without ai.onnx's op: always
  // ai.tob's, whose kernel repeats the chain bit for bit.
  for (const char* square : {"Mul", "Pow"})
    for (const char* inverse : {"Recip", "DivOne"})
      for (int opset : {13, 18, 23}) {
        Form f;
        f.square = square;
        f.inverse = inverse;
        f.opset = opset;
        Graph g;
        Build(g, f);
        bool changed = false;
        EXPECT_EQ(AfterPass(g, &changed), Fused(f, kTobDomain)) << square << " " << inverse << " opset " << opset;
        EXPECT_TRUE(changed);
      }
}

TEST(OptimizerRmsNormFusion, GoldenAutocastSixteenBit) {
  // LlamaRMSNorm on a 16-bit stream: x.to(float32) ... .to(input_dtype) * weight. The fused node
  // reads the 16-bit X (widening is exact); the widening Cast is left to dead-code elimination.
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Form f;
    f.x = t;
    f.out = t;
    Graph g;
    Build(g, f);
    EXPECT_EQ(AfterPass(g), Fused(f, kTobDomain)) << DTypeName(t);
  }
}

TEST(OptimizerRmsNormFusion, GoldenTrainingForwardKeepsTheSavedInverse) {
  // r is a graph output (saved for the backward): the fused node returns it.
  for (int opset : {18, 23}) {
    Form f;
    f.opset = opset;
    f.save_inverse = true;
    Graph g;
    Build(g, f);
    EXPECT_EQ(AfterPass(g), Fused(f, kTobDomain)) << opset;
  }
}

TEST(OptimizerRmsNormFusion, GoldenMustNotFire) {
  std::vector<std::pair<std::string, Form>> cases;
  auto add = [&](const std::string& why, auto&& edit) {
    Form f;
    edit(f);
    cases.emplace_back(why, f);
  };
  add("reduced over the first axis", [](Form& f) { f.axis = 0; });
  add("keepdims = 0", [](Form& f) {  // [D, D]: the [D] statistic broadcasts along the wrong axis
    f.keepdims = 0;
    f.x_dims = {kD, kD};
  });
  add("cube, not square", [](Form& f) {
    f.square = "Pow";
    f.exponent = 3.f;
  });
  add("eps not a constant", [](Form& f) { f.eps_input = true; });
  add("weight [1], a broadcast scalar", [](Form& f) { f.weight = {1}; });
  add("weight [3, D]", [](Form& f) { f.weight = {3, kD}; });
  add("normalized value read elsewhere", [](Form& f) { f.also_read = "n"; });
  add("mean of squares read elsewhere", [](Form& f) { f.also_read = "ms"; });
  add("sqrt read elsewhere", [](Form& f) { f.also_read = "s"; });
  add("the product is of another value", [](Form& f) { f.other_factor = true; });
  add("x / sqrt: the kernel multiplies by the reciprocal, which rounds otherwise", [](Form& f) { f.inverse = "Div"; });
  for (auto& [why, f] : cases) {
    Graph g, expected;
    Build(g, f);
    Build(expected, f);
    bool changed = true;
    EXPECT_EQ(AfterPass(g, &changed), testing::StructureText(expected)) << why;
    EXPECT_FALSE(changed) << why;
  }
}

TEST(OptimizerRmsNormFusion, GoldenFloat16StatisticStays) {
  // A chain computed in float16 throughout rounds each square to float16; the fused kernel would
  // not (nor overflow where it overflows), so it stays.
  auto build = [](Graph& g) {
    GraphBuilder b(g, 18);
    const ValueType h(DType::kFloat16, Dims{2, 3, kD});
    b.Input("x", h).Input("w", ValueType(DType::kFloat16, Dims{kD}));
    EXPECT_TRUE(g.AddInitializer("eps", Tensor::FromVector<Float16>({Float16(1e-3f)}, {})).ok());
    b.ConstI64("axes", {-1}, {1});
    b.Op("Mul", {"x", "x"}, {"sq"});
    b.Op("ReduceMean", {"sq", "axes"}, {"ms"});
    b.Op("Add", {"ms", "eps"}, {"ve"});
    b.Op("Sqrt", {"ve"}, {"s"});
    b.Op("Reciprocal", {"s"}, {"r"});
    b.Op("Mul", {"x", "r"}, {"n"});
    b.Op("Mul", {"n", "w"}, {"y"});
    b.Output("y");
  };
  Graph g, expected;
  build(g);
  build(expected);
  bool changed = true;
  EXPECT_EQ(AfterPass(g, &changed), testing::StructureText(expected));
  EXPECT_FALSE(changed);
}

// ---- numbers: sessions with the pass (kAll) and without (kExtended) against float64 ----

struct SessionRun {
  std::vector<Tensor> outputs;
  int fused = 0, reductions = 0;
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
  for (const Node* n : s.value()->graph().nodes()) {
    r.fused += n->op_type() == "RMSNormalization";
    r.reductions += n->op_type() == "ReduceMean";
  }
  Status ran = s.value()->Run({"x", "w"}, feeds, {}, &r.outputs);
  EXPECT_TRUE(ran.ok()) << ran.ToString();
  return r;
}

// y = x / sqrt(mean(x^2) + eps) * w and 1 / sqrt(mean(x^2) + eps) per row, in float64.
void Reference(const std::vector<double>& x, const std::vector<double>& w, std::vector<double>* y,
               std::vector<double>* inv) {
  y->assign(x.size(), 0);
  inv->assign(x.size() / kD, 0);
  for (size_t r = 0; r < inv->size(); ++r) {
    double sum = 0;
    for (int64_t i = 0; i < kD; ++i) sum += x[r * kD + i] * x[r * kD + i];
    (*inv)[r] = 1.0 / std::sqrt(sum / kD + static_cast<double>(kEps));
    for (int64_t i = 0; i < kD; ++i) (*y)[r * kD + i] = x[r * kD + i] * (*inv)[r] * w[i];
  }
}

// Bit for bit what the chain computes (a backward that recomputes r from the chain gets the value
// the forward saved), and within float32 rounding of float64.
void ExpectSameBits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << what << ": fused and unfused differ";
}

TEST(OptimizerRmsNormFusion, Float32MatchesTheChainBitForBitAndFloat64) {
  for (const char* inverse : {"Recip", "DivOne"})
    for (bool save : {false, true}) {
      Form f;
      f.inverse = inverse;
      f.save_inverse = save;
      const Tensor x = RandomTensor<float>({2, 3, kD}, -2, 2, 11), w = RandomTensor<float>({kD}, 0.5, 1.5, 12);
      SessionRun fused = RunForm(f, OptLevel::kAll, {x, w});
      SessionRun plain = RunForm(f, OptLevel::kExtended, {x, w});
      EXPECT_EQ(fused.fused, 1) << inverse;
      EXPECT_EQ(fused.reductions, 0) << inverse;
      EXPECT_EQ(plain.fused, 0) << inverse;
      std::vector<double> y, inv;
      Reference(testing::ToDoubles(x), testing::ToDoubles(w), &y, &inv);
      ASSERT_EQ(fused.outputs.size(), save ? 2u : 1u);
      for (size_t i = 0; i < fused.outputs.size(); ++i)
        ExpectSameBits(fused.outputs[i], plain.outputs[i], std::string(inverse) + " output " + std::to_string(i));
      for (const SessionRun* run : {&fused, &plain}) {
        const std::vector<double> got = testing::ToDoubles(run->outputs[0]);
        for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(got[i], y[i], 2e-6 * (1 + std::abs(y[i]))) << i;
        if (!save) continue;
        ASSERT_EQ(run->outputs[1].shape(), (Shape{2, 3, 1}));
        const std::vector<double> r = testing::ToDoubles(run->outputs[1]);
        for (size_t i = 0; i < inv.size(); ++i) EXPECT_NEAR(r[i], inv[i], 2e-6 * inv[i]) << i;
      }
    }
}

TEST(OptimizerRmsNormFusion, SixteenBitMatchesTheChainBitForBitAndFloat64) {
  // The chain rounds the normalised value to 16 bits and then the product with W, and so does the
  // fused kernel: the same bits, within two roundings of the float64 value of the same inputs.
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Form f;
    f.x = f.out = t;
    const Tensor xf = RandomTensor<float>({2, 3, kD}, -2, 2, 21), wf = RandomTensor<float>({kD}, 0.5, 1.5, 22);
    const Tensor x = t == DType::kBFloat16 ? testing::Narrowed<BFloat16>(xf) : testing::Narrowed<Float16>(xf);
    const Tensor w = t == DType::kBFloat16 ? testing::Narrowed<BFloat16>(wf) : testing::Narrowed<Float16>(wf);
    SessionRun fused = RunForm(f, OptLevel::kAll, {x, w});
    SessionRun plain = RunForm(f, OptLevel::kExtended, {x, w});
    EXPECT_EQ(fused.fused, 1);
    ExpectSameBits(fused.outputs[0], plain.outputs[0], DTypeName(t));
    std::vector<double> y, inv;
    Reference(testing::ToDoubles(x), testing::ToDoubles(w), &y, &inv);
    const double ulp = t == DType::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    for (const SessionRun* run : {&fused, &plain}) {
      ASSERT_EQ(run->outputs[0].dtype(), t);
      const std::vector<double> got = testing::ToDoubles(run->outputs[0]);
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(got[i], y[i], 2 * ulp * std::abs(y[i]) + 1e-6) << i;
    }
  }
}

TEST(OptimizerRmsNormFusion, TobKernelReturnsTheInverseRms) {
  // ai.tob's RMSNormalization with both outputs, float32 and float64 X, against float64; a scale of
  // the wrong length is refused, naming the op.
  const Tensor x = RandomTensor<float>({kRows, kD}, -2, 2, 31), w = RandomTensor<float>({kD}, 0.5, 1.5, 32);
  std::vector<double> y, inv;
  Reference(testing::ToDoubles(x), testing::ToDoubles(w), &y, &inv);
  testing::OpTester t("RMSNormalization", 1, kTobDomain);
  t.Attr("epsilon", Attribute::Float(kEps)).Input("X", x).Input("scale", w);
  t.Output("Y", {kRows, kD}, y, 2e-6, 1e-6).Output("InvStdDev", {kRows, 1}, inv, 2e-6, 0);
  t.Run();

  std::vector<double> xd = testing::ToDoubles(x), wd = testing::ToDoubles(w);
  testing::OpTester d("RMSNormalization", 1, kTobDomain);
  d.Attr("epsilon", Attribute::Float(kEps))
      .Input("X", Tensor::FromVector<double>(xd, {kRows, kD}))
      .Input("scale", Tensor::FromVector<double>(wd, {kD}));
  d.Output("Y", {kRows, kD}, y, 1e-12, 1e-12).Output("InvStdDev", {kRows, 1}, inv, 1e-12, 0);
  d.Run();

  testing::OpTester bad("RMSNormalization", 1, kTobDomain);
  bad.Input("X", x).Input("scale", RandomTensor<float>({kD - 1}, 0.5, 1.5, 33));
  bad.Output("Y", {kRows, kD}, y).Output("InvStdDev", {kRows, 1}, inv);
  auto out = bad.Compute();
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("RMSNormalization"), std::string::npos) << out.status().ToString();
  EXPECT_NE(out.status().message().find("scale"), std::string::npos) << out.status().ToString();
}

}  // namespace
}  // namespace tob
