// CrossEntropyGradFusion: cross-entropy's backward as AOTAutograd writes it (NegativeLogLikelihoodLossGrad,
// then LogSoftmaxGrad_13 over the class axis of the same log-probabilities) becomes one
// SoftmaxCrossEntropyLossGrad with the same reduction and ignore_index (golden tests), and not where
// dL has another reader or the log-softmax is over another axis; a session with the fusion gives the
// unfused chain's numbers within float32 rounding and both match a float64 reference.
#include <gtest/gtest.h>

#include <cmath>

#include "core/domain.h"
#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;

constexpr int64_t kN = 6, kC = 37;

// dX = LogSoftmaxGrad_13(NegativeLogLikelihoodLossGrad(dY, LP, T, W), LP); with `dl_output`, dL is a
// graph output too; `axis` is LogSoftmaxGrad's.
std::unique_ptr<Graph> LossBackward(bool dl_output, int64_t axis, const std::string& reduction) {
  auto g = std::make_unique<Graph>();
  testing::GraphBuilder b(*g, 17);
  g->SetOpset(kMicrosoftDomain, 1);
  b.Input("dY", ValueType(DType::kFloat32, reduction == "none" ? Dims{kN} : Dims{}))
      .Input("LP", testing::F32({kN, kC}))
      .Input("T", ValueType(DType::kInt64, Dims{kN}))
      .Input("W", testing::F32({kC}));
  b.Op("NegativeLogLikelihoodLossGrad", {"dY", "LP", "T", "W"}, {"dL"},
       {{"reduction", Attribute::String(reduction)}, {"ignore_index", Attribute::Int(3)}}, kMicrosoftDomain);
  b.Op("LogSoftmaxGrad_13", {"dL", "LP"}, {"dX"}, {{"axis", Attribute::Int(axis)}}, kMicrosoftDomain);
  b.Output("dX");
  if (dl_output) b.Output("dL");
  return g;
}

TEST(OptimizerCrossEntropyGradFusion, GoldenPairBecomesSoftmaxCrossEntropyLossGrad) {
  for (int64_t axis : {int64_t{-1}, int64_t{1}}) {
    std::unique_ptr<Graph> before = LossBackward(false, axis, "mean");
    EXPECT_TRUE(testing::RunPassWithBuiltins(CreateCrossEntropyGradFusionPass(), *before));

    Graph expected;
    testing::GraphBuilder e(expected, 17);
    expected.SetOpset(kMicrosoftDomain, 1);
    e.Input("dY", ValueType(DType::kFloat32, Dims{}))
        .Input("LP", testing::F32({kN, kC}))
        .Input("T", ValueType(DType::kInt64, Dims{kN}))
        .Input("W", testing::F32({kC}));
    e.Op("SoftmaxCrossEntropyLossGrad", {"dY", "LP", "T", "W"}, {"dX"},
         {{"ignore_index", Attribute::Int(3)}, {"reduction", Attribute::String("mean")}}, kMicrosoftDomain);
    e.Output("dX");
    EXPECT_EQ(GraphToText(*before), GraphToText(expected)) << "axis " << axis;
  }
}

TEST(OptimizerCrossEntropyGradFusion, GoldenLeavesOtherShapesAlone) {
  // dL read elsewhere (a graph output): the dense gradient is needed anyway.
  std::unique_ptr<Graph> read = LossBackward(true, -1, "mean");
  const std::string text = GraphToText(*read);
  EXPECT_FALSE(testing::RunPassWithBuiltins(CreateCrossEntropyGradFusionPass(), *read));
  EXPECT_EQ(GraphToText(*read), text);
  // A log-softmax over the batch axis is not the loss's.
  std::unique_ptr<Graph> axis0 = LossBackward(false, 0, "mean");
  const std::string text0 = GraphToText(*axis0);
  EXPECT_FALSE(testing::RunPassWithBuiltins(CreateCrossEntropyGradFusionPass(), *axis0));
  EXPECT_EQ(GraphToText(*axis0), text0);
}

struct LossRun {
  Tensor dx;
  int fused = 0, chain = 0;
};

LossRun RunLossBackward(const std::string& reduction, OptLevel level, const std::vector<Tensor>& feeds) {
  SessionOptions opts;
  opts.optimization_level = level;
  opts.intra_op_threads = 2;
  auto s = Session::Create(LossBackward(false, -1, reduction), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  LossRun r;
  for (const Node* n : s.value()->graph().nodes()) {
    r.fused += n->op_type() == "SoftmaxCrossEntropyLossGrad";
    r.chain += n->op_type() == "NegativeLogLikelihoodLossGrad" || n->op_type() == "LogSoftmaxGrad_13";
  }
  std::vector<Tensor> out;
  EXPECT_TRUE(s.value()->Run({"dY", "LP", "T", "W"}, feeds, {}, &out).ok());
  if (!out.empty()) r.dx = out[0];
  return r;
}

TEST(OptimizerCrossEntropyGradFusion, FusedMatchesTheChainAndFloat64) {
  for (const char* reduction : {"mean", "sum", "none"}) {
    SCOPED_TRACE(reduction);
    // Log-probabilities of random logits (rows that sum to 1 in probability), targets with one ignored row.
    const Tensor logits = RandomTensor<double>({kN, kC}, -4, 4, 7);
    std::vector<float> lp(kN * kC);
    for (int64_t n = 0; n < kN; ++n) {
      double max = -1e300, sum = 0;
      for (int64_t c = 0; c < kC; ++c) max = std::max(max, logits.data<double>()[n * kC + c]);
      for (int64_t c = 0; c < kC; ++c) sum += std::exp(logits.data<double>()[n * kC + c] - max);
      for (int64_t c = 0; c < kC; ++c)
        lp[n * kC + c] = static_cast<float>(logits.data<double>()[n * kC + c] - max - std::log(sum));
    }
    const std::vector<int64_t> targets = {0, 3, 36, 5, 3, 17};  // ignore_index 3 twice
    const Tensor dy =
        std::string(reduction) == "none" ? RandomTensor<float>({kN}, -2, 2, 8) : Tensor::FromVector<float>({1.7f}, {});
    const Tensor w = RandomTensor<float>({kC}, 0.2, 2, 9);
    const std::vector<Tensor> feeds = {dy, Tensor::FromVector<float>(lp, {kN, kC}),
                                       Tensor::FromVector<int64_t>(targets, {kN}), w};
    const LossRun fused = RunLossBackward(reduction, OptLevel::kExtended, feeds);
    const LossRun chain = RunLossBackward(reduction, OptLevel::kBasic, feeds);
    EXPECT_EQ(fused.fused, 1);
    EXPECT_EQ(fused.chain, 0);
    EXPECT_EQ(chain.fused, 0);
    ASSERT_TRUE(fused.dx.defined() && chain.dx.defined());
    // float64: dX[n, c] = (exp(lp) - [c == t]) w[t] g, g = dY (none), dY / sum of the kept w[t] (mean).
    double total = 0;
    for (int64_t n = 0; n < kN; ++n)
      if (targets[n] != 3) total += w.data<float>()[targets[n]];
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t c = 0; c < kC; ++c) {
        const int64_t t = targets[n];
        double want = 0;
        if (t != 3) {
          double g = std::string(reduction) == "none" ? dy.data<float>()[n] : dy.data<float>()[0];
          if (std::string(reduction) == "mean") g /= total;
          want = (std::exp(static_cast<double>(lp[n * kC + c])) - (c == t ? 1.0 : 0.0)) * w.data<float>()[t] * g;
        }
        const float got = fused.dx.data<float>()[n * kC + c], unfused = chain.dx.data<float>()[n * kC + c];
        EXPECT_NEAR(got, want, 1e-6 * (1 + std::abs(want))) << n << " " << c;
        EXPECT_NEAR(got, unfused, 1e-6 * (1 + std::abs(want))) << n << " " << c;
      }
  }
}

}  // namespace
}  // namespace tob
