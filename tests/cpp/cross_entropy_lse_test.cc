// ai.tob::SoftmaxCrossEntropyLse (every reduction, ignore_index in and outside the class range,
// all rows ignored, float32 rows long enough for the vectorised paths, float64) and its gradient
// SoftmaxCrossEntropyLseGrad against float64 references: the loss and lse from a float64
// log-softmax, the gradient by central differences of that float64 loss; bad operands named.
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

constexpr const char* kTob = "ai.tob";

struct LseCase {
  int64_t N = 0, C = 0;
  std::vector<double> x;
  std::vector<int64_t> target;
  std::optional<int64_t> ignore;
  std::string reduction = "mean";
};

std::vector<double> LseRef(const LseCase& c, const std::vector<double>& x) {
  std::vector<double> lse(c.N, 0.0);
  for (int64_t n = 0; n < c.N; ++n) {
    if (c.ignore && c.target[n] == *c.ignore) continue;
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t k = 0; k < c.C; ++k) max = std::max(max, x[n * c.C + k]);
    for (int64_t k = 0; k < c.C; ++k) sum += std::exp(x[n * c.C + k] - max);
    lse[n] = max + std::log(sum);
  }
  return lse;
}

// The loss: per row for 'none', else the reduced scalar ('mean' over the non-ignored rows: NaN
// when every row is ignored, as torch's cross_entropy gives).
std::vector<double> LossRef(const LseCase& c, const std::vector<double>& x) {
  const std::vector<double> lse = LseRef(c, x);
  std::vector<double> loss;
  double count = 0, sum = 0;
  for (int64_t n = 0; n < c.N; ++n) {
    const int64_t t = c.target[n];
    if (c.ignore && t == *c.ignore) {
      loss.push_back(0);
      continue;
    }
    loss.push_back(lse[n] - x[n * c.C + t]);
    count += 1;
    sum += loss.back();
  }
  if (c.reduction == "none") return loss;
  return {c.reduction == "mean" ? sum / count : sum};
}

template <typename T>
LseCase MakeCase(int64_t N, int64_t C, const std::string& reduction, std::optional<int64_t> ignore, bool all_ignored,
                 const Tensor& x) {
  LseCase c;
  c.N = N;
  c.C = C;
  c.reduction = reduction;
  c.ignore = ignore;
  c.x = ToDoubles(x);
  std::vector<double> r = ToDoubles(RandomTensor<double>({N}, 0, static_cast<double>(C), 72, 0));
  for (int64_t i = 0; i < N; ++i) {
    c.target.push_back(std::min<int64_t>(C - 1, static_cast<int64_t>(r[i])));
    if (ignore && (all_ignored || i % 3 == 1)) c.target.back() = *ignore;
  }
  return c;
}

template <typename T>
void RunLse(int64_t N, int64_t C, const std::string& reduction, std::optional<int64_t> ignore, double tol,
            bool all_ignored = false) {
  Tensor x = RandomTensor<T>({N, C}, -4, 4, 71);
  const LseCase c = MakeCase<T>(N, C, reduction, ignore, all_ignored, x);
  OpTester t("SoftmaxCrossEntropyLse", 1, kTob);
  t.Attr("reduction", Attribute::String(reduction));
  if (ignore) t.Attr("ignore_index", Int(*ignore));
  t.Input("scores", x).Input("target", Tensor::FromVector<int64_t>(c.target, {N}));
  t.Output("loss", reduction == "none" ? Shape{N} : Shape{}, LossRef(c, c.x), tol, tol)
      .Output("lse", {N}, LseRef(c, c.x), tol, tol)
      .Threads(3)
      .Run();
}

TEST(CrossEntropyLse, MatchesAFloat64LogSoftmax) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunLse<float>(6, 5, reduction, std::nullopt, 1e-5);
    RunLse<float>(7, 53, reduction, int64_t{2}, 1e-5);       // an in-range class ignored; AVX2 blocks and a tail
    RunLse<float>(9, 133, reduction, int64_t{-100}, 2e-5);   // 64 classes or more: the AVX-512 rows
    RunLse<float>(5, 1024, reduction, int64_t{2000}, 2e-5);  // a vocabulary's row; ignore_index past the classes
    RunLse<double>(4, 9, reduction, int64_t{-1}, 1e-12);
  }
  RunLse<float>(4, 70, "sum", int64_t{-100}, 1e-6, /*all_ignored=*/true);  // 0, every lse 0
  RunLse<float>(4, 70, "none", int64_t{-100}, 1e-6, /*all_ignored=*/true);
}

TEST(CrossEntropyLse, AllRowsIgnoredMeanIsNan) {
  Tensor x = RandomTensor<float>({3, 8}, -1, 1, 5);
  auto outs =
      RunWithOutputs("SoftmaxCrossEntropyLse", kTob, 1, {x, Tensor::FromVector<int64_t>({-100, -100, -100}, {3})},
                     {{"ignore_index", Int(-100)}}, {true, true});
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  EXPECT_TRUE(std::isnan(outs.value()[0].data<float>()[0]));
}

TEST(CrossEntropyLse, BadOperandsAreNamed) {
  {
    OpTester t("SoftmaxCrossEntropyLse", 1, kTob);
    t.Input("scores", RandomTensor<float>({3, 4}))
        .Input("target", Tensor::FromVector<int64_t>({0, 4, 1}, {3}))
        .Output("loss", {}, {})
        .Output("lse", {3}, {0, 0, 0});
    ExpectFailure(t, "target[1] = 4 is outside the class range [0, 4)");
  }
  {
    OpTester t("SoftmaxCrossEntropyLse", 1, kTob);
    t.Input("scores", RandomTensor<float>({3, 4}))
        .Input("target", Tensor::FromVector<float>({0, 1, 1}, {3}))
        .Output("loss", {}, {})
        .Output("lse", {3}, {0, 0, 0});
    ExpectFailure(t, "target must be int32 or int64");
  }
  {
    OpTester t("SoftmaxCrossEntropyLse", 1, kTob);
    t.Input("scores", RandomTensor<float>({3, 4, 2}))
        .Input("target", Tensor::FromVector<int64_t>({0, 1, 1, 0, 1, 1}, {3, 2}))
        .Output("loss", {}, {})
        .Output("lse", {3}, {0, 0, 0});
    ExpectFailure(t, "scores must be [N, C]");
  }
  {
    OpTester t("SoftmaxCrossEntropyLse", 1, kTob);
    t.Attr("reduction", Attribute::String("avg"));
    t.Input("scores", RandomTensor<float>({3, 4}))
        .Input("target", Tensor::FromVector<int64_t>({0, 1, 1}, {3}))
        .Output("loss", {}, {})
        .Output("lse", {3}, {0, 0, 0});
    ExpectFailure(t, "reduction must be 'none', 'sum' or 'mean', got 'avg'");
  }
  {
    OpTester t("SoftmaxCrossEntropyLseGrad", 1, kTob);
    t.Input("dY", RandomTensor<float>({}))
        .Input("scores", RandomTensor<float>({3, 4}))
        .Input("target", Tensor::FromVector<int64_t>({0, 1, 1}, {3}))
        .Input("lse", RandomTensor<double>({3}))
        .Output("dX", {3, 4}, std::vector<double>(12, 0.0));
    ExpectFailure(t, "lse has dtype float64");
  }
}

template <typename T>
void RunLseGrad(int64_t N, int64_t C, const std::string& reduction, std::optional<int64_t> ignore, double tol) {
  Tensor x = RandomTensor<T>({N, C}, -3, 3, 81);
  LseCase c = MakeCase<T>(N, C, reduction, ignore, false, x);
  Tensor dy = RandomTensor<T>(reduction == "none" ? Shape{N} : Shape{}, -2, 2, 84);
  const std::vector<double> dyv = ToDoubles(dy);
  const std::vector<double> expected = NumericGradient(
      [&](const std::vector<double>& xs) {
        const std::vector<double> loss = LossRef(c, xs);
        double s = 0;
        for (size_t k = 0; k < loss.size(); ++k) s += dyv[reduction == "none" ? k : 0] * loss[k];
        return s;
      },
      c.x, 1e-5);
  OpTester t("SoftmaxCrossEntropyLseGrad", 1, kTob);
  t.Attr("reduction", Attribute::String(reduction));
  if (ignore) t.Attr("ignore_index", Int(*ignore));
  t.Input("dY", dy)
      .Input("scores", x)
      .Input("target", Tensor::FromVector<int64_t>(c.target, {N}))
      .Input("lse", FromDoubles<T>(LseRef(c, c.x), {N}));
  t.Output("dX", {N, C}, expected, tol, tol).Threads(3).Run();
}

TEST(CrossEntropyLseGrad, MatchesFiniteDifferencesOfTheLoss) {
  for (const char* reduction : {"none", "sum", "mean"}) {
    RunLseGrad<double>(5, 4, reduction, std::nullopt, 1e-7);
    RunLseGrad<double>(6, 9, reduction, int64_t{1}, 1e-7);
    RunLseGrad<float>(7, 53, reduction, int64_t{2}, 2e-5);
    RunLseGrad<float>(6, 133, reduction, int64_t{-100}, 2e-5);
  }
}

}  // namespace
}  // namespace tob
