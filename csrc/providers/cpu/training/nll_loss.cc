// NegativeLogLikelihoodLoss (ai.onnx 12-21 and 22+) and com.microsoft::NegativeLogLikelihoodLossGrad.
// The input is viewed as [N, C, inner] (inner = d1 * ... * dk) and the target as [N, inner];
// target t at (n, i) picks x[n, t, i]:
//   loss[n, i] = -x[n, t, i] * w[t]     (0 where t == ignore_index; w = 1 without a weight)
//   'sum' adds the losses, 'mean' divides the sum by the total weight sum(w[t]) of the
//   non-ignored targets (their count without a weight).
// The gradient writes -w[t] * dY[n, i] (or the scalar dY, divided by the total weight for
// 'mean') at (n, t, i) and zero elsewhere. A target outside [0, C) that is not ignore_index is a
// runtime error naming the node. Sums run in float64 over chunks fixed by the element count, so
// results do not depend on the thread count.
#include <cstring>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/training/loss_targets.h"

namespace tob {

namespace {

using namespace loss;

template <typename T>
Status NllLossTyped(const KernelContext& ctx, const Tensor& x_t, const TargetScan& scan, const LossLayout& l,
                    Reduction reduction, Tensor& out) {
  return WriteNllLoss<T>(ctx, x_t.data<T>(), scan, l, reduction, out);
}

class NllLossKernel final : public OpKernel {
 public:
  NllLossKernel(const Node& node, LossAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LossAttributes attrs, LossAttributes::Read(node));
    return MakeKernel<NllLossKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& target = *ctx.input(1);
    const Tensor* weight = ctx.input(2);
    Tensor& out = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(LossLayout l, CheckLossOperands(ctx, x, target, weight));
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, weight, l, attrs_.ignore_index));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      return NllLossTyped<T>(ctx, x, scan, l, attrs_.reduction, out);
    });
  }

 private:
  LossAttributes attrs_;
};

template <typename T>
Status NllLossGradTyped(const KernelContext& ctx, const Tensor& dy_t, const TargetScan& scan, const LossLayout& l,
                        Reduction reduction, Tensor& dx_t) {
  T* dx = dx_t.data<T>();
  const T* dy = dy_t.data<T>();
  ParallelFor(ctx.thread_pool(), dx_t.numel(), 1 << 16,
              [&](int64_t b, int64_t e) { std::memset(static_cast<void*>(dx + b), 0, sizeof(T) * (e - b)); });
  double scale = reduction == Reduction::kNone ? 1.0 : static_cast<double>(dy[0]);
  if (reduction == Reduction::kMean) scale /= scan.total_weight();
  // Each (n, i) writes only dx[n, target, i]: distinct positions, so chunks never collide.
  ParallelFor(ctx.thread_pool(), l.count(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = scan.TargetAt(i);
      if (scan.Ignored(t)) continue;
      const double g = reduction == Reduction::kNone ? static_cast<double>(dy[i]) : scale;
      const int64_t n = i / l.inner, d = i % l.inner;
      dx[(n * l.C + t) * l.inner + d] = static_cast<T>(-scan.weight(t) * g);
    }
  });
  return Status::OK();
}

class NllLossGradKernel final : public OpKernel {
 public:
  NllLossGradKernel(const Node& node, LossAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LossAttributes attrs, LossAttributes::Read(node));
    return MakeKernel<NllLossGradKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    const Tensor& target = *ctx.input(2);
    const Tensor* weight = ctx.input(3);
    Tensor& dx = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(LossLayout l, CheckLossOperands(ctx, x, target, weight));
    if (dy.dtype() != x.dtype()) return ctx.Fail("dY must have the input's dtype");
    if (attrs_.reduction == Reduction::kNone ? dy.shape() != target.shape() : dy.numel() != 1)
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " must be ",
                      attrs_.reduction == Reduction::kNone ? "of the target's shape" : "a scalar");
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, weight, l, attrs_.ignore_index));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      return NllLossGradTyped<T>(ctx, dy, scan, l, attrs_.reduction, dx);
    });
  }

 private:
  LossAttributes attrs_;
};

}  // namespace

void RegisterCpuNllLossKernels(KernelRegistry& registry) {
  const std::vector<DType> index_types{DType::kInt32, DType::kInt64};
  const std::vector<DType> float_types{DType::kFloat32, DType::kFloat64, DType::kFloat16};
  registry.Register(Def("NegativeLogLikelihoodLoss")
                        .Versions(12, 21)
                        .Constraint("T", {0, 2}, float_types)
                        .Constraint("Tind", {1}, index_types)
                        .Kernel<NllLossKernel>());
  registry.Register(Def("NegativeLogLikelihoodLoss")
                        .Versions(22)
                        .Constraint("T", {0, 2}, FloatTypes())
                        .Constraint("Tind", {1}, index_types)
                        .Kernel<NllLossKernel>());
  registry.Register(Def("NegativeLogLikelihoodLossGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 3}, FloatTypes())
                        .Constraint("Tind", {2}, index_types)
                        .Kernel<NllLossGradKernel>());
}

}  // namespace tob
