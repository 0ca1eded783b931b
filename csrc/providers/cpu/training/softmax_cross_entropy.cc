// SoftmaxCrossEntropyLoss (ai.onnx 12, 13+) and its gradient com.microsoft::SoftmaxCrossEntropyLossGrad.
// The scores are viewed as [N, C, inner] (inner = d1 * ... * dk), the labels as [N, inner]:
//   log_prob[n, :, i] = log_softmax(scores[n, :, i])        (over the classes, axis 1)
//   loss[n, i]        = -log_prob[n, t, i] * w[t]            (0 where t == ignore_index)
// reduced as NegativeLogLikelihoodLoss reduces (loss_targets.h: 'mean' divides by the total
// weight of the non-ignored labels). The gradient, from dY and the forward's log_prob:
//   d_logits[n, c, i] = (exp(log_prob[n, c, i]) - [c == t]) * w[t] * g(n, i)
// with g = dY[n, i] for 'none', dY for 'sum', dY / total weight for 'mean' (0 for ignored labels).
// 16-bit types compute in float32; the log-softmax of a column is computed in the compute type
// and the losses are summed in float64, so results do not depend on the thread count. The
// gradient computes in float64 but for float32 [N, C] (a language model's head, which the
// optimizer's CrossEntropyGradFusion hands over): there exp(log_prob) is the provider's vectorised
// float32 exp (a few ulp), the target class's p - 1 float64.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/nn/vec_math_avx512.h"
#include "providers/cpu/training/loss_targets.h"

namespace tob {

namespace {

using namespace loss;

// Columns of one [C, inner] block processed together: each keeps its running max and sum.
constexpr int64_t kLanes = 64;

// log_softmax over the C axis of x (one [C, inner] block per n), into lp (C type).
template <typename T, typename C>
void LogSoftmaxOverClasses(ThreadPool* pool, const T* x, const LossLayout& l, C* lp) {
  const int64_t lane_blocks = (l.inner + kLanes - 1) / kLanes;
  ParallelFor(pool, l.N * lane_blocks, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, l.C * kLanes)),
              [&](int64_t b, int64_t e) {
                std::array<C, kLanes> max, sum;
                for (int64_t job = b; job < e; ++job) {
                  const int64_t n = job / lane_blocks, i0 = (job % lane_blocks) * kLanes;
                  const int64_t lanes = std::min(kLanes, l.inner - i0);
                  const T* xb = x + n * l.C * l.inner + i0;
                  C* yb = lp + n * l.C * l.inner + i0;
                  max.fill(-std::numeric_limits<C>::infinity());
                  sum.fill(C(0));
                  for (int64_t c = 0; c < l.C; ++c)
                    for (int64_t i = 0; i < lanes; ++i) max[i] = std::max(max[i], static_cast<C>(xb[c * l.inner + i]));
                  for (int64_t c = 0; c < l.C; ++c)
                    for (int64_t i = 0; i < lanes; ++i) {
                      const C shifted = static_cast<C>(xb[c * l.inner + i]) - max[i];
                      yb[c * l.inner + i] = shifted;
                      sum[i] += std::exp(shifted);
                    }
                  for (int64_t i = 0; i < lanes; ++i) sum[i] = std::log(sum[i]);
                  for (int64_t c = 0; c < l.C; ++c)
                    for (int64_t i = 0; i < lanes; ++i) yb[c * l.inner + i] -= sum[i];
                }
              });
}

template <typename T>
Status SoftmaxCrossEntropyTyped(const KernelContext& ctx, const Tensor& x_t, const TargetScan& scan,
                                const LossLayout& l, Reduction reduction, Tensor& out, Tensor* log_prob_out) {
  using C = ComputeType<T>;
  TOB_ASSIGN_OR_RETURN(Tensor lp_t, ctx.AllocateScratch(DTypeOf<C>(), x_t.shape()));
  C* lp = lp_t.data<C>();
  LogSoftmaxOverClasses(ctx.thread_pool(), x_t.data<T>(), l, lp);
  if (log_prob_out != nullptr) {
    if constexpr (kIs16BitFloat<T>) {
      TOB_RETURN_IF_ERROR(FromFloatScratch(ctx, lp_t, log_prob_out));
    } else {
      std::copy(lp, lp + lp_t.numel(), log_prob_out->data<T>());
    }
  }
  return WriteNllLoss<T>(ctx, lp, scan, l, reduction, out);
}

class SoftmaxCrossEntropyKernel final : public OpKernel {
 public:
  SoftmaxCrossEntropyKernel(const Node& node, LossAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LossAttributes attrs, LossAttributes::Read(node));
    return MakeKernel<SoftmaxCrossEntropyKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& target = *ctx.input(1);
    const Tensor* weight = ctx.input(2);
    TOB_ASSIGN_OR_RETURN(LossLayout l, CheckLossOperands(ctx, x, target, weight));
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, weight, l, attrs_.ignore_index));
    Tensor& out = *ctx.output(0);
    Tensor* log_prob = ctx.output(1);
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      return SoftmaxCrossEntropyTyped<T>(ctx, x, scan, l, attrs_.reduction, out, log_prob);
    });
  }

 private:
  LossAttributes attrs_;
};

// float32 [N, C] (a language model's head: tokens x vocabulary): one row per n, the row's factor
// w[t] g once, exp(log_prob) * factor with the provider's vectorised exp (the float32 exp the
// unfused LogSoftmaxGrad uses; its AVX-512 lanes where the CPU has them, the same bits), the target class (p - 1) *
// factor in float64 (p near 1 there).
void SoftmaxCrossEntropyGradRows(ThreadPool* pool, const float* dy, const float* lp, const TargetScan& scan,
                                 const LossLayout& l, Reduction reduction, double scale, float* dx) {
  const bool wide = l.C >= 64 && vec::avx512::Available();  // a vocabulary's rows: the AVX-512 exp
  ParallelFor(pool, l.N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.C)), [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n) {
      const int64_t t = scan.TargetAt(n);
      const float* lrow = lp + n * l.C;
      float* row = dx + n * l.C;
      if (scan.Ignored(t)) {
        std::fill_n(row, l.C, 0.f);
        continue;
      }
      const double factor = scan.weight(t) * (reduction == Reduction::kNone ? static_cast<double>(dy[n]) : scale);
      const float f = static_cast<float>(factor);
      if (wide) {
        vec::avx512::ExpScaled(lrow, l.C, f, row);
      } else {
        vec::ExpShiftedSum(lrow, l.C, 0.f, row);
        for (int64_t c = 0; c < l.C; ++c) row[c] *= f;
      }
      row[t] = static_cast<float>((std::exp(static_cast<double>(lrow[t])) - 1.0) * factor);
    }
  });
}

template <typename T>
Status SoftmaxCrossEntropyGradTyped(const KernelContext& ctx, const Tensor& dy_t, const Tensor& lp_t,
                                    const TargetScan& scan, const LossLayout& l, Reduction reduction, Tensor& dx_t) {
  const T* dy = dy_t.data<T>();
  const T* lp = lp_t.data<T>();
  T* dx = dx_t.data<T>();
  double scale = reduction == Reduction::kNone ? 1.0 : static_cast<double>(dy[0]);
  if (reduction == Reduction::kMean) scale /= scan.total_weight();
  if constexpr (std::is_same_v<T, float>) {
    if (l.inner == 1) {
      SoftmaxCrossEntropyGradRows(ctx.thread_pool(), dy, lp, scan, l, reduction, scale, dx);
      return Status::OK();
    }
  }
  // One [C, inner] block per n; within it classes outer, positions inner (contiguous).
  ParallelFor(ctx.thread_pool(), l.N, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, l.C * l.inner)),
              [&](int64_t b, int64_t e) {
                for (int64_t n = b; n < e; ++n) {
                  for (int64_t c = 0; c < l.C; ++c) {
                    const int64_t row = (n * l.C + c) * l.inner;
                    for (int64_t i = 0; i < l.inner; ++i) {
                      const int64_t t = scan.TargetAt(n * l.inner + i);
                      if (scan.Ignored(t)) {
                        dx[row + i] = static_cast<T>(0.0);
                        continue;
                      }
                      const double g = reduction == Reduction::kNone ? static_cast<double>(dy[n * l.inner + i]) : scale;
                      const double p = std::exp(static_cast<double>(lp[row + i]));
                      dx[row + i] = static_cast<T>((p - (c == t ? 1.0 : 0.0)) * scan.weight(t) * g);
                    }
                  }
                }
              });
  return Status::OK();
}

class SoftmaxCrossEntropyGradKernel final : public OpKernel {
 public:
  SoftmaxCrossEntropyGradKernel(const Node& node, LossAttributes attrs) : OpKernel(node), attrs_(attrs) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(LossAttributes attrs, LossAttributes::Read(node));
    return MakeKernel<SoftmaxCrossEntropyGradKernel>(node, attrs);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& log_prob = *ctx.input(1);
    const Tensor& target = *ctx.input(2);
    const Tensor* weight = ctx.input(3);
    Tensor& dx = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(LossLayout l, CheckLossOperands(ctx, log_prob, target, weight));
    if (dy.dtype() != log_prob.dtype()) return ctx.Fail("dY must have log_prob's dtype");
    if (attrs_.reduction == Reduction::kNone ? dy.shape() != target.shape() : dy.numel() != 1)
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " must be ",
                      attrs_.reduction == Reduction::kNone ? "of the label's shape" : "a scalar");
    TOB_ASSIGN_OR_RETURN(TargetScan scan, TargetScan::Run(ctx, target, weight, l, attrs_.ignore_index));
    return DispatchFloat(ctx, log_prob.dtype(), [&]<typename T>() -> Status {
      return SoftmaxCrossEntropyGradTyped<T>(ctx, dy, log_prob, scan, l, attrs_.reduction, dx);
    });
  }

 private:
  LossAttributes attrs_;
};

}  // namespace

void RegisterCpuSoftmaxCrossEntropyKernels(KernelRegistry& registry) {
  const std::vector<DType> index_types{DType::kInt32, DType::kInt64};
  const std::vector<DType> float_types{DType::kFloat32, DType::kFloat64, DType::kFloat16};
  registry.Register(Def("SoftmaxCrossEntropyLoss")
                        .Versions(12, 12)
                        .Constraint("T", {0, 2}, float_types)
                        .Constraint("Tind", {1}, index_types)
                        .Kernel<SoftmaxCrossEntropyKernel>());
  registry.Register(Def("SoftmaxCrossEntropyLoss")
                        .Versions(13)
                        .Constraint("T", {0, 2}, FloatTypes())
                        .Constraint("Tind", {1}, index_types)
                        .Kernel<SoftmaxCrossEntropyKernel>());
  registry.Register(Def("SoftmaxCrossEntropyLossGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 3}, FloatTypes())
                        .Constraint("Tind", {2}, index_types)
                        .Kernel<SoftmaxCrossEntropyGradKernel>());
}

}  // namespace tob
