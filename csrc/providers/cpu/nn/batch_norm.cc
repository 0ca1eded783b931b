// BatchNormalization (inference; training_mode statistics from opset 14) and
// InstanceNormalization. Both reduce to y = x * a[c] + b[c] per channel plane once the
// per-channel (or per-plane) statistics are known.
#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"

namespace tob {

namespace {

// y[i] = x[i] * a + b over one contiguous plane; 16-bit types go through a float block.
template <typename T>
void AffinePlane(const T* x, int64_t n, float a, float b, T* y) {
  if constexpr (kIs16BitFloat<T>) {
    constexpr int64_t kBlock = 512;
    float buf[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t len = std::min(kBlock, n - i);
      ToFloat(x + i, buf, len);
      for (int64_t j = 0; j < len; ++j) buf[j] = buf[j] * a + b;
      FromFloat(buf, y + i, len);
    }
  } else {
    const T ta = static_cast<T>(a), tb = static_cast<T>(b);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * ta + tb;
  }
}

template <typename T>
void AffinePlane(const T* x, int64_t n, double a, double b, T* y) {
  if constexpr (std::is_same_v<T, double>) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
  } else {
    AffinePlane(x, n, static_cast<float>(a), static_cast<float>(b), y);
  }
}

// Sum and sum of squared deviations (two-pass) of a contiguous plane, in double.
template <typename T>
void PlaneMoments(const T* x, int64_t n, double* sum, double* mean_for_dev, double* sq_dev, bool second_pass) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (!second_pass) *sum += static_cast<double>(vec::Sum(x, n));
    else *sq_dev += static_cast<double>(vec::SquaredDeviationSum(x, n, static_cast<T>(*mean_for_dev)));
  } else {
    double acc = 0;
    for (int64_t i = 0; i < n; ++i) {
      double v = static_cast<float>(x[i]);
      acc += second_pass ? (v - *mean_for_dev) * (v - *mean_for_dev) : v;
    }
    (second_pass ? *sq_dev : *sum) += acc;
  }
}

// Writes `values` into a float tensor of any float dtype.
Status StoreVector(const KernelContext& ctx, const std::vector<double>& values, Tensor* out) {
  if (out == nullptr) return Status::OK();
  if (out->numel() != static_cast<int64_t>(values.size()))
    return ctx.Fail("statistics output must have ", values.size(), " elements");
  return DispatchFloat(ctx, out->dtype(), [&]<typename T>() -> Status {
    for (size_t i = 0; i < values.size(); ++i) out->data<T>()[i] = static_cast<T>(values[i]);
    return Status::OK();
  });
}

std::vector<double> ReadVector(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.ElementAsDouble(i);
  return v;
}

class BatchNormKernel final : public OpKernel {
 public:
  BatchNormKernel(const Node& node, float epsilon, float momentum, bool training)
      : OpKernel(node), epsilon_(epsilon), momentum_(momentum), training_(training) {}

  // since_version: 6, 7 or 14, the first opset of the signature the node is read with.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, int since_version) {
    float epsilon = 1e-5f, momentum = 0.9f;
    int64_t training_mode = 0, is_test = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-5f));
    TOB_RETURN_IF_ERROR(node.GetAttr("momentum", &momentum, 0.9f));
    if (since_version >= 14) {
      TOB_RETURN_IF_ERROR(node.GetAttr("training_mode", &training_mode, int64_t{0}));
    } else {
      // Before 14, training mode is spelled by extra outputs (and, in opset 6, is_test = 0).
      if (since_version == 6) TOB_RETURN_IF_ERROR(node.GetAttr("is_test", &is_test, int64_t{0}));
      if (node.outputs().size() > 1 || (since_version == 6 && is_test == 0))
        return NotImplemented(node.Describe(),
                              ": training mode of BatchNormalization before opset 14 "
                              "(mean, var, saved_mean, saved_var outputs) is not supported");
    }
    int64_t spatial = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("spatial", &spatial, int64_t{1}));
    if (spatial != 1) return NotImplemented(node.Describe(), ": spatial=0 is not supported");
    return MakeKernel<BatchNormKernel>(node, epsilon, momentum, training_mode != 0);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() < 2) return ctx.Fail("input X must have rank >= 2");
    const int64_t N = x.dim(0), C = x.dim(1);
    const int64_t plane = C == 0 ? 0 : x.numel() / std::max<int64_t>(1, N * C);
    for (int i = 1; i < 5; ++i)
      if (ctx.input(i)->numel() != C)
        return ctx.Fail("input ", i, " has ", ctx.input(i)->numel(), " values, expected ", C, " (channels)");
    const std::vector<double> scale = ReadVector(*ctx.input(1)), bias = ReadVector(*ctx.input(2));
    std::vector<double> mean = ReadVector(*ctx.input(3)), var = ReadVector(*ctx.input(4));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      std::vector<double> batch_mean(C), batch_var(C);
      if (training_) {
        ParallelFor(ctx.thread_pool(), C, 1, [&](int64_t b, int64_t e) {
          for (int64_t c = b; c < e; ++c) {
            double sum = 0, sq = 0, m = 0;
            for (int64_t n = 0; n < N; ++n) PlaneMoments(xp + (n * C + c) * plane, plane, &sum, &m, &sq, false);
            m = N * plane > 0 ? sum / static_cast<double>(N * plane) : 0.0;
            for (int64_t n = 0; n < N; ++n) PlaneMoments(xp + (n * C + c) * plane, plane, &sum, &m, &sq, true);
            batch_mean[c] = m;
            batch_var[c] = N * plane > 0 ? sq / static_cast<double>(N * plane) : 0.0;
          }
        });
      }
      const std::vector<double>& use_mean = training_ ? batch_mean : mean;
      const std::vector<double>& use_var = training_ ? batch_var : var;
      std::vector<double> a(C), b(C);
      for (int64_t c = 0; c < C; ++c) {
        a[c] = scale[c] / std::sqrt(use_var[c] + static_cast<double>(epsilon_));
        b[c] = bias[c] - use_mean[c] * a[c];
      }
      ParallelFor(ctx.thread_pool(), N * C, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, plane)),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t p = begin; p < end; ++p)
                      AffinePlane(xp + p * plane, plane, a[p % C], b[p % C], yp + p * plane);
                  });
      if (training_) {
        for (int64_t c = 0; c < C; ++c) {
          mean[c] = mean[c] * momentum_ + batch_mean[c] * (1.0 - momentum_);
          var[c] = var[c] * momentum_ + batch_var[c] * (1.0 - momentum_);
        }
      }
      // Outside training mode the running statistics pass through unchanged.
      TOB_RETURN_IF_ERROR(StoreVector(ctx, mean, ctx.output(1)));
      return StoreVector(ctx, var, ctx.output(2));
    });
  }

 private:
  float epsilon_, momentum_;
  bool training_;
};

template <typename T>
void InstanceNormPlanes(const T* x, T* y, const std::vector<double>& scale, const std::vector<double>& bias, int64_t C,
                        int64_t plane, double epsilon, int64_t begin, int64_t end) {
  for (int64_t p = begin; p < end; ++p) {
    const T* xp = x + p * plane;
    double sum = 0, sq = 0, mean = 0;
    PlaneMoments(xp, plane, &sum, &mean, &sq, false);
    mean = sum / static_cast<double>(plane);
    PlaneMoments(xp, plane, &sum, &mean, &sq, true);
    const double inv_std = 1.0 / std::sqrt(sq / static_cast<double>(plane) + epsilon);
    const double a = scale[p % C] * inv_std;
    AffinePlane(xp, plane, a, bias[p % C] - mean * a, y + p * plane);
  }
}

class InstanceNormKernel final : public OpKernel {
 public:
  InstanceNormKernel(const Node& node, float epsilon) : OpKernel(node), epsilon_(epsilon) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float epsilon = 1e-5f;
    TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-5f));
    return MakeKernel<InstanceNormKernel>(node, epsilon);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() < 3) return ctx.Fail("input must have rank >= 3");
    const int64_t N = x.dim(0), C = x.dim(1);
    if (ctx.input(1)->numel() != C || ctx.input(2)->numel() != C)
      return ctx.Fail("scale and B must have ", C, " values (channels)");
    if (x.numel() == 0) return Status::OK();
    const int64_t plane = x.numel() / (N * C);
    const std::vector<double> scale = ReadVector(*ctx.input(1)), bias = ReadVector(*ctx.input(2));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      ParallelFor(ctx.thread_pool(), N * C, std::max<int64_t>(1, 16384 / plane), [&](int64_t b, int64_t e) {
        InstanceNormPlanes(x.data<T>(), y.data<T>(), scale, bias, C, plane, epsilon_, b, e);
      });
      return Status::OK();
    });
  }

 private:
  float epsilon_;
};

}  // namespace

void RegisterCpuBatchNormKernels(KernelRegistry& registry) {
  const auto& f = FloatTypes();
  registry.Register(
      Def("BatchNormalization").Versions(6, 6).Constraint("T", {0, 1, 2, 3, 4}, f).Factory([](const Node& n) {
        return BatchNormKernel::Create(n, 6);
      }));
  registry.Register(
      Def("BatchNormalization").Versions(7, 13).Constraint("T", {0, 1, 2, 3, 4}, f).Factory([](const Node& n) {
        return BatchNormKernel::Create(n, 7);
      }));
  // Opset 14 added training_mode; 15 let scale/B (T1) and mean/var (T2) differ from X.
  registry.Register(Def("BatchNormalization")
                        .Versions(14)
                        .Constraint("T", {0}, f)
                        .Constraint("T1", {1, 2}, f)
                        .Constraint("T2", {3, 4}, f)
                        .Factory([](const Node& n) { return BatchNormKernel::Create(n, 14); }));
  registry.Register(
      Def("InstanceNormalization").Versions(6).Constraint("T", {0, 1, 2}, f).Kernel<InstanceNormKernel>());
}

}  // namespace tob
