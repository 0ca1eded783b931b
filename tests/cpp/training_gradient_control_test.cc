// InPlaceAccumulator, ZeroGradient and ReduceAllL2 against float64 references, and the optimizer
// ops held as session state: weights, moments and the step updated in their own memory.
#include <cmath>

#include "runtime/session.h"
#include "training_test_util.h"

namespace tob::training_test {
namespace {

Tensor Signal(bool v) { return Tensor::FromVector(std::vector<bool>{v}, {}); }

TEST(InPlaceAccumulator, AddsTheValueOfAnyStorageType) {
  const Shape shape{3, 70};
  Tensor sum = RandomTensor<float>(shape, -2, 2, 1);
  for (DType vt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    Tensor value = vt == DType::kFloat32   ? RandomTensor<float>(shape, -1, 1, 2)
                   : vt == DType::kFloat16 ? RandomTensor<Float16>(shape, -1, 1, 2)
                                           : RandomTensor<BFloat16>(shape, -1, 1, 2);
    std::vector<double> expected;
    for (int64_t i = 0; i < sum.numel(); ++i) expected.push_back(sum.ElementAsDouble(i) + value.ElementAsDouble(i));
    OpTester t("InPlaceAccumulator", 1, kMicrosoftDomain);
    t.Input("old_sum", sum).Input("value", value).Output("new_sum", shape, expected).Run();
    OpTester signal_true("InPlaceAccumulator", 1, kMicrosoftDomain);
    signal_true.Input("old_sum", sum)
        .Input("value", value)
        .Input("signal", Signal(true))
        .Output("new_sum", shape, expected)
        .Run();
  }
  OpTester off("InPlaceAccumulator", 1, kMicrosoftDomain);
  off.Input("old_sum", sum)
      .Input("value", RandomTensor<float>(shape, -1, 1, 3))
      .Input("signal", Signal(false))
      .Output("new_sum", shape, ToDoubles(sum), 0, 0)
      .Run();
}

TEST(InPlaceAccumulator, ShapeMismatchIsAnError) {
  OpTester t("InPlaceAccumulator", 1, kMicrosoftDomain);
  t.Input("old_sum", RandomTensor<float>({4})).Input("value", RandomTensor<float>({2, 2})).Output("s", {4}, {});
  ExpectFailure(t, "input 1 (value) float32[2, 2] must have the shape of old_sum float32[4]");
}

TEST(ZeroGradient, ZerosEveryFloatType) {
  for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    Tensor g = dt == DType::kFloat32    ? RandomTensor<float>({5, 3})
               : dt == DType::kFloat16  ? RandomTensor<Float16>({5, 3})
               : dt == DType::kBFloat16 ? RandomTensor<BFloat16>({5, 3})
                                        : RandomTensor<double>({5, 3});
    OpTester t("ZeroGradient", 1, kMicrosoftDomain);
    t.Input("g", g)
        .Input("signal", RandomTensor<float>({2}))
        .Output("z", {5, 3}, std::vector<double>(15, 0.0), 0, 0)
        .Run();
  }
}

TEST(ReduceAllL2, GlobalNormOfAllInputsIndependentOfThreads) {
  // Larger than one segment of the multi-tensor plan, so the sum has many partial sums.
  std::vector<Tensor> xs = {RandomTensor<float>({300, 400}, -1, 1, 11), RandomTensor<float>({7}, -3, 3, 12),
                            RandomTensor<float>({70001}, -0.5, 0.5, 13)};
  double sq = 0;
  for (const Tensor& x : xs)
    for (int64_t i = 0; i < x.numel(); ++i) sq += x.ElementAsDouble(i) * x.ElementAsDouble(i);
  std::vector<float> bits;
  for (int threads : {1, 3, 4}) {
    OpTester t("ReduceAllL2", 1, kMicrosoftDomain);
    t.Threads(threads);
    for (size_t i = 0; i < xs.size(); ++i) t.Input("x" + std::to_string(i), xs[i]);
    t.Output("y", {}, {std::sqrt(sq)}, 1e-6, 0).Run();
    auto out = t.Compute();
    ASSERT_TRUE(out.ok());
    bits.push_back(out.value()[0].data<float>()[0]);
  }
  EXPECT_EQ(bits[0], bits[1]);
  EXPECT_EQ(bits[0], bits[2]);
}

TEST(ReduceAllL2, HalfInputsAndMixedDTypes) {
  Tensor a = RandomTensor<Float16>({33}, -2, 2, 21), b = RandomTensor<Float16>({5, 5}, -2, 2, 22);
  double sq = 0;
  for (const Tensor* x : {&a, &b})
    for (int64_t i = 0; i < x->numel(); ++i) sq += x->ElementAsDouble(i) * x->ElementAsDouble(i);
  OpTester t("ReduceAllL2", 1, kMicrosoftDomain);
  t.Input("a", a).Input("b", b).Output("y", {}, {std::sqrt(sq)}, 1e-6, 0).Run();
  OpTester mixed("ReduceAllL2", 1, kMicrosoftDomain);
  mixed.Input("a", a).Input("b", RandomTensor<float>({3})).Output("y", {}, {});
  ExpectFailure(mixed, "inputs must share one dtype");
}

// Adam with weights, moments and step bound as session state: two steps, each in the tensors'
// own memory, equal to two applications of the reference.
TEST(OptimizerState, AdamUpdatesBoundStateInPlace) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  g->SetOpset(kMicrosoftDomain, 1);
  const ValueType f4(DType::kFloat32, Dims{4});
  ASSERT_TRUE(g->AddInput("lr", ValueType(DType::kFloat32, Dims{})).ok());
  ASSERT_TRUE(g->AddInput("T", ValueType(DType::kInt64, Dims{})).ok());
  for (const char* name : {"W", "G", "M1", "M2"}) ASSERT_TRUE(g->AddInput(name, f4).ok());
  AttributeMap attrs = {{"lambda", Attribute::Float(0.01f)}};
  ASSERT_TRUE(g->AddNode("AdamOptimizer", kMicrosoftDomain, {"lr", "T", "W", "G", "M1", "M2"},
                         {"T_new", "M1_new", "M2_new", "W_new"}, attrs, "adam")
                  .ok());
  for (const char* name : {"T_new", "M1_new", "M2_new", "W_new"}) ASSERT_TRUE(g->AddOutput(name).ok());
  SessionOptions opts;
  opts.state_updates = {{"W", "W_new"}, {"M1", "M1_new"}, {"M2", "M2_new"}, {"T", "T_new"}};
  auto s = Session::Create(std::move(g), opts);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Session& session = *s.value();
  for (const char* state : {"'W'", "'M1'", "'M2'", "'T'"}) {
    bool in_place = false;
    for (const auto& line : session.log())
      in_place = in_place || line.find(std::string("state ") + state + ": updated in place") != std::string::npos;
    EXPECT_TRUE(in_place) << state;
  }
  Tensor w = RandomTensor<float>({4}, -1, 1, 31), m1 = Tensor::FromVector(std::vector<float>(4, 0.0f), {4});
  Tensor m2 = Tensor::FromVector(std::vector<float>(4, 0.0f), {4});
  Tensor step = Tensor::FromVector(std::vector<int64_t>{1}, {});
  std::vector<double> rw = ToDoubles(w), rm(4, 0.0), rv(4, 0.0);
  const void* w_data = w.raw_data();
  ASSERT_TRUE(session.BindState("W", w).ok());
  ASSERT_TRUE(session.BindState("M1", m1).ok());
  ASSERT_TRUE(session.BindState("M2", m2).ok());
  ASSERT_TRUE(session.BindState("T", step).ok());
  const double lr = 0.05, a = 0.9f, b = 0.999f, eps = 1e-8f, lambda = 0.01f;
  for (int t = 1; t <= 2; ++t) {
    Tensor grad = RandomTensor<float>({4}, -1, 1, 40 + t);
    std::vector<Tensor> out;
    ASSERT_TRUE(session.Run({"lr", "G"}, {Tensor::FromVector(std::vector<float>{0.05f}, {}), grad}, {}, &out).ok());
    for (int i = 0; i < 4; ++i) {
      const double gi = grad.ElementAsDouble(i);
      rm[i] = a * rm[i] + (1 - a) * gi;
      rv[i] = b * rv[i] + (1 - b) * gi * gi;
      rw[i] -= lr * ((rm[i] / (1 - std::pow(a, t))) / (std::sqrt(rv[i] / (1 - std::pow(b, t))) + eps) + lambda * rw[i]);
    }
    EXPECT_EQ(step.data<int64_t>()[0], t + 1);
    EXPECT_TRUE(out[3].SharesDataWith(w));
  }
  EXPECT_EQ(w.raw_data(), w_data);
  testing::ExpectClose(w, {4}, rw, 1e-5, 1e-6, "W");
  testing::ExpectClose(m1, {4}, rm, 1e-5, 1e-7, "M1");
  testing::ExpectClose(m2, {4}, rv, 1e-5, 1e-9, "M2");
}

}  // namespace
}  // namespace tob::training_test
