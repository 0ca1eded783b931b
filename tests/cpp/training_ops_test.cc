// Training ops (activation, softmax and LayerNormalization gradients, NegativeLogLikelihoodLoss
// and its gradient, GatherGrad) against float64 references: finite differences of a float64
// forward where the gradient formula is not trivial, explicit loops otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "training_test_util.h"

namespace tob {
namespace {

using namespace training_test;

// ---------------------------------------------------------------- activation gradients

double GeluExact(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double GeluTanh(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// dX = dY * d/dx forward(x), the derivative by central differences.
std::vector<double> ChainNumeric(const std::vector<double>& dy, const std::vector<double>& x,
                                 double (*forward)(double)) {
  std::vector<double> r;
  for (size_t i = 0; i < x.size(); ++i) {
    const double h = 1e-5;
    r.push_back(dy[i] * (forward(x[i] + h) - forward(x[i] - h)) / (2 * h));
  }
  return r;
}

template <typename T>
void RunGeluGrad(const char* op, double (*forward)(double), double tol) {
  // 2053 elements: several blocks and a ragged tail; values wide enough to reach both tails.
  const Shape shape{2053};
  Tensor dy = RandomTensor<T>(shape, -2, 2, 1), x = RandomTensor<T>(shape, -6, 6, 2);
  OpTester(op, 1, kMicrosoftDomain)
      .Input("dY", dy)
      .Input("X", x)
      .Output("dX", shape, ChainNumeric(ToDoubles(dy), ToDoubles(x), forward), tol, tol)
      .Threads(3)
      .Run();
}

TEST(TrainingActivationGrad, GeluGradMatchesNumericDerivative) {
  RunGeluGrad<float>("GeluGrad", GeluExact, 2e-6);
  RunGeluGrad<double>("GeluGrad", GeluExact, 1e-8);
  RunGeluGrad<Float16>("GeluGrad", GeluExact, 5e-3);
  RunGeluGrad<BFloat16>("GeluGrad", GeluExact, 2e-2);
}

TEST(TrainingActivationGrad, FastGeluGradMatchesNumericDerivative) {
  RunGeluGrad<float>("FastGeluGrad", GeluTanh, 2e-6);
  RunGeluGrad<double>("FastGeluGrad", GeluTanh, 1e-8);
  RunGeluGrad<Float16>("FastGeluGrad", GeluTanh, 5e-3);
}

TEST(TrainingActivationGrad, ReluSigmoidTanh) {
  const Shape shape{3, 701};
  Tensor dy = RandomTensor<float>(shape, -2, 2, 3), x = RandomTensor<float>(shape, -3, 3, 4);
  std::vector<double> dyv = ToDoubles(dy), xv = ToDoubles(x), relu, sig_y, sig_dx, tanh_y, tanh_dx;
  for (size_t i = 0; i < xv.size(); ++i) {
    relu.push_back(xv[i] > 0 ? dyv[i] : 0.0);
    sig_y.push_back(Sigmoid(xv[i]));
    tanh_y.push_back(std::tanh(xv[i]));
  }
  sig_y = Rounded<float>(sig_y);
  tanh_y = Rounded<float>(tanh_y);
  for (size_t i = 0; i < xv.size(); ++i) {
    sig_dx.push_back(dyv[i] * sig_y[i] * (1 - sig_y[i]));
    tanh_dx.push_back(dyv[i] * (1 - tanh_y[i] * tanh_y[i]));
  }
  OpTester("ReluGrad", 1, kMicrosoftDomain).Input("dY", dy).Input("X", x).Output("dX", shape, relu, 0, 0).Run();
  OpTester("SigmoidGrad", 1, kMicrosoftDomain)
      .Input("dY", dy)
      .Input("Y", FromDoubles<float>(sig_y, shape))
      .Output("dX", shape, sig_dx, 1e-6, 1e-7)
      .Run();
  OpTester("TanhGrad", 1, kMicrosoftDomain)
      .Input("dY", dy)
      .Input("Y", FromDoubles<float>(tanh_y, shape))
      .Output("dX", shape, tanh_dx, 1e-6, 1e-7)
      .Run();
  // Relu's output gives the same mask as its input.
  std::vector<double> relu_out;
  for (double v : xv) relu_out.push_back(std::max(v, 0.0));
  OpTester("ReluGrad", 1, kMicrosoftDomain)
      .Input("dY", dy)
      .Input("Y", FromDoubles<float>(relu_out, shape))
      .Output("dX", shape, relu, 0, 0)
      .Run();
  // 16-bit and float64 storage.
  Tensor dyh = RandomTensor<Float16>({40}, -2, 2, 5), yh = RandomTensor<Float16>({40}, 0.01, 0.99, 6);
  std::vector<double> hdx;
  for (size_t i = 0; i < 40; ++i) {
    const double d = ToDoubles(dyh)[i], y = ToDoubles(yh)[i];
    hdx.push_back(d * y * (1 - y));
  }
  OpTester("SigmoidGrad", 1, kMicrosoftDomain)
      .Input("dY", dyh)
      .Input("Y", yh)
      .Output("dX", {40}, hdx, 2e-3, 1e-4)
      .Run();
  Tensor dyd = RandomTensor<double>({17}, -2, 2, 7), xd = RandomTensor<double>({17}, -2, 2, 8);
  std::vector<double> ddx;
  for (size_t i = 0; i < 17; ++i) ddx.push_back(ToDoubles(xd)[i] > 0 ? ToDoubles(dyd)[i] : 0.0);
  OpTester("ReluGrad", 1, kMicrosoftDomain).Input("dY", dyd).Input("X", xd).Output("dX", {17}, ddx, 0, 0).Run();
}

TEST(TrainingActivationGrad, ShapeMismatchIsAnError) {
  OpTester t("ReluGrad", 1, kMicrosoftDomain);
  t.Input("dY", RandomTensor<float>({2, 3})).Input("X", RandomTensor<float>({3, 2})).Output("dX", {2, 3}, {});
  ExpectFailure(t, "one shape");
}

// ---------------------------------------------------------------- softmax gradients

// Softmax (or log-softmax) of x over the [outer, D, inner] view, in float64.
std::vector<double> SoftmaxRef(const std::vector<double>& x, int64_t outer, int64_t D, int64_t inner, bool log) {
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t d = 0; d < D; ++d) mx = std::max(mx, x[(o * D + d) * inner + i]);
      for (int64_t d = 0; d < D; ++d) sum += std::exp(x[(o * D + d) * inner + i] - mx);
      for (int64_t d = 0; d < D; ++d) {
        const double v = x[(o * D + d) * inner + i] - mx;
        y[(o * D + d) * inner + i] = log ? v - std::log(sum) : std::exp(v) / sum;
      }
    }
  return y;
}

// Gradient of sum(dY * softmax(x)) w.r.t. x by finite differences, expressed through Y: the op
// receives Y = softmax(x) and must return exactly this.
std::vector<double> SoftmaxGradNumeric(const std::vector<double>& dy, const std::vector<double>& x, int64_t outer,
                                       int64_t D, int64_t inner, bool log) {
  return NumericGradient(
      [&](const std::vector<double>& xs) {
        std::vector<double> y = SoftmaxRef(xs, outer, D, inner, log);
        double s = 0;
        for (size_t i = 0; i < y.size(); ++i) s += dy[i] * y[i];
        return s;
      },
      x);
}

template <typename T>
void RunSoftmaxGrad(const std::string& op, const Shape& shape, int64_t axis, bool coerce_2d, double tol,
                    bool set_axis = true) {
  const bool log = op.rfind("Log", 0) == 0;
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  int64_t outer = 1, D = 1, inner = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (i < a) outer *= shape[i];
    else if (i == a || coerce_2d) D *= shape[i];
    else inner *= shape[i];
  }
  Tensor x = RandomTensor<double>(shape, -3, 3, 11);
  Tensor dy = RandomTensor<T>(shape, -1, 1, 12);
  std::vector<double> y = Rounded<T>(SoftmaxRef(ToDoubles(x), outer, D, inner, log));
  std::vector<double> expected = SoftmaxGradNumeric(ToDoubles(dy), ToDoubles(x), outer, D, inner, log);
  OpTester t(op, 1, kMicrosoftDomain);
  if (set_axis) t.Attr("axis", Int(axis));
  t.Input("dY", dy).Input("Y", FromDoubles<T>(y, shape)).Output("dX", shape, expected, tol, tol).Threads(3).Run();
}

TEST(TrainingSoftmaxGrad, LastAxisRows) {
  RunSoftmaxGrad<float>("SoftmaxGrad_13", {5, 77}, -1, false, 1e-5, false);
  RunSoftmaxGrad<float>("LogSoftmaxGrad_13", {5, 77}, -1, false, 1e-5, false);
  // float64: the finite differences themselves are good to ~1e-8 here.
  RunSoftmaxGrad<double>("SoftmaxGrad_13", {3, 2, 40}, 2, false, 1e-7);
  RunSoftmaxGrad<double>("LogSoftmaxGrad_13", {3, 2, 40}, -1, false, 1e-7);
}

TEST(TrainingSoftmaxGrad, InnerAxisLanes) {
  RunSoftmaxGrad<float>("SoftmaxGrad_13", {3, 6, 5, 4}, 1, false, 1e-5);
  RunSoftmaxGrad<float>("LogSoftmaxGrad_13", {3, 6, 5, 4}, -3, false, 1e-5);
  RunSoftmaxGrad<float>("SoftmaxGrad_13", {7, 3}, 0, false, 1e-5);
}

TEST(TrainingSoftmaxGrad, Coerced2DForm) {
  // Opset < 13 semantics: dims from axis on are one row; the default axis is 1.
  RunSoftmaxGrad<float>("SoftmaxGrad", {2, 3, 4}, 1, true, 1e-5, false);
  RunSoftmaxGrad<float>("LogSoftmaxGrad", {2, 3, 4}, 1, true, 1e-5, false);
  RunSoftmaxGrad<double>("SoftmaxGrad", {2, 3, 4}, 0, true, 1e-7);
}

TEST(TrainingSoftmaxGrad, HalfTypes) {
  RunSoftmaxGrad<Float16>("SoftmaxGrad_13", {4, 33}, -1, false, 3e-3);
  RunSoftmaxGrad<BFloat16>("LogSoftmaxGrad_13", {4, 33}, -1, false, 5e-2);
}

TEST(TrainingSoftmaxGrad, BadAxisIsAnError) {
  OpTester t("SoftmaxGrad_13", 1, kMicrosoftDomain);
  t.Attr("axis", Int(2))
      .Input("dY", RandomTensor<float>({2, 3}))
      .Input("Y", RandomTensor<float>({2, 3}))
      .Output("dX", {2, 3}, {});
  ExpectFailure(t, "axis 2 is out of range");
}

// ---------------------------------------------------------------- LayerNormalizationGrad

struct LayerNormCase {
  std::vector<double> x, scale, bias, dy;
  int64_t rows, D;
  double eps = 1e-5;
};

// sum(dY * LayerNorm(x)) in float64.
double LayerNormObjective(const LayerNormCase& c, const std::vector<double>& x) {
  double total = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c.D; ++j) mean += x[r * c.D + j] / c.D;
    for (int64_t j = 0; j < c.D; ++j) var += (x[r * c.D + j] - mean) * (x[r * c.D + j] - mean) / c.D;
    const double inv = 1 / std::sqrt(var + c.eps);
    for (int64_t j = 0; j < c.D; ++j)
      total += c.dy[r * c.D + j] * ((x[r * c.D + j] - mean) * inv * c.scale[j] + c.bias[j]);
  }
  return total;
}

struct LayerNormGradRef {
  std::vector<double> mean, inv_std, dx, dscale, dbias;
};

LayerNormGradRef RefLayerNormGrad(const LayerNormCase& c) {
  LayerNormGradRef r;
  r.dscale.assign(c.D, 0);
  r.dbias.assign(c.D, 0);
  for (int64_t row = 0; row < c.rows; ++row) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c.D; ++j) mean += c.x[row * c.D + j] / c.D;
    for (int64_t j = 0; j < c.D; ++j) var += (c.x[row * c.D + j] - mean) * (c.x[row * c.D + j] - mean) / c.D;
    const double inv = 1 / std::sqrt(var + c.eps);
    r.mean.push_back(mean);
    r.inv_std.push_back(inv);
    for (int64_t j = 0; j < c.D; ++j) {
      r.dscale[j] += c.dy[row * c.D + j] * (c.x[row * c.D + j] - mean) * inv;
      r.dbias[j] += c.dy[row * c.D + j];
    }
  }
  r.dx = NumericGradient([&](const std::vector<double>& x) { return LayerNormObjective(c, x); }, c.x, 1e-5);
  return r;
}

template <typename T>
void RunLayerNormGrad(const Shape& x_shape, int64_t axis, const Shape& scale_shape, double tol, bool with_bias_grad,
                      DType stat_type = DType::kFloat32) {
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  LayerNormCase c;
  c.D = NumElements(Shape(x_shape.begin() + a, x_shape.end()));
  c.rows = NumElements(x_shape) / c.D;
  Tensor x = RandomTensor<T>(x_shape, -2, 2, 21), dy = RandomTensor<T>(x_shape, -1, 1, 22);
  Tensor scale = RandomTensor<T>(scale_shape, 0.5, 1.5, 23);
  c.x = ToDoubles(x);
  c.dy = ToDoubles(dy);
  c.scale = ToDoubles(scale);
  c.bias.assign(c.D, 0.25);
  LayerNormGradRef ref = RefLayerNormGrad(c);
  Shape stat_shape(x_shape.begin(), x_shape.begin() + a);
  stat_shape.resize(x_shape.size(), 1);
  Tensor mean = stat_type == DType::kFloat64 ? FromDoubles<double>(ref.mean, stat_shape)
                                             : FromDoubles<float>(ref.mean, stat_shape);
  Tensor inv = stat_type == DType::kFloat64 ? FromDoubles<double>(ref.inv_std, stat_shape)
                                            : FromDoubles<float>(ref.inv_std, stat_shape);
  OpTester t("LayerNormalizationGrad", 1, kMicrosoftDomain);
  if (axis != -1) t.Attr("axis", Int(axis));
  t.Input("Y_grad", dy)
      .Input("X", x)
      .Input("scale", scale)
      .Input("mean", mean)
      .Input("inv_std_dev", inv)
      .Output("X_grad", x_shape, ref.dx, tol, tol)
      .Output("scale_grad", scale_shape, ref.dscale, tol, tol);
  if (with_bias_grad) t.Output("bias_grad", scale_shape, ref.dbias, tol, tol);
  t.Threads(3).Run();
}

TEST(TrainingLayerNormGrad, LastAxis) {
  RunLayerNormGrad<float>({2, 3, 96}, -1, {96}, 2e-4, true);
  RunLayerNormGrad<float>({70, 8}, -1, {8}, 2e-4, false);  // more rows than chunks
  RunLayerNormGrad<double>({5, 33}, 1, {33}, 1e-7, true, DType::kFloat64);
}

TEST(TrainingLayerNormGrad, InnerAxisAndMultiDimScale) { RunLayerNormGrad<float>({4, 3, 5}, 1, {3, 5}, 2e-4, true); }

TEST(TrainingLayerNormGrad, HalfTypes) {
  RunLayerNormGrad<Float16>({3, 40}, -1, {40}, 3e-2, true);
  RunLayerNormGrad<BFloat16>({3, 40}, -1, {40}, 2e-1, true);
}

TEST(TrainingLayerNormGrad, ForwardStatisticsFeedTheGradient) {
  // LayerNormalization's own Mean / InvStdDev outputs (stash_type float32) as the saved inputs.
  const Shape shape{6, 64};
  Tensor x = RandomTensor<float>(shape, -2, 2, 31), scale = RandomTensor<float>({64}, 0.5, 1.5, 32);
  Tensor bias = RandomTensor<float>({64}, -1, 1, 33), dy = RandomTensor<float>(shape, -1, 1, 34);
  auto fwd = OpTester("LayerNormalization", 17)
                 .Input("X", x)
                 .Input("Scale", scale)
                 .Input("B", bias)
                 .Output("Y", shape, {})
                 .Output("Mean", {6, 1}, {})
                 .Output("InvStdDev", {6, 1}, {})
                 .Compute();
  ASSERT_TRUE(fwd.ok()) << fwd.status().ToString();
  ASSERT_EQ(fwd.value()[1].dtype(), DType::kFloat32);
  LayerNormCase c;
  c.x = ToDoubles(x);
  c.dy = ToDoubles(dy);
  c.scale = ToDoubles(scale);
  c.bias = ToDoubles(bias);
  c.rows = 6;
  c.D = 64;
  LayerNormGradRef ref = RefLayerNormGrad(c);
  testing::ExpectClose(fwd.value()[1], {6, 1}, ref.mean, 1e-5, 1e-6, "Mean");
  testing::ExpectClose(fwd.value()[2], {6, 1}, ref.inv_std, 1e-5, 1e-6, "InvStdDev");
  OpTester("LayerNormalizationGrad", 1, kMicrosoftDomain)
      .Input("Y_grad", dy)
      .Input("X", x)
      .Input("scale", scale)
      .Input("mean", fwd.value()[1])
      .Input("inv_std_dev", fwd.value()[2])
      .Output("X_grad", shape, ref.dx, 2e-4, 2e-4)
      .Output("scale_grad", {64}, ref.dscale, 2e-4, 2e-4)
      .Output("bias_grad", {64}, ref.dbias, 1e-5, 1e-5)
      .Run();
}

TEST(TrainingLayerNormGrad, BadStatisticsAreAnError) {
  OpTester t("LayerNormalizationGrad", 1, kMicrosoftDomain);
  t.Input("Y_grad", RandomTensor<float>({4, 8}))
      .Input("X", RandomTensor<float>({4, 8}))
      .Input("scale", RandomTensor<float>({8}))
      .Input("mean", RandomTensor<float>({3, 1}))
      .Input("inv_std_dev", RandomTensor<float>({3, 1}))
      .Output("X_grad", {4, 8}, {});
  ExpectFailure(t, "one value per normalized row");
}

// ---------------------------------------------------------------- NegativeLogLikelihoodLoss

struct NllCase {
  Shape x_shape;
  std::vector<double> x, w;  // w empty: no weight
  std::vector<int64_t> target;
  std::optional<int64_t> ignore;
  std::string reduction = "mean";
};

// Per-element weighted losses (0 where ignored) and the total weight of the counted targets.
void NllTerms(const NllCase& c, std::vector<double>* loss, double* total_weight) {
  const int64_t N = c.x_shape[0], C = c.x_shape[1], inner = NumElements(c.x_shape) / (N * C);
  *total_weight = 0;
  loss->clear();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t t = c.target[n * inner + i];
      if (c.ignore && t == *c.ignore) {
        loss->push_back(0);
        continue;
      }
      const double w = c.w.empty() ? 1 : c.w[t];
      loss->push_back(-c.x[(n * C + t) * inner + i] * w);
      *total_weight += w;
    }
}

std::vector<double> NllRef(const NllCase& c) {
  std::vector<double> loss;
  double total_weight;
  NllTerms(c, &loss, &total_weight);
  if (c.reduction == "none") return loss;
  double s = 0;
  for (double v : loss) s += v;
  return {c.reduction == "mean" ? s / total_weight : s};
}

// Random targets in [0, C), with every `ignore_every`-th one set to the ignore index.
std::vector<int64_t> RandomTargets(int64_t count, int64_t C, std::optional<int64_t> ignore, int ignore_every,
                                   uint32_t seed) {
  std::vector<double> r = ToDoubles(RandomTensor<double>({count}, 0, static_cast<double>(C), seed, 0));
  std::vector<int64_t> t;
  for (int64_t i = 0; i < count; ++i) {
    t.push_back(std::min<int64_t>(C - 1, static_cast<int64_t>(r[i])));
    if (ignore && ignore_every > 0 && i % ignore_every == 1) t.back() = *ignore;
  }
  return t;
}

template <typename T, typename I = int64_t>
void RunNll(const Shape& x_shape, const std::string& reduction, bool weighted, std::optional<int64_t> ignore,
            double tol, int opset = 13) {
  NllCase c;
  c.x_shape = x_shape;
  c.reduction = reduction;
  c.ignore = ignore;
  Tensor x = RandomTensor<T>(x_shape, -3, 0, 41);
  c.x = ToDoubles(x);
  const int64_t C = x_shape[1];
  Shape t_shape{x_shape[0]};
  t_shape.insert(t_shape.end(), x_shape.begin() + 2, x_shape.end());
  c.target = RandomTargets(NumElements(t_shape), C, ignore, 3, 42);
  Tensor w = RandomTensor<T>({C}, 0.2, 2, 43);
  if (weighted) c.w = ToDoubles(w);
  std::vector<I> target_typed(c.target.begin(), c.target.end());
  OpTester t("NegativeLogLikelihoodLoss", opset);
  t.Attr("reduction", Attribute::String(reduction));
  if (ignore) t.Attr("ignore_index", Int(*ignore));
  t.Input("input", x).Input("target", Tensor::FromVector<I>(target_typed, t_shape));
  if (weighted) t.Input("weight", w);
  t.Output("loss", reduction == "none" ? t_shape : Shape{}, NllRef(c), tol, tol).Threads(3).Run();
}

TEST(TrainingNllLoss, ReductionsWeightsAndIgnoreIndex) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunNll<float>({6, 5}, reduction, false, std::nullopt, 1e-5);
    RunNll<float>({6, 5}, reduction, true, std::nullopt, 1e-5);
    RunNll<float>({3, 5, 4, 3}, reduction, true, int64_t{2}, 1e-5);      // an in-range class ignored
    RunNll<float>({3, 5, 4, 3}, reduction, false, int64_t{-100}, 1e-5);  // torch's default
    RunNll<double, int32_t>({4, 7, 9}, reduction, true, int64_t{-1}, 1e-12);
  }
  RunNll<Float16>({4, 6, 5}, "mean", true, int64_t{0}, 2e-3);
  RunNll<BFloat16>({4, 6, 5}, "sum", false, std::nullopt, 2e-2, 22);
  // Enough elements for several summation chunks.
  RunNll<float>({8, 3, 100, 30}, "mean", true, int64_t{1}, 1e-5);
}

TEST(TrainingNllLoss, AllIgnoredMeanIsNaN) {
  Tensor x = RandomTensor<float>({2, 3}, -2, 0, 44);
  OpTester("NegativeLogLikelihoodLoss", 13)
      .Attr("ignore_index", Int(1))
      .Input("input", x)
      .Input("target", Tensor::FromVector<int64_t>({1, 1}, {2}))
      .Output("loss", {}, {std::numeric_limits<double>::quiet_NaN()})
      .Run();
}

TEST(TrainingNllLoss, TargetOutOfRangeIsAnError) {
  OpTester t("NegativeLogLikelihoodLoss", 13);
  t.Attr("ignore_index", Int(-1))
      .Input("input", RandomTensor<float>({3, 4}))
      .Input("target", Tensor::FromVector<int64_t>({0, 4, -1}, {3}))
      .Output("loss", {}, {});
  ExpectFailure(t, "target[1] = 4 is outside the class range [0, 4)");
  OpTester neg("NegativeLogLikelihoodLoss", 13);
  neg.Input("input", RandomTensor<float>({3, 4}))
      .Input("target", Tensor::FromVector<int32_t>({0, -1, 2}, {3}))
      .Output("loss", {}, {});
  ExpectFailure(neg, "target[1] = -1");
}

TEST(TrainingNllLoss, BadShapesAreAnError) {
  OpTester t("NegativeLogLikelihoodLoss", 13);
  t.Input("input", RandomTensor<float>({3, 4, 2}))
      .Input("target", Tensor::FromVector<int64_t>({0, 1, 2}, {3}))
      .Output("loss", {}, {});
  ExpectFailure(t, "must have rank 2");
}

template <typename T>
void RunNllGrad(const Shape& x_shape, const std::string& reduction, bool weighted, std::optional<int64_t> ignore,
                double tol) {
  NllCase c;
  c.x_shape = x_shape;
  c.reduction = reduction;
  c.ignore = ignore;
  Tensor x = RandomTensor<T>(x_shape, -3, 0, 51);
  c.x = ToDoubles(x);
  const int64_t N = x_shape[0], C = x_shape[1], inner = NumElements(x_shape) / (N * C);
  Shape t_shape{N};
  t_shape.insert(t_shape.end(), x_shape.begin() + 2, x_shape.end());
  c.target = RandomTargets(NumElements(t_shape), C, ignore, 4, 52);
  Tensor w = RandomTensor<T>({C}, 0.2, 2, 53);
  if (weighted) c.w = ToDoubles(w);
  Tensor dy = reduction == "none" ? RandomTensor<T>(t_shape, -1, 1, 54) : RandomTensor<T>({}, 0.5, 1.5, 54);
  std::vector<double> loss, dyv = ToDoubles(dy);
  double total_weight;
  NllTerms(c, &loss, &total_weight);
  // The loss is linear in x: dX[n, t, i] = -w[t] * (dY[n, i] | dY | dY / total weight).
  std::vector<double> dx(c.x.size(), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t t = c.target[n * inner + i];
      if (ignore && t == *ignore) continue;
      double g = reduction == "none" ? dyv[n * inner + i] : dyv[0];
      if (reduction == "mean") g /= total_weight;
      dx[(n * C + t) * inner + i] = -(c.w.empty() ? 1 : c.w[t]) * g;
    }
  OpTester op("NegativeLogLikelihoodLossGrad", 1, kMicrosoftDomain);
  op.Attr("reduction", Attribute::String(reduction));
  if (ignore) op.Attr("ignore_index", Int(*ignore));
  op.Input("dY", dy).Input("X", x).Input("target", Tensor::FromVector<int64_t>(c.target, t_shape));
  if (weighted) op.Input("weight", w);
  op.Output("dX", x_shape, dx, tol, tol).Threads(3).Run();
}

TEST(TrainingNllLossGrad, MatchesTorchSemantics) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunNllGrad<float>({6, 5}, reduction, false, std::nullopt, 1e-6);
    RunNllGrad<float>({6, 5}, reduction, true, int64_t{-100}, 1e-6);
    RunNllGrad<double>({3, 4, 5, 2}, reduction, true, int64_t{3}, 1e-12);
    RunNllGrad<float>({3, 4, 7}, reduction, false, int64_t{0}, 1e-6);
  }
  RunNllGrad<Float16>({4, 6, 3}, "mean", true, int64_t{-100}, 2e-3);
}

TEST(TrainingNllLossGrad, BadDyShapeIsAnError) {
  OpTester t("NegativeLogLikelihoodLossGrad", 1, kMicrosoftDomain);
  t.Attr("reduction", Attribute::String("none"))
      .Input("dY", RandomTensor<float>({}))
      .Input("X", RandomTensor<float>({3, 4}))
      .Input("target", Tensor::FromVector<int64_t>({0, 1, 2}, {3}))
      .Output("dX", {3, 4}, {});
  ExpectFailure(t, "must have the target's shape");
}

// ---------------------------------------------------------------- GatherGrad

std::vector<double> GatherGradRef(const Shape& shape, int64_t axis, const std::vector<int64_t>& idx,
                                  const std::vector<double>& dy) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[i];
  for (size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t A = shape[axis], Q = static_cast<int64_t>(idx.size());
  std::vector<double> dx(NumElements(shape), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < Q; ++j) {
      const int64_t a = idx[j] < 0 ? idx[j] + A : idx[j];
      for (int64_t k = 0; k < inner; ++k) dx[(o * A + a) * inner + k] += dy[(o * Q + j) * inner + k];
    }
  return dx;
}

template <typename T, typename I = int64_t>
std::vector<Tensor> RunGatherGrad(const Shape& shape, int64_t axis, const Shape& idx_shape, double tol, int threads,
                                  uint32_t seed = 61) {
  const int64_t r = static_cast<int64_t>(shape.size());
  const int64_t a = axis < 0 ? axis + r : axis;
  const int64_t A = shape[a];
  // Repeated and negative indices.
  std::vector<double> raw = ToDoubles(RandomTensor<double>({NumElements(idx_shape)}, -A, A, seed, 0));
  std::vector<int64_t> idx;
  for (double v : raw) idx.push_back(std::clamp<int64_t>(static_cast<int64_t>(std::floor(v)), -A, A - 1));
  Shape dy_shape(shape.begin(), shape.begin() + a);
  dy_shape.insert(dy_shape.end(), idx_shape.begin(), idx_shape.end());
  dy_shape.insert(dy_shape.end(), shape.begin() + a + 1, shape.end());
  Tensor dy = RandomTensor<T>(dy_shape, -1, 1, seed + 1);
  std::vector<I> idx_typed(idx.begin(), idx.end());
  OpTester t("GatherGrad", 1, kMicrosoftDomain);
  if (axis != 0) t.Attr("axis", Int(axis));
  t.Input("shape", Tensor::FromVector<int64_t>(shape, {r}))
      .Input("indices", Tensor::FromVector<I>(idx_typed, idx_shape))
      .Input("dY", dy)
      .Output("dX", shape, GatherGradRef(shape, a, idx, ToDoubles(dy)), tol, tol)
      .Threads(threads);
  t.Run();
  auto out = t.Compute();
  EXPECT_TRUE(out.ok());
  return out.ok() ? out.value() : std::vector<Tensor>{};
}

TEST(TrainingGatherGrad, EmbeddingRows) {
  RunGatherGrad<float>({50, 16}, 0, {4, 30}, 1e-5, 4);  // row tasks (one table, narrow rows)
  RunGatherGrad<float>({9, 700}, 0, {3, 11}, 1e-5, 4);  // wide rows: column strips
  RunGatherGrad<double, int32_t>({20, 3}, 0, {64}, 1e-12, 1);
}

TEST(TrainingGatherGrad, InnerAxes) {
  RunGatherGrad<float>({3, 10, 4}, 1, {2, 5}, 1e-5, 4);
  RunGatherGrad<float>({6, 5, 7}, -1, {9}, 1e-5, 2);  // inner == 1
  RunGatherGrad<float>({2, 40}, -1, {3, 3}, 1e-5, 8);
  RunGatherGrad<Float16>({12, 8}, 0, {30}, 2e-3, 3);
  RunGatherGrad<BFloat16>({3, 12, 8}, 1, {30}, 2e-2, 3);
}

TEST(TrainingGatherGrad, DeterministicAcrossThreadCounts) {
  std::vector<Tensor> one = RunGatherGrad<float>({64, 24}, 0, {500}, 1e-5, 1, 71);
  std::vector<Tensor> many = RunGatherGrad<float>({64, 24}, 0, {500}, 1e-5, 7, 71);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(many.size(), 1u);
  EXPECT_EQ(0, std::memcmp(one[0].raw_data(), many[0].raw_data(), one[0].nbytes()));
}

TEST(TrainingGatherGrad, IndexOutOfRangeIsAnError) {
  OpTester t("GatherGrad", 1, kMicrosoftDomain);
  t.Input("shape", Tensor::FromVector<int64_t>({4, 3}, {2}))
      .Input("indices", Tensor::FromVector<int64_t>({1, -5, 2}, {3}))
      .Input("dY", RandomTensor<float>({3, 3}))
      .Output("dX", {4, 3}, {});
  ExpectFailure(t, "indices[1] = -5 is out of range [-4, 4)");
  OpTester bad_dy("GatherGrad", 1, kMicrosoftDomain);
  bad_dy.Input("shape", Tensor::FromVector<int64_t>({4, 3}, {2}))
      .Input("indices", Tensor::FromVector<int64_t>({1, 2}, {2}))
      .Input("dY", RandomTensor<float>({3, 3}))
      .Output("dX", {4, 3}, {});
  ExpectFailure(bad_dy, "is not the Gather output shape");
}

}  // namespace
}  // namespace tob
