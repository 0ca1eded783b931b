// What the class-index losses share (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss and their
// gradients): the reduction and ignore_index attributes, the [N, C, inner] view of the input, and
// one validated scan of the targets with the total weight that 'mean' divides by.
// Sums run in float64 over chunks fixed by the element count, so results do not depend on the
// thread count.
#pragma once

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "framework/kernel.h"

namespace tob::loss {

enum class Reduction { kNone, kSum, kMean };

inline constexpr int64_t kMaxChunks = 64;
inline constexpr int64_t kGrain = 16384;

struct LossAttributes {
  Reduction reduction = Reduction::kMean;
  std::optional<int64_t> ignore_index;

  static StatusOr<LossAttributes> Read(const Node& node) {
    LossAttributes a;
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
struct LossLayout {
  int64_t N = 0, C = 0, inner = 1;
  int64_t count() const { return N * inner; }
};

inline StatusOr<LossLayout> CheckLossOperands(const KernelContext& ctx, const Tensor& x, const Tensor& target,
                                              const Tensor* weight) {
  if (x.rank() < 2) return ctx.Fail("input must be [N, C, d1, ...], got ", ShapeToString(x.shape()));
  LossLayout l;
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
inline int64_t ChunkCount(int64_t n) { return std::clamp<int64_t>((n + kGrain - 1) / kGrain, 1, kMaxChunks); }

// Validated view of targets and class weights shared by the forward and the gradient.
class TargetScan {
 public:
  // Checks every target and computes the total weight of the non-ignored ones.
  static StatusOr<TargetScan> Run(const KernelContext& ctx, const Tensor& target, const Tensor* weight,
                                  const LossLayout& l, const std::optional<int64_t>& ignore) {
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

// The negative log-likelihood of log-probabilities `lp` ([N, C, inner]) at the scanned targets,
// per element (kNone) or summed / weighted-mean in double over a fixed chunking, written to `out`
// as T. NLLLoss reads its input as `lp`; SoftmaxCrossEntropyLoss its LogSoftmax.
template <typename T, typename L>
Status WriteNllLoss(const KernelContext& ctx, const L* lp, const TargetScan& scan, const LossLayout& l,
                    Reduction reduction, Tensor& out) {
  auto loss_at = [&](int64_t i) -> double {
    const int64_t t = scan.TargetAt(i);
    if (scan.Ignored(t)) return 0.0;
    const int64_t b = i / l.inner, d = i % l.inner;
    return -static_cast<double>(lp[(b * l.C + t) * l.inner + d]) * scan.weight(t);
  };
  const int64_t n = l.count();
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

}  // namespace tob::loss
