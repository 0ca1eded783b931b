// The in-graph optimizer ops (com.microsoft SGDOptimizer, AdamOptimizer, LambOptimizer) against
// float64 references written here from the documented formulas (docs/architecture.md,
// "Training ops"), on every provider that has them.
#include <cmath>

#include "training_test_util.h"

namespace tob::training_test {
namespace {

Tensor Scalar(float v) { return Tensor::FromVector(std::vector<float>{v}, {}); }
Tensor Step(int64_t v) { return Tensor::FromVector(std::vector<int64_t>{v}, {}); }
Tensor Signal(bool v) { return Tensor::FromVector(std::vector<bool>{v}, {}); }
Tensor Positive(const Shape& shape, uint32_t seed) { return RandomTensor<float>(shape, 0.05, 1.5, seed); }
double F(float x) { return static_cast<double>(x); }  // an attribute as the kernel sees it

// onnxruntime-training's gradient divisor: loss scale, times the clip factor of the global norm.
double Divisor(double loss_scale, double grad_norm, double max_norm) {
  return grad_norm > loss_scale * max_norm ? grad_norm / max_norm : loss_scale;
}

TEST(SgdOptimizer, UpdatesWeightsAndReturnsTheStep) {
  const Shape shape{3, 5};
  Tensor w = RandomTensor<float>(shape, -2, 2, 1), g = RandomTensor<float>(shape, -2, 2, 2);
  const float eta = 0.125f;
  std::vector<double> nw, ng;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double wi = w.ElementAsDouble(i), gi = g.ElementAsDouble(i);
    nw.push_back(wi - F(eta) * gi);
    ng.push_back(-F(eta) * gi);
  }
  OpTester t("SGDOptimizer", 1, kMicrosoftDomain);
  t.Input("ETA", Scalar(eta)).Input("W", w).Input("G", g).Output("NW", shape, nw).Output("NG", shape, ng).Run();
}

struct AdamCase {
  float lr = 0.01f, alpha = 0.9f, beta = 0.999f, lambda = 0.0f, epsilon = 1e-8f, max_norm = 1.0f;
  int64_t step = 3, mode = 0;
  bool bias_correction = true;
  double loss_scale = 1.0, grad_norm = -1.0;  // grad_norm < 0: input omitted
};

struct AdamExpected {
  std::vector<double> w, m1, m2, delta;
};

AdamExpected AdamReference(const AdamCase& c, const Tensor& w, const Tensor& g, const Tensor& m1, const Tensor& m2) {
  const double a = F(c.alpha), b = F(c.beta), eps = F(c.epsilon), lambda = F(c.lambda), lr = F(c.lr);
  const double divisor = c.grad_norm < 0 ? c.loss_scale : Divisor(c.loss_scale, c.grad_norm, F(c.max_norm));
  const bool bias = c.bias_correction && c.step > 0;
  const double bc1 = bias ? 1 - std::pow(a, c.step) : 1.0, bc2 = bias ? 1 - std::pow(b, c.step) : 1.0;
  AdamExpected e;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double wi = w.ElementAsDouble(i), gi = g.ElementAsDouble(i) / divisor;
    const double m = a * m1.ElementAsDouble(i) + (1 - a) * gi;
    const double v = b * m2.ElementAsDouble(i) + (1 - b) * gi * gi;
    double nw;
    if (c.mode == 0) {
      nw = wi - lr * ((m / bc1) / (std::sqrt(v / bc2) + eps) + lambda * wi);
    } else {
      const double after = wi - lr * std::sqrt(bc2) / bc1 * m / (std::sqrt(v) + eps);
      nw = after - lr * lambda * after;
    }
    e.w.push_back(nw);
    e.m1.push_back(m);
    e.m2.push_back(v);
    e.delta.push_back(nw - wi);
  }
  return e;
}

OpTester AdamTester(const AdamCase& c, const Tensor& w, const Tensor& g, const Tensor& m1, const Tensor& m2) {
  OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
  t.Attr("alpha", Attribute::Float(c.alpha))
      .Attr("beta", Attribute::Float(c.beta))
      .Attr("lambda", Attribute::Float(c.lambda))
      .Attr("epsilon", Attribute::Float(c.epsilon))
      .Attr("max_norm_clip", Attribute::Float(c.max_norm))
      .Attr("weight_decay_mode", Int(c.mode))
      .Attr("do_bias_correction", Int(c.bias_correction ? 1 : 0));
  t.Input("R", Scalar(c.lr))
      .Input("T", Step(c.step))
      .Input("weights", w)
      .Input("gradients", g)
      .Input("moment_1", m1)
      .Input("moment_2", m2)
      .Input("", Tensor());
  t.Input(c.loss_scale != 1.0 ? "loss_scale" : "",
          c.loss_scale != 1.0 ? Scalar(static_cast<float>(c.loss_scale)) : Tensor());
  t.Input(c.grad_norm >= 0 ? "norm" : "", c.grad_norm >= 0 ? Scalar(static_cast<float>(c.grad_norm)) : Tensor());
  return t;
}

void CheckAdam(const AdamCase& c, DType grad_dtype = DType::kFloat32) {
  const Shape shape{4, 33};
  Tensor w = RandomTensor<float>(shape, -2, 2, 11), m1 = RandomTensor<float>(shape, -0.5, 0.5, 13);
  Tensor m2 = Positive(shape, 14);
  Tensor g = grad_dtype == DType::kFloat16    ? RandomTensor<Float16>(shape, -3, 3, 12)
             : grad_dtype == DType::kBFloat16 ? RandomTensor<BFloat16>(shape, -3, 3, 12)
                                              : RandomTensor<float>(shape, -3, 3, 12);
  const AdamExpected e = AdamReference(c, w, g, m1, m2);
  OpTester t = AdamTester(c, w, g, m1, m2);
  const double delta_tol = grad_dtype == DType::kFloat32 ? 1e-6 : 4e-3 * c.lr;  // delta stored as the grad type
  t.Output("new_T", {}, {static_cast<double>(c.step + 1)}, 0, 0)
      .Output("new_m1", shape, e.m1, 1e-5, 1e-6)
      .Output("new_m2", shape, e.m2, 1e-5, 1e-6)
      .Output("new_w", shape, e.w, 1e-5, 1e-6)
      .Output("new_g", shape, e.delta, 1e-3, delta_tol)
      .Run();
}

TEST(AdamOptimizer, DecayBeforeUpdateIsTorchAdamW) {
  AdamCase c;
  c.lambda = 0.01f;
  CheckAdam(c);
}

TEST(AdamOptimizer, DecayAfterUpdateIsTransformersAdamW) {
  AdamCase c;
  c.mode = 1;
  c.lambda = 0.05f;
  c.epsilon = 1e-6f;
  CheckAdam(c);
}

TEST(AdamOptimizer, WithoutBiasCorrectionAndAtStepZero) {
  AdamCase c;
  c.bias_correction = false;
  CheckAdam(c);
  AdamCase zero;
  zero.step = 0;  // onnxruntime-training: no correction before the first step
  CheckAdam(zero);
}

TEST(AdamOptimizer, GlobalNormClipsAndLossScaleDivides) {
  AdamCase clipped;
  clipped.grad_norm = 7.5;  // > max_norm * loss_scale: gradients divided by norm / max_norm
  clipped.max_norm = 2.0f;
  CheckAdam(clipped);
  AdamCase scaled;
  scaled.loss_scale = 4.0;
  scaled.grad_norm = 6.0;  // unscaled norm 1.5 < max_norm 2: only the loss scale divides
  scaled.max_norm = 2.0f;
  CheckAdam(scaled);
  AdamCase both = scaled;
  both.grad_norm = 20.0;  // unscaled norm 5 > 2: divided by 20 / 2
  CheckAdam(both);
}

TEST(AdamOptimizer, HalfGradients) {
  AdamCase c;
  c.lambda = 0.01f;
  CheckAdam(c, DType::kFloat16);
  CheckAdam(c, DType::kBFloat16);
}

TEST(AdamOptimizer, MixedPrecisionWeightsFollowTheUpdate) {
  const Shape shape{37};
  AdamCase c;
  Tensor w = RandomTensor<float>(shape, -2, 2, 21), g = RandomTensor<float>(shape, -1, 1, 22);
  Tensor m1 = RandomTensor<float>(shape, -0.1, 0.1, 23), m2 = Positive(shape, 24);
  const AdamExpected e = AdamReference(c, w, g, m1, m2);
  OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
  t.Input("R", Scalar(c.lr))
      .Input("T", Step(c.step))
      .Input("weights", w)
      .Input("gradients", g)
      .Input("moment_1", m1)
      .Input("moment_2", m2)
      .Input("half_w", RandomTensor<BFloat16>(shape, -1, 1, 25));
  t.Output("new_T", {}, {4.0}, 0, 0)
      .Output("new_m1", shape, e.m1)
      .Output("new_m2", shape, e.m2)
      .Output("new_w", shape, e.w)
      .Output("new_g", shape, e.delta, 1e-3, 1e-6)
      .Output("new_half_w", shape, Rounded<BFloat16>(e.w), 0, 1e-2 * 2)
      .Run();
}

TEST(AdamOptimizer, UpdateSignalFalseLeavesEverything) {
  const Shape shape{2, 3};
  Tensor w = RandomTensor<float>(shape, -2, 2, 31), g = RandomTensor<float>(shape, -1, 1, 32);
  Tensor m1 = RandomTensor<float>(shape, -0.1, 0.1, 33), m2 = Positive(shape, 34);
  OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
  t.Input("R", Scalar(0.1f))
      .Input("T", Step(5))
      .Input("weights", w)
      .Input("gradients", g)
      .Input("moment_1", m1)
      .Input("moment_2", m2)
      .Input("", Tensor())
      .Input("", Tensor())
      .Input("", Tensor())
      .Input("signal", Signal(false));
  t.Output("new_T", {}, {5.0}, 0, 0)
      .Output("new_m1", shape, ToDoubles(m1), 0, 0)
      .Output("new_m2", shape, ToDoubles(m2), 0, 0)
      .Output("new_w", shape, ToDoubles(w), 0, 0)
      .Output("new_g", shape, ToDoubles(g), 0, 0)
      .Run();
}

TEST(AdamOptimizer, OmittedOutputsAreNotComputed) {
  const Shape shape{9};
  AdamCase c;
  Tensor w = RandomTensor<float>(shape, -2, 2, 41), g = RandomTensor<float>(shape, -1, 1, 42);
  Tensor m1 = RandomTensor<float>(shape, -0.1, 0.1, 43), m2 = Positive(shape, 44);
  const AdamExpected e = AdamReference(c, w, g, m1, m2);
  AttributeMap attrs;
  auto outs = RunWithOutputs("AdamOptimizer", kMicrosoftDomain, 1, {Scalar(c.lr), Step(c.step), w, g, m1, m2}, attrs,
                             {true, false, false, true, false});
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  testing::ExpectClose(outs.value()[3], shape, e.w, 1e-5, 1e-6, "new_w");
  EXPECT_EQ(outs.value()[0].data<int64_t>()[0], 4);
}

TEST(AdamOptimizer, BadInputsAndAttributesNameTheNode) {
  const Shape shape{4};
  Tensor w = RandomTensor<float>(shape, -1, 1, 51), m = Positive(shape, 52);
  {
    OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
    t.Input("R", Scalar(0.1f))
        .Input("T", Step(1))
        .Input("weights", w)
        .Input("gradients", RandomTensor<float>({5}))
        .Input("moment_1", m)
        .Input("moment_2", m)
        .Output("a", shape, {})
        .Output("b", shape, {})
        .Output("c", shape, {});
    ExpectFailure(t, "input 3 (gradients) float32[5] must have the shape of weights float32[4]");
  }
  {
    OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
    t.Input("R", Scalar(0.1f))
        .Input("T", Scalar(1.0f))
        .Input("weights", w)
        .Input("gradients", w)
        .Input("moment_1", m)
        .Input("moment_2", m)
        .Output("a", shape, {})
        .Output("b", shape, {})
        .Output("c", shape, {});
    ExpectFailure(t, "input 1 (T) must be int64");
  }
  for (auto [name, value, fragment] : {std::tuple{"max_norm_clip", 0.0f, "max_norm_clip must be > 0"},
                                       std::tuple{"beta", 1.0f, "beta must be in [0, 1)"}}) {
    OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
    t.Attr(name, Attribute::Float(value));
    t.Input("R", Scalar(0.1f))
        .Input("T", Step(1))
        .Input("weights", w)
        .Input("gradients", w)
        .Input("moment_1", m)
        .Input("moment_2", m)
        .Output("a", {}, {})
        .Output("b", shape, {})
        .Output("c", shape, {});
    ExpectFailure(t, fragment);
  }
  OpTester t("AdamOptimizer", 1, kMicrosoftDomain);
  t.Attr("weight_decay_mode", Int(2));
  t.Input("R", Scalar(0.1f))
      .Input("T", Step(1))
      .Input("weights", w)
      .Input("gradients", w)
      .Input("moment_1", m)
      .Input("moment_2", m)
      .Output("a", {}, {})
      .Output("b", shape, {})
      .Output("c", shape, {});
  ExpectFailure(t, "weight_decay_mode must be 0");
}

// ---- LambOptimizer ----

struct LambGroup {
  float alpha, beta, lambda, epsilon, max_norm;
  Tensor w, g, m1, m2;
};

struct LambExpected {
  std::vector<double> w, delta, m1, m2;
  double trust = 0;  // ||w|| / ||d|| before clamping
};

LambExpected LambReference(const LambGroup& k, double lr, int64_t step, bool bias, double loss_scale, double grad_norm,
                           double ratio_min, double ratio_max) {
  const double a = F(k.alpha), b = F(k.beta);
  const double divisor = grad_norm < 0 ? loss_scale : Divisor(loss_scale, grad_norm, F(k.max_norm));
  const double bc1 = bias && step > 0 ? 1 - std::pow(a, step) : 1.0;
  const double bc2 = bias && step > 0 ? 1 - std::pow(b, step) : 1.0;
  LambExpected e;
  std::vector<double> d;
  double w_sq = 0, d_sq = 0;
  for (int64_t i = 0; i < k.w.numel(); ++i) {
    const double wi = k.w.ElementAsDouble(i), gi = k.g.ElementAsDouble(i) / divisor;
    const double m1 = a * k.m1.ElementAsDouble(i) + (1 - a) * gi;
    const double m2 = b * k.m2.ElementAsDouble(i) + (1 - b) * gi * gi;
    d.push_back(F(k.lambda) * wi + (m1 / bc1) / (std::sqrt(m2 / bc2) + F(k.epsilon)));
    e.m1.push_back(m1);
    e.m2.push_back(m2);
    w_sq += wi * wi;
    d_sq += d.back() * d.back();
  }
  e.trust = std::sqrt(w_sq) / std::sqrt(d_sq);
  const double ratio = lr * std::clamp(e.trust, ratio_min, ratio_max);
  for (int64_t i = 0; i < k.w.numel(); ++i) {
    e.delta.push_back(-ratio * d[i]);
    e.w.push_back(k.w.ElementAsDouble(i) - ratio * d[i]);
  }
  return e;
}

struct ExpectedOutput {
  size_t index;
  std::vector<double> values;
  double rtol, atol;
};

// OpTester::Run compares every output; a Lamb node has placeholder outputs (an omitted
// mixed-precision group member) that are never written, so the comparison is by index here, on
// every provider with a kernel.
void RunAndCompare(OpTester& t, const std::vector<ExpectedOutput>& expected) {
  int providers_run = 0;
  for (const char* provider : {kCpuProvider, kCudaProvider}) {
    auto outs = t.Compute(provider);
    if (!outs.ok() && outs.status().code() == StatusCode::kNotImplemented && std::string(provider) != kCpuProvider)
      continue;
    ASSERT_TRUE(outs.ok()) << provider << ": " << outs.status().ToString();
    ++providers_run;
    for (const ExpectedOutput& e : expected)
      testing::ExpectClose(outs.value()[e.index], outs.value()[e.index].shape(), e.values, e.rtol, e.atol,
                           StrCat("output ", e.index, " on ", provider));
  }
  EXPECT_GT(providers_run, 0);
}

TEST(LambOptimizer, TwoGroupsWithTheirOwnHyperParameters) {
  std::vector<LambGroup> groups = {
      {0.9f, 0.999f, 0.01f, 1e-6f, 1.0f, RandomTensor<float>({6, 7}, -1, 1, 61), RandomTensor<float>({6, 7}, -2, 2, 62),
       RandomTensor<float>({6, 7}, -0.2, 0.2, 63), Positive({6, 7}, 64)},
      {0.8f, 0.99f, 0.0f, 1e-4f, 3.0f, RandomTensor<float>({40}, -3, 3, 65), RandomTensor<float>({40}, -1, 1, 66),
       RandomTensor<float>({40}, -0.2, 0.2, 67), Positive({40}, 68)}};
  const float lr = 0.02f;
  const int64_t step = 4;
  const double loss_scale = 2.0, grad_norm = 5.0;  // group 0 clipped (5 / 2 > 1), group 1 not (2.5 < 3)
  for (auto [ratio_min, ratio_max] : {std::pair{-INFINITY, INFINITY}, std::pair{0.5f, 0.8f}}) {
    OpTester t("LambOptimizer", 1, kMicrosoftDomain);
    t.Attr("alpha", Attribute::Floats({groups[0].alpha, groups[1].alpha}))
        .Attr("beta", Attribute::Floats({groups[0].beta, groups[1].beta}))
        .Attr("lambda", Attribute::Floats({groups[0].lambda, groups[1].lambda}))
        .Attr("epsilon", Attribute::Floats({groups[0].epsilon, groups[1].epsilon}))
        .Attr("max_norm_clip", Attribute::Floats({groups[0].max_norm, groups[1].max_norm}))
        .Attr("ratio_min", Attribute::Float(ratio_min))
        .Attr("ratio_max", Attribute::Float(ratio_max));
    t.Input("", Tensor())
        .Input("scale", Scalar(static_cast<float>(loss_scale)))
        .Input("norm", Scalar(static_cast<float>(grad_norm)))
        .Input("R", Scalar(lr))
        .Input("step", Step(step));
    t.Output("new_step", {}, {});
    std::vector<ExpectedOutput> expected = {{0, {static_cast<double>(step + 1)}, 0, 0}};
    for (size_t k = 0; k < groups.size(); ++k) {
      const LambGroup& g = groups[k];
      const std::string s = std::to_string(k);
      t.Input("w" + s, g.w).Input("g" + s, g.g).Input("m1" + s, g.m1).Input("m2" + s, g.m2);
      if (k + 1 < groups.size()) t.Input("", Tensor());
      const LambExpected e = LambReference(g, F(lr), step, true, loss_scale, grad_norm, ratio_min, ratio_max);
      if (ratio_max < INFINITY)
        EXPECT_TRUE(e.trust < ratio_min || e.trust > ratio_max) << "group " << k << " not clamped";
      for (const char* o : {"nw", "ng", "nm1", "nm2"}) t.Output(o + s, g.w.shape(), {});
      if (k + 1 < groups.size()) t.Output("", g.w.shape(), {});
      const size_t base = 1 + 5 * k;
      expected.push_back({base, e.w, 1e-5, 1e-6});
      expected.push_back({base + 1, e.delta, 1e-4, 1e-7});
      expected.push_back({base + 2, e.m1, 1e-5, 1e-7});
      expected.push_back({base + 3, e.m2, 1e-5, 1e-7});
    }
    RunAndCompare(t, expected);
  }
}

TEST(LambOptimizer, UpdateSignalFalseLeavesEverything) {
  Tensor w = RandomTensor<float>({5}, -1, 1, 71), g = RandomTensor<float>({5}, -1, 1, 72);
  Tensor m1 = RandomTensor<float>({5}, -1, 1, 73), m2 = Positive({5}, 74);
  OpTester t("LambOptimizer", 1, kMicrosoftDomain);
  t.Input("signal", Signal(false))
      .Input("", Tensor())
      .Input("", Tensor())
      .Input("R", Scalar(0.1f))
      .Input("step", Step(2))
      .Input("w", w)
      .Input("g", g)
      .Input("m1", m1)
      .Input("m2", m2);
  t.Output("new_step", {}, {2.0}, 0, 0)
      .Output("nw", {5}, ToDoubles(w), 0, 0)
      .Output("ng", {5}, ToDoubles(g), 0, 0)
      .Output("nm1", {5}, ToDoubles(m1), 0, 0)
      .Output("nm2", {5}, ToDoubles(m2), 0, 0)
      .Run();
}

TEST(LambOptimizer, BadGroupsNameTheNode) {
  Tensor w = RandomTensor<float>({5}, -1, 1, 81), m = Positive({5}, 82);
  {
    OpTester t("LambOptimizer", 1, kMicrosoftDomain);
    t.Attr("alpha", Attribute::Floats({0.9f}));  // one value, two groups
    t.Input("", Tensor()).Input("", Tensor()).Input("", Tensor()).Input("R", Scalar(0.1f)).Input("step", Step(1));
    for (int k = 0; k < 2; ++k)
      t.Input("w" + std::to_string(k), w)
          .Input("g" + std::to_string(k), w)
          .Input("m1" + std::to_string(k), m)
          .Input("m2" + std::to_string(k), m)
          .Input("", Tensor());
    t.Output("s", {}, {});
    for (int k = 0; k < 2; ++k) {
      for (const char* o : {"nw", "ng", "nm1", "nm2"}) t.Output(o + std::to_string(k), {5}, {});
      t.Output("", {5}, {});
    }
    ExpectFailure(t, "attribute 'alpha' has 1 values for 2 weight groups");
  }
  OpTester t("LambOptimizer", 1, kMicrosoftDomain);
  t.Input("", Tensor())
      .Input("", Tensor())
      .Input("", Tensor())
      .Input("R", Scalar(0.1f))
      .Input("step", Step(1))
      .Input("w", w)
      .Input("g", RandomTensor<float>({4}))
      .Input("m1", m)
      .Input("m2", m);
  t.Output("s", {}, {}).Output("nw", {5}, {}).Output("ng", {5}, {}).Output("nm1", {5}, {}).Output("nm2", {5}, {});
  ExpectFailure(t, "input 6 (gradients) float32[4] must have the shape of weights float32[5]");
}

}  // namespace
}  // namespace tob::training_test
