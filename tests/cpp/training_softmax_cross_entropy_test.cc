// SoftmaxCrossEntropyLoss (every reduction, class weights, ignore_index inside and outside the
// class range, the log_prob output, 2-D to 5-D scores, 16-bit and float64) and its gradient
// com.microsoft::SoftmaxCrossEntropyLossGrad against float64 references: the loss from a float64
// log-softmax, the gradient by central differences of that float64 loss.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "training_test_util.h"

namespace tob {
namespace {

using namespace training_test;

struct SceCase {
  Shape x_shape;
  std::vector<double> x, w;  // w empty: no weights
  std::vector<int64_t> target;
  std::optional<int64_t> ignore;
  std::string reduction = "mean";
  int64_t N() const { return x_shape[0]; }
  int64_t C() const { return x_shape[1]; }
  int64_t inner() const { return NumElements(x_shape) / (N() * C()); }
};

std::vector<double> LogSoftmaxRef(const SceCase& c, const std::vector<double>& x) {
  std::vector<double> lp(x.size());
  for (int64_t n = 0; n < c.N(); ++n)
    for (int64_t i = 0; i < c.inner(); ++i) {
      double max = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t k = 0; k < c.C(); ++k) max = std::max(max, x[(n * c.C() + k) * c.inner() + i]);
      for (int64_t k = 0; k < c.C(); ++k) sum += std::exp(x[(n * c.C() + k) * c.inner() + i] - max);
      for (int64_t k = 0; k < c.C(); ++k) {
        const int64_t at = (n * c.C() + k) * c.inner() + i;
        lp[at] = x[at] - max - std::log(sum);
      }
    }
  return lp;
}

// The loss of scores x: per element for 'none', else the reduced scalar.
std::vector<double> SceRef(const SceCase& c, const std::vector<double>& x) {
  const std::vector<double> lp = LogSoftmaxRef(c, x);
  std::vector<double> loss;
  double total_weight = 0, sum = 0;
  for (int64_t n = 0; n < c.N(); ++n)
    for (int64_t i = 0; i < c.inner(); ++i) {
      const int64_t t = c.target[n * c.inner() + i];
      if (c.ignore && t == *c.ignore) {
        loss.push_back(0);
        continue;
      }
      const double w = c.w.empty() ? 1 : c.w[t];
      loss.push_back(-lp[(n * c.C() + t) * c.inner() + i] * w);
      total_weight += w;
      sum += loss.back();
    }
  if (c.reduction == "none") return loss;
  return {c.reduction == "mean" ? sum / total_weight : sum};
}

SceCase MakeCase(const Shape& x_shape, const std::string& reduction, bool weighted, std::optional<int64_t> ignore,
                 const Tensor& x, const Tensor& w) {
  SceCase c;
  c.x_shape = x_shape;
  c.reduction = reduction;
  c.ignore = ignore;
  c.x = ToDoubles(x);
  if (weighted) c.w = ToDoubles(w);
  std::vector<double> r = ToDoubles(RandomTensor<double>({c.N() * c.inner()}, 0, static_cast<double>(c.C()), 52, 0));
  for (size_t i = 0; i < r.size(); ++i) {
    c.target.push_back(std::min<int64_t>(c.C() - 1, static_cast<int64_t>(r[i])));
    if (ignore && i % 3 == 1) c.target.back() = *ignore;
  }
  return c;
}

Shape TargetShape(const Shape& x_shape) {
  Shape t{x_shape[0]};
  t.insert(t.end(), x_shape.begin() + 2, x_shape.end());
  return t;
}

template <typename T>
void RunSce(const Shape& x_shape, const std::string& reduction, bool weighted, std::optional<int64_t> ignore,
            double tol) {
  Tensor x = RandomTensor<T>(x_shape, -3, 3, 51);
  Tensor w = RandomTensor<T>({x_shape[1]}, 0.2, 2, 53);
  const SceCase c = MakeCase(x_shape, reduction, weighted, ignore, x, w);
  const Shape t_shape = TargetShape(x_shape);
  OpTester t("SoftmaxCrossEntropyLoss", 13);
  t.Attr("reduction", Attribute::String(reduction));
  if (ignore) t.Attr("ignore_index", Int(*ignore));
  t.Input("scores", x).Input("labels", Tensor::FromVector<int64_t>(c.target, t_shape));
  if (weighted) t.Input("weights", w);
  t.Output("output", reduction == "none" ? t_shape : Shape{}, SceRef(c, c.x), tol, tol)
      .Output("log_prob", x_shape, LogSoftmaxRef(c, c.x), tol, tol)
      .Threads(3)
      .Run();
}

TEST(TrainingSoftmaxCrossEntropy, ReductionsWeightsIgnoreIndexAndLogProb) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunSce<float>({6, 5}, reduction, false, std::nullopt, 1e-5);
    RunSce<float>({6, 5}, reduction, true, std::nullopt, 1e-5);
    RunSce<float>({3, 5, 4, 3}, reduction, true, int64_t{2}, 1e-5);         // an in-range class ignored
    RunSce<float>({3, 5, 70}, reduction, false, int64_t{-100}, 1e-5);       // more positions than one lane block
    RunSce<float>({2, 4, 2, 1, 3, 2}, reduction, true, int64_t{10}, 1e-5);  // ignore_index past the classes
    RunSce<double>({4, 7, 9}, reduction, true, int64_t{-1}, 1e-12);
  }
  RunSce<Float16>({4, 6, 5}, "mean", true, int64_t{0}, 3e-3);
  RunSce<BFloat16>({4, 6, 5}, "sum", false, std::nullopt, 5e-2);
}

TEST(TrainingSoftmaxCrossEntropy, LabelOutsideTheClassesIsAnError) {
  OpTester t("SoftmaxCrossEntropyLoss", 13);
  t.Input("scores", RandomTensor<float>({3, 4}))
      .Input("labels", Tensor::FromVector<int64_t>({0, 4, 1}, {3}))
      .Output("output", {}, {});
  ExpectFailure(t, "target[1] = 4 is outside the class range [0, 4)");
}

template <typename T>
void RunSceGrad(const Shape& x_shape, const std::string& reduction, bool weighted, std::optional<int64_t> ignore,
                double tol) {
  Tensor x = RandomTensor<T>(x_shape, -3, 3, 61);
  Tensor w = RandomTensor<T>({x_shape[1]}, 0.2, 2, 63);
  SceCase c = MakeCase(x_shape, reduction, weighted, ignore, x, w);
  const Shape t_shape = TargetShape(x_shape);
  Tensor dy = RandomTensor<T>(reduction == "none" ? t_shape : Shape{}, -2, 2, 64);
  const std::vector<double> dyv = ToDoubles(dy);
  // d(sum_k dY_k loss_k)/dx by central differences of the float64 loss.
  const std::vector<double> expected = NumericGradient(
      [&](const std::vector<double>& xs) {
        const std::vector<double> loss = SceRef(c, xs);
        double s = 0;
        for (size_t k = 0; k < loss.size(); ++k) s += dyv[reduction == "none" ? k : 0] * loss[k];
        return s;
      },
      c.x, 1e-5);
  OpTester t("SoftmaxCrossEntropyLossGrad", 1, kMicrosoftDomain);
  t.Attr("reduction", Attribute::String(reduction));
  if (ignore) t.Attr("ignore_index", Int(*ignore));
  t.Input("dY", dy)
      .Input("log_prob", FromDoubles<T>(LogSoftmaxRef(c, c.x), x_shape))
      .Input("label", Tensor::FromVector<int64_t>(c.target, t_shape));
  if (weighted) t.Input("weight", w);
  t.Output("d_logits", x_shape, expected, tol, tol).Threads(3).Run();
}

TEST(TrainingSoftmaxCrossEntropyGrad, MatchesFiniteDifferencesOfTheLoss) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunSceGrad<double>({5, 4}, reduction, false, std::nullopt, 1e-7);
    RunSceGrad<double>({3, 5, 4}, reduction, true, int64_t{1}, 1e-7);
    RunSceGrad<float>({3, 4, 2, 3}, reduction, true, int64_t{-1}, 2e-5);
  }
  RunSceGrad<Float16>({4, 6}, "mean", true, std::nullopt, 3e-3);
  // float32 [N, C]: the row path (vectorised exp, a tail of classes after the vector blocks)
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunSceGrad<float>({7, 53}, reduction, true, int64_t{2}, 2e-5);
    RunSceGrad<float>({5, 40}, reduction, false, std::nullopt, 2e-5);
    // 64 classes or more: the AVX-512 rows where the CPU has them (8 vectors and a masked tail of 5)
    RunSceGrad<float>({6, 133}, reduction, true, int64_t{3}, 2e-5);
  }
}

}  // namespace
}  // namespace tob
