// BatchNormInternal (training-mode forward with saved statistics) and BatchNormalizationGrad
// against float64 references; the input gradient by finite differences of the training forward.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "training_test_util.h"

namespace tob {
namespace {

using namespace training_test;

struct BatchNormRef {
  std::vector<double> y, mean, var, inv_std, running_mean, running_var;
};

// Training-mode batch norm over [N, C, plane] in float64.
BatchNormRef RefBatchNorm(const std::vector<double>& x, const Shape& shape, const std::vector<double>& scale,
                          const std::vector<double>& bias, const std::vector<double>& in_mean,
                          const std::vector<double>& in_var, double eps, double momentum) {
  const int64_t N = shape[0], C = shape[1], plane = NumElements(shape) / (N * C), M = N * plane;
  BatchNormRef r;
  r.y.resize(x.size());
  for (int64_t c = 0; c < C; ++c) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < plane; ++i) mean += x[(n * C + c) * plane + i] / M;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < plane; ++i) {
        const double d = x[(n * C + c) * plane + i] - mean;
        var += d * d / M;
      }
    const double inv = 1 / std::sqrt(var + eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < plane; ++i) {
        const int64_t k = (n * C + c) * plane + i;
        r.y[k] = (x[k] - mean) * inv * scale[c] + bias[c];
      }
    r.mean.push_back(mean);
    r.var.push_back(var);
    r.inv_std.push_back(inv);
    r.running_mean.push_back(momentum * in_mean[c] + (1 - momentum) * mean);
    r.running_var.push_back(momentum * in_var[c] + (1 - momentum) * var * M / (M - 1));
  }
  return r;
}

template <typename T>
void RunBatchNormInternal(const Shape& shape, double tol) {
  const int64_t C = shape[1];
  Tensor x = RandomTensor<T>(shape, -2, 3, 201);
  Tensor scale = RandomTensor<float>({C}, 0.5, 1.5, 202), bias = RandomTensor<float>({C}, -1, 1, 203);
  Tensor in_mean = RandomTensor<float>({C}, -1, 1, 204), in_var = RandomTensor<float>({C}, 0.5, 2, 205);
  BatchNormRef ref = RefBatchNorm(ToDoubles(x), shape, ToDoubles(scale), ToDoubles(bias), ToDoubles(in_mean),
                                  ToDoubles(in_var), 1e-3, 0.8);
  OpTester("BatchNormInternal", 1, kMicrosoftDomain)
      .Attr("epsilon", Attribute::Float(1e-3f))
      .Attr("momentum", Attribute::Float(0.8f))
      .Attr("training_mode", Int(1))
      .Input("X", x)
      .Input("scale", scale)
      .Input("B", bias)
      .Input("input_mean", in_mean)
      .Input("input_var", in_var)
      .Output("Y", shape, ref.y, tol, tol)
      .Output("running_mean", {C}, ref.running_mean, 1e-5, 1e-6)
      .Output("running_var", {C}, ref.running_var, 1e-5, 1e-6)
      .Output("saved_mean", {C}, ref.mean, 1e-5, 1e-6)
      .Output("saved_inv_std", {C}, ref.inv_std, 1e-5, 1e-6)
      .Threads(3)
      .Run();
}

TEST(TrainingBatchNormInternal, TrainingModeStatistics) {
  RunBatchNormInternal<float>({4, 3, 5, 7}, 1e-5);
  RunBatchNormInternal<float>({6, 5}, 1e-5);  // [N, C]: a plane of one value
  RunBatchNormInternal<double>({2, 4, 33}, 1e-10);
  RunBatchNormInternal<Float16>({3, 2, 40}, 3e-3);
}

TEST(TrainingBatchNormInternal, InferenceModeUsesInputStatistics) {
  const Shape shape{2, 3, 4};
  Tensor x = RandomTensor<float>(shape, -2, 2, 211), scale = RandomTensor<float>({3}, 0.5, 1.5, 212);
  Tensor bias = RandomTensor<float>({3}, -1, 1, 213), mean = RandomTensor<float>({3}, -1, 1, 214);
  Tensor var = RandomTensor<float>({3}, 0.5, 2, 215);
  std::vector<double> xv = ToDoubles(x), s = ToDoubles(scale), b = ToDoubles(bias), m = ToDoubles(mean),
                      v = ToDoubles(var), y, inv;
  for (int64_t i = 0; i < 24; ++i) {
    const int64_t c = (i / 4) % 3;
    y.push_back((xv[i] - m[c]) / std::sqrt(v[c] + 1e-5) * s[c] + b[c]);
  }
  for (int64_t c = 0; c < 3; ++c) inv.push_back(1 / std::sqrt(v[c] + 1e-5));
  OpTester("BatchNormInternal", 1, kMicrosoftDomain)
      .Input("X", x)
      .Input("scale", scale)
      .Input("B", bias)
      .Input("input_mean", mean)
      .Input("input_var", var)
      .Output("Y", shape, y, 1e-5, 1e-5)
      .Output("running_mean", {3}, m, 0, 0)
      .Output("running_var", {3}, v, 0, 0)
      .Output("saved_mean", {3}, m, 0, 0)
      .Output("saved_inv_std", {3}, inv, 1e-6, 1e-6)
      .Run();
}

template <typename T>
void RunBatchNormGrad(const Shape& shape, double tol) {
  const int64_t N = shape[0], C = shape[1], plane = NumElements(shape) / (N * C);
  Tensor x = RandomTensor<T>(shape, -2, 3, 221), dy = RandomTensor<T>(shape, -1, 1, 222);
  Tensor scale = RandomTensor<T>({C}, 0.5, 1.5, 223);
  const std::vector<double> xv = ToDoubles(x), dyv = ToDoubles(dy), sv = ToDoubles(scale), zeros(C, 0.0), ones(C, 1.0);
  const double eps = 1e-5;
  BatchNormRef fwd = RefBatchNorm(xv, shape, sv, zeros, zeros, ones, eps, 0.9);
  std::vector<double> dscale(C, 0.0), dbias(C, 0.0);
  for (int64_t k = 0; k < static_cast<int64_t>(xv.size()); ++k) {
    const int64_t c = (k / plane) % C;
    dbias[c] += dyv[k];
    dscale[c] += dyv[k] * (xv[k] - fwd.mean[c]) * fwd.inv_std[c];
  }
  std::vector<double> dx = NumericGradient(
      [&](const std::vector<double>& xs) {
        BatchNormRef r = RefBatchNorm(xs, shape, sv, zeros, zeros, ones, eps, 0.9);
        double s = 0;
        for (size_t k = 0; k < xs.size(); ++k) s += dyv[k] * r.y[k];
        return s;
      },
      xv, 1e-5);
  OpTester("BatchNormalizationGrad", 1, kMicrosoftDomain)
      .Attr("epsilon", Attribute::Float(1e-5f))
      .Input("dY", dy)
      .Input("X", x)
      .Input("scale", scale)
      .Input("saved_mean", FromDoubles<float>(fwd.mean, {C}))
      .Input("saved_inv_std", FromDoubles<float>(fwd.inv_std, {C}))
      .Output("dX", shape, dx, tol, tol)
      .Output("dScale", {C}, dscale, tol, tol)
      .Output("dBias", {C}, dbias, tol, tol)
      .Threads(3)
      .Run();
}

TEST(TrainingBatchNormGrad, MatchesNumericGradient) {
  RunBatchNormGrad<float>({4, 3, 5, 6}, 1e-4);
  RunBatchNormGrad<float>({8, 5}, 1e-4);
  RunBatchNormGrad<double>({3, 2, 17}, 1e-6);
  RunBatchNormGrad<Float16>({3, 2, 20}, 3e-2);
}

TEST(TrainingBatchNormGrad, ChannelMismatchIsAnError) {
  OpTester t("BatchNormalizationGrad", 1, kMicrosoftDomain);
  t.Input("dY", RandomTensor<float>({2, 3, 4}))
      .Input("X", RandomTensor<float>({2, 3, 4}))
      .Input("scale", RandomTensor<float>({4}))
      .Input("saved_mean", RandomTensor<float>({3}))
      .Input("saved_inv_std", RandomTensor<float>({3}))
      .Output("dX", {2, 3, 4}, {});
  ExpectFailure(t, "scale has 4 values, X has 3 channels");
}

}  // namespace
}  // namespace tob
