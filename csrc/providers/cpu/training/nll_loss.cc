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
#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"

namespace tob {

namespace {

enum class Reduction { kNone, kSum, kMean };

constexpr int64_t kMaxChunks = 64;
constexpr int64_t kGrain = 16384;

struct NllAttributes {
  Reduction reduction = Reduction::kMean;
  std::optional<int64_t> ignore_index;

  static StatusOr<NllAttributes> Read(const Node& node) {
    NllAttributes a;
    std::string reduction;
    TOB_RETURN_IF_ERROR(node.GetAttr("reduction", &reduction, std::string("mean")));
    if (reduction == "none") a.reduction = Reduction::kNone;
    else if (reduction == "sum") a.reduction = Reduction::kSum;
    else if (reduction == "mean") a.reduction = Reduction::kMean;
    else return InvalidModel(node.Describe(), ": reduction must be 'none', 'sum' or 'mean', got '", reduction, "'");
    if (node.FindAttribute("ignore_index") != nullptr) {
      int64_t v = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("ignore_index", &v));
      a.ignore_index = v;
    }
    return a;
  }
};

// Shapes of one call: input [N, C, inner], target [N, inner].
struct NllLayout {
  int64_t N = 0, C = 0, inner = 1;
  int64_t count() const { return N * inner; }
};

StatusOr<NllLayout> CheckOperands(const KernelContext& ctx, const Tensor& x, const Tensor& target,
                                  const Tensor* weight) {
  if (x.rank() < 2) return ctx.Fail("input must be [N, C, d1, ...], got ", ShapeToString(x.shape()));
  NllLayout l;
  l.N = x.dim(0);
  l.C = x.dim(1);
  Shape expected{l.N};
  for (int64_t i = 2; i < x.rank(); ++i) {
    expected.push_back(x.dim(i));
    l.inner *= x.dim(i);
  }
  if (target.shape() != expected)
    return ctx.Fail("target ", ShapeToString(target.shape()), " must be ", ShapeToString(expected), " for input ",
                    ShapeToString(x.shape()));
  if (weight != nullptr && (weight->shape() != Shape{l.C} || weight->dtype() != x.dtype()))
    return ctx.Fail("weight ", ShapeToString(weight->shape()), " must be [", l.C, "] of the input's dtype");
  return l;
}

// Fixed chunking of [0, n): chunk c is [n * c / chunks, n * (c + 1) / chunks).
int64_t ChunkCount(int64_t n) { return std::clamp<int64_t>((n + kGrain - 1) / kGrain, 1, kMaxChunks); }

// Validated view of targets and class weights shared by the forward and the gradient.
class TargetScan {
 public:
  // Checks every target and computes the total weight of the non-ignored ones.
  static StatusOr<TargetScan> Run(const KernelContext& ctx, const Tensor& target, const Tensor* weight,
                                  const NllLayout& l, const std::optional<int64_t>& ignore) {
    TargetScan s;
    s.ignore_ = ignore;
    TOB_ASSIGN_OR_RETURN(s.weights_, ctx.AllocateScratch(DType::kFloat64, {l.C}));
    double* w = s.weights_.data<double>();
    for (int64_t c = 0; c < l.C; ++c) w[c] = weight != nullptr ? weight->ElementAsDouble(c) : 1.0;
    s.target_ = &target;
    const int64_t n = l.count(), chunks = ChunkCount(n);
    TOB_ASSIGN_OR_RETURN(Tensor partial, ctx.AllocateScratch(DType::kFloat64, {chunks}));
    double* totals = partial.data<double>();
    std::atomic<int64_t> bad{-1};
    ParallelFor(ctx.thread_pool(), chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        double total = 0;
        for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
          const int64_t t = s.TargetAt(i);
          if (s.Ignored(t)) continue;
          if (t < 0 || t >= l.C) {
            int64_t expected = -1;
            bad.compare_exchange_strong(expected, i);
            break;
          }
          total += w[t];
        }
        totals[c] = total;
      }
    });
    if (bad.load() >= 0) {
      const int64_t i = bad.load();
      return ctx.Fail("target[", i, "] = ", s.TargetAt(i), " is outside the class range [0, ", l.C, ")",
                      ignore ? StrCat(" and is not ignore_index ", *ignore) : std::string());
    }
    s.total_weight_ = 0;
    for (int64_t c = 0; c < chunks; ++c) s.total_weight_ += totals[c];
    return s;
  }

  int64_t TargetAt(int64_t i) const {
    return target_->dtype() == DType::kInt32 ? target_->data<int32_t>()[i] : target_->data<int64_t>()[i];
  }
  bool Ignored(int64_t t) const { return ignore_ && t == *ignore_; }
  double weight(int64_t t) const { return weights_.data<double>()[t]; }
  double total_weight() const { return total_weight_; }

 private:
  const Tensor* target_ = nullptr;
  Tensor weights_;
  std::optional<int64_t> ignore_;
  double total_weight_ = 0;
};

template <typename T>
Status NllLossTyped(const KernelContext& ctx, const Tensor& x_t, const TargetScan& scan, const NllLayout& l,
                    Reduction reduction, Tensor& out) {
  const T* x = x_t.data<T>();
  const int64_t n = l.count();
  auto loss_at = [&](int64_t i) -> double {
    const int64_t t = scan.TargetAt(i);
    if (scan.Ignored(t)) return 0.0;
    const int64_t b = i / l.inner, d = i % l.inner;
    return -static_cast<double>(x[(b * l.C + t) * l.inner + d]) * scan.weight(t);
  };
  if (reduction == Reduction::kNone) {
    T* y = out.data<T>();
    ParallelFor(ctx.thread_pool(), n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = static_cast<T>(loss_at(i));
    });
    return Status::OK();
  }
  const int64_t chunks = ChunkCount(n);
  TOB_ASSIGN_OR_RETURN(Tensor partial, ctx.AllocateScratch(DType::kFloat64, {chunks}));
  double* sums = partial.data<double>();
  ParallelFor(ctx.thread_pool(), chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double s = 0;
      for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) s += loss_at(i);
      sums[c] = s;
    }
  });
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += sums[c];
  if (reduction == Reduction::kMean) total /= scan.total_weight();
  out.data<T>()[0] = static_cast<T>(total);
  return Status::OK();
}

class NllLossKernel final : public OpKernel {
 public:
  NllLossKernel(const Node& node, NllAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(NllAttributes attrs, NllAttributes::Read(node));
    return MakeKernel<NllLossKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& target = *ctx.input(1);
    const Tensor* weight = ctx.input(2);
    Tensor& out = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(NllLayout l, CheckOperands(ctx, x, target, weight));
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, weight, l, attrs_.ignore_index));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      return NllLossTyped<T>(ctx, x, scan, l, attrs_.reduction, out);
    });
  }

 private:
  NllAttributes attrs_;
};

template <typename T>
Status NllLossGradTyped(const KernelContext& ctx, const Tensor& dy_t, const TargetScan& scan, const NllLayout& l,
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
  NllLossGradKernel(const Node& node, NllAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(NllAttributes attrs, NllAttributes::Read(node));
    return MakeKernel<NllLossGradKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    const Tensor& target = *ctx.input(2);
    const Tensor* weight = ctx.input(3);
    Tensor& dx = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(NllLayout l, CheckOperands(ctx, x, target, weight));
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
  NllAttributes attrs_;
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
