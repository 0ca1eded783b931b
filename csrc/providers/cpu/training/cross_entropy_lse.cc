// ai.tob::SoftmaxCrossEntropyLse and ai.tob::SoftmaxCrossEntropyLseGrad: softmax cross-entropy over
// [N, C] scores (a language model's head: tokens x vocabulary) whose forward never holds the
// [N, C] log-probabilities. Per row n with target t (the row skipped where t == ignore_index):
//   lse[n]  = max_c x[n, c] + log(sum_c exp(x[n, c] - max))       (one pass for the max, one for the sum)
//   loss[n] = lse[n] - x[n, t]                                      (as -(x[t] - max - log(sum)))
// reduced as NegativeLogLikelihoodLoss reduces (loss_targets.h: 'mean' divides by the number of
// non-ignored rows). The forward writes the loss and lse ([N], the scores' dtype) only. The gradient
// reads the scores again with lse:
//   dX[n, c] = (exp(x[n, c] - lse[n]) - [c == t]) * g(n)
// with g = dY[n] for 'none', dY for 'sum', dY / count for 'mean', 0 on ignored rows. float32 rows use
// the provider's vectorised exp (the float32 exp LogSoftmax and SoftmaxCrossEntropyLossGrad use), the
// target class's p - 1 and the losses' sums float64; float64 rows compute in float64. So the result
// is log_softmax + nll_loss's within float32's rounding (not bit for bit: exp(x - lse) rounds once
// where exp((x - max) - log(sum)) rounds twice), and does not depend on the thread count.
// The memory optimizer's loss-head rewrite (torch_ort_backend/memory_optimizer/loss_head.py) emits
// the pair for AOTAutograd's log_softmax + nll_loss and its gradient.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/nn/vec_math_avx512.h"
#include "providers/cpu/training/loss_targets.h"

namespace tob {

namespace {

using namespace loss;

// Rows of [N, C] scores with their targets, the operands both kernels check alike.
StatusOr<LossLayout> CheckRows(const KernelContext& ctx, const Tensor& x, const Tensor& target) {
  if (x.rank() != 2) return ctx.Fail("scores must be [N, C], got ", ShapeToString(x.shape()));
  if (x.dtype() != DType::kFloat32 && x.dtype() != DType::kFloat64)
    return ctx.Fail("scores must be float32 or float64, got ", DTypeName(x.dtype()));
  if (target.dtype() != DType::kInt32 && target.dtype() != DType::kInt64)
    return ctx.Fail("target must be int32 or int64, got ", DTypeName(target.dtype()));
  return CheckLossOperands(ctx, x, target, nullptr);
}

// max + log(sum exp(x - max)) of one row, and log(sum) (the log-softmax's offset from x - max).
struct RowLse {
  double lse;
  double log_sum;
  double max;
};

inline RowLse LseOfRow(const float* x, int64_t C, bool wide) {
  const float m = wide ? vec::avx512::Max(x, C) : vec::Max(x, C);
  const float s = wide ? vec::avx512::ExpShiftedSumOnly(x, C, m) : vec::ExpShiftedSumOnly(x, C, m);
  const float ls = std::log(s);
  return {static_cast<double>(m + ls), static_cast<double>(ls), static_cast<double>(m)};
}

inline RowLse LseOfRow(const double* x, int64_t C, bool) {
  const double m = vec::Max(x, C);
  const double ls = std::log(vec::ExpShiftedSumOnly(x, C, m));
  return {m + ls, ls, m};
}

template <typename T>
Status LseForward(const KernelContext& ctx, const Tensor& x_t, const TargetScan& scan, const LossLayout& l,
                  Reduction reduction, Tensor& out, Tensor& lse_t) {
  const T* x = x_t.data<T>();
  T* lse = lse_t.data<T>();
  TOB_ASSIGN_OR_RETURN(Tensor losses_t, ctx.AllocateScratch(DType::kFloat64, {l.N}));
  double* losses = losses_t.data<double>();
  const bool wide = std::is_same_v<T, float> && l.C >= 64 && vec::avx512::Available();
  ParallelFor(
      ctx.thread_pool(), l.N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.C)), [&](int64_t b, int64_t e) {
        for (int64_t n = b; n < e; ++n) {
          const int64_t t = scan.TargetAt(n);
          if (scan.Ignored(t)) {
            lse[n] = T(0);
            losses[n] = 0.0;
            continue;
          }
          const T* row = x + n * l.C;
          const RowLse r = LseOfRow(row, l.C, wide);
          lse[n] = static_cast<T>(r.lse);
          // -log_softmax(x)[t] = -((x[t] - max) - log(sum)), each step rounded as LogSoftmax's
          const T lp = static_cast<T>(static_cast<T>(row[t] - static_cast<T>(r.max)) - static_cast<T>(r.log_sum));
          losses[n] = -static_cast<double>(lp);
        }
      });
  // Summed in float64 over loss_targets.h's fixed chunking, as WriteNllLoss sums.
  const int64_t count = l.count();
  if (reduction == Reduction::kNone) {
    T* y = out.data<T>();
    for (int64_t n = 0; n < count; ++n) y[n] = static_cast<T>(losses[n]);
    return Status::OK();
  }
  const int64_t chunks = ChunkCount(count);
  TOB_ASSIGN_OR_RETURN(Tensor partial, ctx.AllocateScratch(DType::kFloat64, {chunks}));
  double* sums = partial.data<double>();
  ParallelFor(ctx.thread_pool(), chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      double s = 0;
      for (int64_t i = count * c / chunks; i < count * (c + 1) / chunks; ++i) s += losses[i];
      sums[c] = s;
    }
  });
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += sums[c];
  if (reduction == Reduction::kMean) total /= scan.total_weight();
  out.data<T>()[0] = static_cast<T>(total);
  return Status::OK();
}

class SoftmaxCrossEntropyLseKernel final : public OpKernel {
 public:
  SoftmaxCrossEntropyLseKernel(const Node& node, LossAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LossAttributes attrs, LossAttributes::Read(node));
    return MakeKernel<SoftmaxCrossEntropyLseKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& target = *ctx.input(1);
    TOB_ASSIGN_OR_RETURN(LossLayout l, CheckRows(ctx, x, target));
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, nullptr, l, attrs_.ignore_index));
    Tensor& out = *ctx.output(0);
    Tensor& lse = *ctx.output(1);
    if (x.dtype() == DType::kFloat32) return LseForward<float>(ctx, x, scan, l, attrs_.reduction, out, lse);
    return LseForward<double>(ctx, x, scan, l, attrs_.reduction, out, lse);
  }

 private:
  LossAttributes attrs_;
};

template <typename T>
void LseGradRows(ThreadPool* pool, const T* dy, const T* x, const T* lse, const TargetScan& scan, const LossLayout& l,
                 Reduction reduction, double scale, T* dx) {
  ParallelFor(pool, l.N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.C)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const int64_t t = scan.TargetAt(n);
      T* row = dx + n * l.C;
      if (scan.Ignored(t)) {
        std::fill_n(row, l.C, T(0));
        continue;
      }
      const T* xrow = x + n * l.C;
      const double factor = reduction == Reduction::kNone ? static_cast<double>(dy[n]) : scale;
      const T f = static_cast<T>(factor);
      vec::ExpShiftedSum(xrow, l.C, lse[n], row);  // exp(x - lse): the softmax
      for (int64_t c = 0; c < l.C; ++c) row[c] *= f;
      row[t] = static_cast<T>((std::exp(static_cast<double>(xrow[t]) - static_cast<double>(lse[n])) - 1.0) * factor);
    }
  });
}

class SoftmaxCrossEntropyLseGradKernel final : public OpKernel {
 public:
  SoftmaxCrossEntropyLseGradKernel(const Node& node, LossAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LossAttributes attrs, LossAttributes::Read(node));
    return MakeKernel<SoftmaxCrossEntropyLseGradKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    const Tensor& target = *ctx.input(2);
    const Tensor& lse = *ctx.input(3);
    TOB_ASSIGN_OR_RETURN(LossLayout l, CheckRows(ctx, x, target));
    if (dy.dtype() != x.dtype() || lse.dtype() != x.dtype())
      return ctx.Fail("dY and lse must have the scores' dtype ", DTypeName(x.dtype()), ", got ", DTypeName(dy.dtype()),
                      " and ", DTypeName(lse.dtype()));
    if (lse.shape() != Shape{l.N}) return ctx.Fail("lse ", ShapeToString(lse.shape()), " must be [", l.N, "]");
    if (attrs_.reduction == Reduction::kNone ? dy.shape() != target.shape() : dy.numel() != 1)
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " must be ",
                      attrs_.reduction == Reduction::kNone ? "of the target's shape" : "a scalar");
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, nullptr, l, attrs_.ignore_index));
    Tensor& dx = *ctx.output(0);
    auto run = [&]<typename T>() {
      const T* g = dy.data<T>();
      double scale = attrs_.reduction == Reduction::kNone ? 1.0 : static_cast<double>(g[0]);
      if (attrs_.reduction == Reduction::kMean) scale /= scan.total_weight();
      LseGradRows<T>(ctx.thread_pool(), g, x.data<T>(), lse.data<T>(), scan, l, attrs_.reduction, scale, dx.data<T>());
    };
    if (x.dtype() == DType::kFloat32) run.template operator()<float>();
    else run.template operator()<double>();
    return Status::OK();
  }

 private:
  LossAttributes attrs_;
};

}  // namespace

void RegisterCpuCrossEntropyLseKernels(KernelRegistry& registry) {
  const std::vector<DType> index_types{DType::kInt32, DType::kInt64};
  const std::vector<DType> float_types{DType::kFloat32, DType::kFloat64};
  registry.Register(Def("SoftmaxCrossEntropyLse")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0}, float_types)
                        .Constraint("Tind", {1}, index_types)
                        .Kernel<SoftmaxCrossEntropyLseKernel>());
  registry.Register(Def("SoftmaxCrossEntropyLseGrad")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 3}, float_types)
                        .Constraint("Tind", {2}, index_types)
                        .Kernel<SoftmaxCrossEntropyLseGradKernel>());
}

}  // namespace tob
