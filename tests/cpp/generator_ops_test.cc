// Generators (Constant, ConstantOfShape, Range, EyeLike, OneHot, Trilu, Dropout, Random*, Bernoulli) against
// references computed here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

// Runs the static shape function with no input values (what the optimizer sees).
ValueType InferStatically(const std::string& op, int opset, std::vector<ValueType> inputs, AttributeMap attrs = {}) {
  Graph g;
  g.SetOpset("", opset);
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("in" + std::to_string(i));
    EXPECT_TRUE(g.AddInput(names.back(), inputs[i]).ok());
  }
  auto node = g.AddNode(op, "", names, {"out"}, std::move(attrs));
  EXPECT_TRUE(node.ok());
  std::vector<const ValueType*> types;
  for (auto& n : names) types.push_back(&g.FindValue(n)->type());
  InferenceContext ctx(*node.value(), opset, types, std::vector<const Tensor*>(inputs.size(), nullptr));
  Status s = OpSchemaRegistry::Global().Infer(ctx);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return ctx.output_types()[0];
}

// ---- Constant / ConstantOfShape ----

TEST(GeneratorOpsConstant, EveryValueAttribute) {
  Tensor value = RandomTensor<float>({2, 3}, -1, 1, 5);
  OpTester t("Constant", 13);
  t.Attr("value", Attribute::TensorValue(value)).Output("y", {2, 3}, ToDoubles(value), 0, 0);
  t.Run();

  OpTester f("Constant", 13);
  f.Attr("value_float", Attribute::Float(2.5f)).Output("y", {}, {2.5}, 0, 0);
  f.Run();
  OpTester fs("Constant", 13);
  fs.Attr("value_floats", Attribute::Floats({1.5f, -2.f})).Output("y", {2}, {1.5, -2}, 0, 0);
  fs.Run();
  OpTester i("Constant", 13);
  i.Attr("value_int", Attribute::Int(-7)).Output("y", {}, {-7}, 0, 0);
  i.Run();
  OpTester is("Constant", 13);
  is.Attr("value_ints", Attribute::Ints({3, 1, 4})).Output("y", {3}, {3, 1, 4}, 0, 0);
  is.Run();
  OpTester ints("Constant", 9);
  Tensor int_value = Tensor::FromVector<int32_t>({5, -6}, {2});
  ints.Attr("value", Attribute::TensorValue(int_value)).Output("y", {2}, {5, -6}, 0, 0);
  ints.Run();
}

TEST(GeneratorOpsConstant, UnsupportedOrMissingValueIsAnError) {
  OpTester sparse("Constant", 13);
  sparse.Attr("sparse_value", Attribute::TensorValue(Tensor::FromVector<float>({1}, {1})));
  sparse.Output("y", {1}, {});
  auto r = sparse.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotImplemented);
  EXPECT_NE(r.status().message().find("sparse_value"), std::string::npos);

  OpTester none("Constant", 13);
  none.Output("y", {}, {});
  EXPECT_FALSE(none.Compute().ok());

  OpTester two("Constant", 13);
  two.Attr("value_int", Attribute::Int(1)).Attr("value_float", Attribute::Float(1)).Output("y", {}, {});
  EXPECT_FALSE(two.Compute().ok());
}

TEST(GeneratorOpsConstantOfShape, ValueAndDefault) {
  OpTester zeros("ConstantOfShape", 9);
  zeros.Input("shape", Tensor::FromVector<int64_t>({2, 3}, {2}));
  zeros.Output("y", {2, 3}, std::vector<double>(6, 0), 0, 0);
  zeros.Run();

  OpTester ints("ConstantOfShape", 20);
  ints.Input("shape", Tensor::FromVector<int64_t>({4, 1, 2}, {3}))
      .Attr("value", Attribute::TensorValue(Tensor::FromVector<int64_t>({-9}, {1})));
  ints.Output("y", {4, 1, 2}, std::vector<double>(8, -9), 0, 0);
  ints.Run();

  OpTester halves("ConstantOfShape", 20);
  halves.Input("shape", Tensor::FromVector<int64_t>({300000}, {1}))
      .Attr("value", Attribute::TensorValue(Tensor::FromVector<Float16>({Float16(0.5f)}, {1})));
  halves.Output("y", {300000}, std::vector<double>(300000, 0.5), 0, 0).Threads(4);
  halves.Run();

  OpTester scalar("ConstantOfShape", 9);
  scalar.Input("shape", Tensor::FromVector<int64_t>({}, {0}))
      .Attr("value", Attribute::TensorValue(Tensor::FromVector<bool>({true}, {1})));
  scalar.Output("y", {}, {1}, 0, 0);
  scalar.Run();

  OpTester empty("ConstantOfShape", 9);
  empty.Input("shape", Tensor::FromVector<int64_t>({3, 0}, {2}));
  empty.Output("y", {3, 0}, {}, 0, 0);
  empty.Run();
}

TEST(GeneratorOpsConstantOfShape, NegativeShapeIsAnErrorAndUnknownShapeDegrades) {
  OpTester bad("ConstantOfShape", 9);
  bad.Input("shape", Tensor::FromVector<int64_t>({2, -1}, {2}));
  bad.Output("y", {2}, {});
  EXPECT_FALSE(bad.Compute().ok());

  ValueType t = InferStatically("ConstantOfShape", 9, {ValueType(DType::kInt64, Dims{3})});
  EXPECT_EQ(t.dtype, DType::kFloat32);
  ASSERT_TRUE(t.has_rank());
  EXPECT_EQ(t.rank(), 3);
  EXPECT_FALSE((*t.shape)[0].is_known());
}

// ---- Range ----

template <typename T>
void CheckRange(double start, double limit, double delta, double rtol = 0) {
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
  std::vector<double> expected;
  for (int64_t i = 0; i < n; ++i) expected.push_back(start + static_cast<double>(i) * delta);
  OpTester t("Range", 11);
  t.Input("start", Tensor::FromVector<T>({static_cast<T>(start)}, {}))
      .Input("limit", Tensor::FromVector<T>({static_cast<T>(limit)}, {}))
      .Input("delta", Tensor::FromVector<T>({static_cast<T>(delta)}, {}));
  t.Output("y", {n}, expected, rtol, rtol);
  SCOPED_TRACE(std::to_string(start) + ".." + std::to_string(limit) + " step " + std::to_string(delta));
  t.Run();
}

TEST(GeneratorOpsRange, FloatIntAndEmpty) {
  CheckRange<float>(1, 5.5, 0.5, 1e-6);
  CheckRange<float>(10, 1, -3, 1e-6);
  CheckRange<double>(-1, 1, 0.3, 1e-12);
  CheckRange<int32_t>(10, -2, -3);
  CheckRange<int64_t>(-5, 1000005, 7);
  CheckRange<int16_t>(0, 9, 2);
  CheckRange<float>(3, 1, 1);  // empty
  CheckRange<int32_t>(3, 3, 1);
}

TEST(GeneratorOpsRange, Float16) {
  OpTester t("Range", 11);
  t.Input("start", Tensor::FromVector<Float16>({Float16(1.0f)}, {}))
      .Input("limit", Tensor::FromVector<Float16>({Float16(2.0f)}, {}))
      .Input("delta", Tensor::FromVector<Float16>({Float16(0.25f)}, {}));
  t.Output("y", {4}, {1, 1.25, 1.5, 1.75}, 0, 0);
  t.Run();
}

TEST(GeneratorOpsRange, ZeroDeltaIsAnErrorAndUnknownValuesDegrade) {
  OpTester bad("Range", 11);
  bad.Input("start", Tensor::FromVector<int64_t>({0}, {}))
      .Input("limit", Tensor::FromVector<int64_t>({5}, {}))
      .Input("delta", Tensor::FromVector<int64_t>({0}, {}));
  bad.Output("y", {0}, {});
  EXPECT_FALSE(bad.Compute().ok());

  ValueType scalar(DType::kFloat32, Dims{});
  ValueType t = InferStatically("Range", 11, {scalar, scalar, scalar});
  EXPECT_EQ(t.dtype, DType::kFloat32);
  ASSERT_TRUE(t.has_rank());
  EXPECT_EQ(t.rank(), 1);
}

// ---- EyeLike / Trilu ----

TEST(GeneratorOpsEyeLike, DiagonalsAndDtype) {
  for (int64_t k : {-2, -1, 0, 1, 3, 5}) {
    std::vector<double> expected(3 * 4, 0);
    for (int64_t i = 0; i < 3; ++i)
      if (i + k >= 0 && i + k < 4) expected[i * 4 + i + k] = 1;
    OpTester t("EyeLike", 9);
    t.Input("x", RandomTensor<int32_t>({3, 4}, 1, 9, 1)).Attr("k", Attribute::Int(k));
    t.Output("y", {3, 4}, expected, 0, 0);
    t.Run();
    OpTester d("EyeLike", 22);
    d.Input("x", RandomTensor<int32_t>({3, 4}, 1, 9, 1))
        .Attr("k", Attribute::Int(k))
        .Attr("dtype", Attribute::Int(static_cast<int64_t>(DType::kFloat64)));
    d.Output("y", {3, 4}, expected, 0, 0);
    d.Run();
  }
  OpTester bad("EyeLike", 9);
  bad.Input("x", RandomTensor<float>({2, 2, 2}, 1, 2, 1)).Output("y", {2, 2, 2}, {});
  EXPECT_FALSE(bad.Compute().ok());
}

TEST(GeneratorOpsTrilu, UpperLowerAndK) {
  Tensor x = RandomTensor<float>({2, 4, 5}, -2, 2, 3);
  std::vector<double> xs = ToDoubles(x);
  for (bool upper : {true, false})
    for (int64_t k : {-6, -1, 0, 2, 7}) {
      std::vector<double> expected(xs.size());
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t j = 0; j < 5; ++j) {
            size_t at = static_cast<size_t>((b * 4 + i) * 5 + j);
            bool keep = upper ? j - i >= k : j - i <= k;
            expected[at] = keep ? xs[at] : 0;
          }
      OpTester t("Trilu", 14);
      t.Input("x", x).Input("k", Tensor::FromVector<int64_t>({k}, {})).Attr("upper", Attribute::Int(upper));
      t.Output("y", {2, 4, 5}, expected, 0, 0);
      SCOPED_TRACE("upper " + std::to_string(upper) + " k " + std::to_string(k));
      t.Run();
    }
  OpTester no_k("Trilu", 14);
  Tensor sq = Tensor::FromVector<int64_t>({1, 2, 3, 4}, {2, 2});
  no_k.Input("x", sq).Attr("upper", Attribute::Int(0)).Output("y", {2, 2}, {1, 0, 3, 4}, 0, 0);
  no_k.Run();
  OpTester bad("Trilu", 14);
  bad.Input("x", Tensor::FromVector<float>({1, 2}, {2})).Output("y", {2}, {});
  EXPECT_FALSE(bad.Compute().ok());
}

// ---- OneHot ----

std::vector<double> ReferenceOneHot(const std::vector<double>& idx, const Shape& shape, int64_t depth, int64_t axis,
                                    double off, double on, bool negative) {
  int64_t a = axis < 0 ? axis + static_cast<int64_t>(shape.size()) + 1 : axis;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= shape[d];
  for (size_t d = a; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> out(static_cast<size_t>(outer * depth * inner), off);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t v = static_cast<int64_t>(idx[o * inner + i]);
      if (v < 0 && negative) v += depth;
      if (v >= 0 && v < depth) out[(o * depth + v) * inner + i] = on;
    }
  return out;
}

TEST(GeneratorOpsOneHot, AxesNegativeAndOutOfRangeIndices) {
  Tensor idx = Tensor::FromVector<int64_t>({0, 3, -1, 5, -6, 2}, {2, 3});
  Tensor values = Tensor::FromVector<float>({-0.5f, 2.0f}, {2});
  for (int64_t axis : {-1, 0, 1, 2, -3})
    for (int opset : {9, 11}) {
      int64_t a = axis < 0 ? axis + 3 : axis;
      Shape shape = {2, 3};
      shape.insert(shape.begin() + a, 5);
      OpTester t("OneHot", opset);
      t.Input("indices", idx).Input("depth", Tensor::FromVector<float>({5.0f}, {})).Input("values", values);
      t.Attr("axis", Attribute::Int(axis));
      t.Output("y", shape, ReferenceOneHot(ToDoubles(idx), {2, 3}, 5, axis, -0.5, 2.0, opset >= 11), 0, 0);
      SCOPED_TRACE("axis " + std::to_string(axis) + " opset " + std::to_string(opset));
      t.Run();
    }
  OpTester floats("OneHot", 11);
  floats.Input("indices", Tensor::FromVector<float>({1.7f, 0.2f}, {2}))
      .Input("depth", Tensor::FromVector<int32_t>({3}, {1}))
      .Input("values", Tensor::FromVector<int32_t>({0, 7}, {2}));
  floats.Output("y", {2, 3}, {0, 7, 0, 7, 0, 0}, 0, 0);
  floats.Run();
}

TEST(GeneratorOpsOneHot, BadDepthOrAxisIsAnError) {
  Tensor values = Tensor::FromVector<float>({0, 1}, {2});
  OpTester depth("OneHot", 11);
  depth.Input("indices", Tensor::FromVector<int64_t>({1}, {1}))
      .Input("depth", Tensor::FromVector<int64_t>({0}, {}))
      .Input("values", values);
  depth.Output("y", {1, 0}, {});
  EXPECT_FALSE(depth.Compute().ok());
  OpTester axis("OneHot", 11);
  axis.Input("indices", Tensor::FromVector<int64_t>({1}, {1}))
      .Input("depth", Tensor::FromVector<int64_t>({3}, {}))
      .Input("values", values)
      .Attr("axis", Attribute::Int(2));
  axis.Output("y", {1, 3}, {});
  EXPECT_FALSE(axis.Compute().ok());
}

// ---- Dropout ----

TEST(GeneratorOpsDropout, InferenceIsIdentityWithAllKeptMask) {
  Tensor x = RandomTensor<float>({3, 4, 5}, -2, 2, 4);
  std::vector<double> xs = ToDoubles(x);
  OpTester v7("Dropout", 7);
  v7.Input("x", x).Attr("ratio", Attribute::Float(0.3f));
  v7.Output("y", {3, 4, 5}, xs, 0, 0).Output("mask", {3, 4, 5}, std::vector<double>(60, 1), 0, 0);
  v7.Run();
  OpTester v10("Dropout", 10);
  v10.Input("x", x).Output("y", {3, 4, 5}, xs, 0, 0).Output("mask", {3, 4, 5}, std::vector<double>(60, 1), 0, 0);
  auto outs = v10.Compute();
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  EXPECT_EQ(outs.value()[1].dtype(), DType::kBool);
  OpTester v13("Dropout", 13);
  v13.Input("x", x).Input("ratio", Tensor::FromVector<float>({0.5f}, {}));
  v13.Input("training_mode", Tensor::FromVector<bool>({false}, {}));
  v13.Output("y", {3, 4, 5}, xs, 0, 0).Output("mask", {3, 4, 5}, std::vector<double>(60, 1), 0, 0);
  v13.Run();
}

TEST(GeneratorOpsDropout, SeededTrainingReproducesNumpy) {
  // numpy: np.random.seed(0); np.random.uniform(0, 1, 5)
  //   = [0.5488135, 0.71518937, 0.60276338, 0.54488318, 0.4236548]
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4, 5}, {5});
  OpTester t("Dropout", 13);
  t.Input("x", x).Input("ratio", Tensor::FromVector<float>({0.6f}, {}));
  t.Input("training_mode", Tensor::FromVector<bool>({true}, {})).Attr("seed", Attribute::Int(0));
  t.Output("y", {5}, {0, 5, 7.5, 0, 0}, 1e-6).Output("mask", {5}, {0, 1, 1, 0, 0}, 0, 0);
  t.Run();
}

TEST(GeneratorOpsDropout, TrainingStatisticsAndDeterminism) {
  const int64_t n = 400000;
  Tensor x = RandomTensor<float>({n}, 0.5, 1.5, 6);
  std::vector<double> xs = ToDoubles(x);
  auto run = [&](int threads) {
    OpTester t("Dropout", 13);
    t.Input("x", x).Input("ratio", Tensor::FromVector<double>({0.25}, {}));
    t.Input("training_mode", Tensor::FromVector<bool>({true}, {})).Attr("seed", Attribute::Int(42));
    t.Output("y", {n}, {}).Output("mask", {n}, {}).Threads(threads);
    auto r = t.Compute();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r.value() : std::vector<Tensor>{};
  };
  auto one = run(1), four = run(4);
  ASSERT_EQ(one.size(), 2u);
  ASSERT_EQ(four.size(), 2u);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool m = one[1].data<bool>()[i];
    kept += m;
    ASSERT_EQ(m, four[1].data<bool>()[i]) << i;
    double expected = m ? xs[i] / 0.75 : 0.0;
    ASSERT_NEAR(one[0].data<float>()[i], expected, 1e-6 * std::fabs(expected)) << i;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.005);

  OpTester zero("Dropout", 13);
  zero.Input("x", x).Input("ratio", Tensor::FromVector<float>({0.0f}, {}));
  zero.Input("training_mode", Tensor::FromVector<bool>({true}, {}));
  zero.Output("y", {n}, xs, 0, 0);
  zero.Run();
}

TEST(GeneratorOpsDropout, BadRatioIsAnError) {
  OpTester attr("Dropout", 10);
  attr.Input("x", RandomTensor<float>({4}, -1, 1, 1)).Attr("ratio", Attribute::Float(1.5f));
  attr.Output("y", {4}, {});
  EXPECT_FALSE(attr.Compute().ok());
  OpTester input("Dropout", 13);
  input.Input("x", RandomTensor<float>({4}, -1, 1, 1)).Input("ratio", Tensor::FromVector<float>({-0.1f}, {}));
  input.Input("training_mode", Tensor::FromVector<bool>({true}, {}));
  input.Output("y", {4}, {});
  EXPECT_FALSE(input.Compute().ok());
}

// ---- Random* ----

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Moments MomentsOf(const Tensor& t) {
  std::vector<double> v = ToDoubles(t);
  Moments m;
  m.min = *std::min_element(v.begin(), v.end());
  m.max = *std::max_element(v.begin(), v.end());
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.stddev += (x - m.mean) * (x - m.mean);
  m.stddev = std::sqrt(m.stddev / static_cast<double>(v.size()));
  return m;
}

StatusOr<Tensor> RunRandom(OpTester& t, const Shape& shape, int threads = 2) {
  t.Output("y", shape, {}).Threads(threads);
  TOB_ASSIGN_OR_RETURN(auto outs, t.Compute());
  return outs[0];
}

TEST(GeneratorOpsRandom, UniformAndNormalMoments) {
  OpTester u("RandomUniform", 1);
  u.Attr("shape", Attribute::Ints({500, 400})).Attr("low", Attribute::Float(-1)).Attr("high", Attribute::Float(3));
  auto uniform = RunRandom(u, {500, 400}, 4);
  ASSERT_TRUE(uniform.ok()) << uniform.status().ToString();
  Moments mu = MomentsOf(uniform.value());
  EXPECT_GE(mu.min, -1.0);
  EXPECT_LT(mu.max, 3.0);
  EXPECT_NEAR(mu.mean, 1.0, 0.01);
  EXPECT_NEAR(mu.stddev, 4.0 / std::sqrt(12.0), 0.01);

  OpTester nrm("RandomNormal", 1);
  nrm.Attr("shape", Attribute::Ints({200001})).Attr("mean", Attribute::Float(2)).Attr("scale", Attribute::Float(0.5));
  nrm.Attr("dtype", Attribute::Int(static_cast<int64_t>(DType::kFloat64)));
  auto normal = RunRandom(nrm, {200001}, 4);
  ASSERT_TRUE(normal.ok()) << normal.status().ToString();
  EXPECT_EQ(normal.value().dtype(), DType::kFloat64);
  Moments mn = MomentsOf(normal.value());
  EXPECT_NEAR(mn.mean, 2.0, 0.01);
  EXPECT_NEAR(mn.stddev, 0.5, 0.01);
}

TEST(GeneratorOpsRandom, SeedMakesRunsReproducibleAcrossThreadCounts) {
  auto draw = [](int threads) {
    OpTester t("RandomNormalLike", 1);
    t.Input("x", RandomTensor<float>({300, 700}, -1, 1, 2)).Attr("seed", Attribute::Float(7));
    return RunRandom(t, {300, 700}, threads);
  };
  auto a = draw(1), b = draw(4);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<double> av = ToDoubles(a.value()), bv = ToDoubles(b.value());
  EXPECT_EQ(av, bv);

  OpTester half("RandomUniformLike", 1);
  half.Input("x", RandomTensor<int32_t>({64}, 1, 5, 2))
      .Attr("dtype", Attribute::Int(static_cast<int64_t>(DType::kFloat16)));
  auto h = RunRandom(half, {64});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h.value().dtype(), DType::kFloat16);
  Moments m = MomentsOf(h.value());
  EXPECT_GE(m.min, 0.0);
  EXPECT_LE(m.max, 1.0);
}

TEST(GeneratorOpsRandom, IntegerDtypeIsAnError) {
  OpTester t("RandomUniformLike", 1);
  t.Input("x", RandomTensor<int32_t>({4}, 1, 5, 2));
  auto r = RunRandom(t, {4});
  EXPECT_FALSE(r.ok());
}

// ---- Bernoulli ----

TEST(GeneratorOpsBernoulli, DrawsFollowTheProbabilities) {
  // Per-element probabilities in five bands; each band's mean must be its probability within five
  // standard deviations of a binomial mean (a wrong comparison, e.g. u > p, fails it).
  const std::vector<double> bands{0.0, 0.1, 0.5, 0.85, 1.0};
  const int64_t per = 40000;
  std::vector<float> p;
  for (double b : bands)
    for (int64_t i = 0; i < per; ++i) p.push_back(static_cast<float>(b));
  OpTester t("Bernoulli", 22);
  t.Input("p", Tensor::FromVector<float>(p, {static_cast<int64_t>(p.size())}));
  auto y = RunRandom(t, {static_cast<int64_t>(p.size())}, 2);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ(y.value().dtype(), DType::kFloat32);
  const std::vector<double> v = ToDoubles(y.value());
  for (size_t b = 0; b < bands.size(); ++b) {
    double sum = 0;
    for (int64_t i = 0; i < per; ++i) {
      const double e = v[b * per + i];
      ASSERT_TRUE(e == 0.0 || e == 1.0) << e;
      sum += e;
    }
    const double sd = std::sqrt(bands[b] * (1 - bands[b]) / per);
    EXPECT_NEAR(sum / per, bands[b], 5 * sd + 1e-12) << "p = " << bands[b];
  }
}

TEST(GeneratorOpsBernoulli, SeedDtypeAndBadProbabilities) {
  auto draw = [](int threads, int64_t dtype) {
    OpTester t("Bernoulli", 15);
    t.Input("p", RandomTensor<double>({300, 500}, 0, 1, 3, 0.0)).Attr("seed", Attribute::Float(11));
    t.Attr("dtype", Attribute::Int(dtype));
    return RunRandom(t, {300, 500}, threads);
  };
  // A seed gives the same draws at any thread count; the dtype attribute picks the output type.
  auto a = draw(1, static_cast<int64_t>(DType::kInt32)), b = draw(4, static_cast<int64_t>(DType::kBool));
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_EQ(a.value().dtype(), DType::kInt32);
  EXPECT_EQ(b.value().dtype(), DType::kBool);
  EXPECT_EQ(ToDoubles(a.value()), ToDoubles(b.value()));
  OpTester bad("Bernoulli", 22);
  bad.Input("p", Tensor::FromVector<float>({0.5f, 1.5f}, {2}));
  auto r = RunRandom(bad, {2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("probability X[1] = 1.5 is outside [0, 1]"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace tob::testing
