// Softmax, LogSoftmax and Hardmax, max-shifted for stability. Before opset 13 the input is viewed
// as 2-D [prod(dims[:axis]), prod(dims[axis:])] and each row is normalised; from 13 one axis is
// normalised and the dims after it ("inner") are carried along as vector lanes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/nn/vec_math_avx512.h"

namespace tob {

namespace {

template <typename T, bool kLog>
void SoftmaxRow(const T* x, int64_t D, T* y) {
  if constexpr (kLog && std::is_same_v<T, float>) {
    if (D >= 64 && vec::avx512::Available()) {  // a vocabulary's row: the AVX-512 exp and sums
      const float max = vec::avx512::Max(x, D);
      const float lse = max + std::log(vec::avx512::ExpShiftedSumOnly(x, D, max));
      for (int64_t i = 0; i < D; ++i) y[i] = x[i] - lse;
      return;
    }
  }
  const T max = vec::Max(x, D);
  if constexpr (kLog) {
    const T lse = max + std::log(vec::ExpShiftedSumOnly(x, D, max));
    for (int64_t i = 0; i < D; ++i) y[i] = x[i] - lse;
  } else {
    const T inv = T(1) / vec::ExpShiftedSum(x, D, max, y);
    for (int64_t i = 0; i < D; ++i) y[i] *= inv;
  }
}

// One [D, inner] block, normalised along D; `max` and `sum` hold `inner` values of scratch.
template <typename T, bool kLog>
void SoftmaxBlock(const T* x, int64_t D, int64_t inner, T* y, T* max, T* sum) {
  std::fill(max, max + inner, -std::numeric_limits<T>::infinity());
  for (int64_t d = 0; d < D; ++d) {
    const T* xr = x + d * inner;
    for (int64_t i = 0; i < inner; ++i) max[i] = std::max(max[i], xr[i]);
  }
  std::fill(sum, sum + inner, T(0));
  for (int64_t d = 0; d < D; ++d) {
    const T* xr = x + d * inner;
    T* yr = y + d * inner;
    for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] - max[i];
    if constexpr (kLog) {
      for (int64_t i = 0; i < inner; ++i) sum[i] += std::exp(yr[i]);
    } else {
      vec::ExpInPlace(yr, inner);
      for (int64_t i = 0; i < inner; ++i) sum[i] += yr[i];
    }
  }
  if constexpr (kLog) {
    for (int64_t i = 0; i < inner; ++i) sum[i] = std::log(sum[i]);
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < inner; ++i) y[d * inner + i] -= sum[i];
  } else {
    for (int64_t i = 0; i < inner; ++i) sum[i] = T(1) / sum[i];
    for (int64_t d = 0; d < D; ++d)
      for (int64_t i = 0; i < inner; ++i) y[d * inner + i] *= sum[i];
  }
}

// float16/bfloat16 (data already widened to float): every elementary step (x - max, exp, the
// sum, the log, the division) is rounded to T, as ONNX defines the op on T and its reference
// computes it. One [D, inner] block.
template <typename T, bool kLog>
void SoftmaxBlockRounded(const float* x, int64_t D, int64_t inner, float* y) {
  auto round = [](float v) { return static_cast<float>(T(v)); };
  for (int64_t i = 0; i < inner; ++i) {
    float max = -std::numeric_limits<float>::infinity();
    for (int64_t d = 0; d < D; ++d) max = std::max(max, x[d * inner + i]);
    float sum = 0.f;
    for (int64_t d = 0; d < D; ++d) {
      const float shifted = round(x[d * inner + i] - max);
      const float e = round(std::exp(shifted));
      y[d * inner + i] = kLog ? shifted : e;
      sum += e;
    }
    sum = round(sum);
    if constexpr (kLog) {
      const float log_sum = round(std::log(sum));
      for (int64_t d = 0; d < D; ++d) y[d * inner + i] = round(y[d * inner + i] - log_sum);
    } else {
      for (int64_t d = 0; d < D; ++d) y[d * inner + i] = round(y[d * inner + i] / sum);
    }
  }
}

template <typename T, bool kLog>
Status SoftmaxTyped(const KernelContext& ctx, const T* x, T* y, int64_t outer, int64_t D, int64_t inner) {
  ThreadPool* pool = ctx.thread_pool();
  if (inner == 1) {
    ParallelFor(pool, outer, std::max<int64_t>(1, 8192 / D), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) SoftmaxRow<T, kLog>(x + r * D, D, y + r * D);
    });
    return Status::OK();
  }
  // Each chunk of outer blocks gets its own max/sum lanes.
  const int64_t chunks = std::min<int64_t>(outer, pool != nullptr ? pool->num_threads() : 1);
  TOB_ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateScratch(DTypeOf<T>(), {chunks, 2, inner}));
  T* lanes = scratch.data<T>();
  ParallelFor(pool, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      T* max = lanes + c * 2 * inner;
      for (int64_t o = outer * c / chunks; o < outer * (c + 1) / chunks; ++o)
        SoftmaxBlock<T, kLog>(x + o * D * inner, D, inner, y + o * D * inner, max, max + inner);
    }
  });
  return Status::OK();
}

class SoftmaxKernel final : public OpKernel {
 public:
  SoftmaxKernel(const Node& node, int64_t axis, bool coerce_2d, bool log)
      : OpKernel(node), axis_(axis), coerce_2d_(coerce_2d), log_(log) {}

  // coerce_2d: the opset < 13 semantics (and default axis 1).
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool coerce_2d, bool log) {
    int64_t axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, coerce_2d ? int64_t{1} : int64_t{-1}));
    return MakeKernel<SoftmaxKernel>(node, axis, coerce_2d, log);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t rank = std::max<int64_t>(1, x.rank());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", x.rank());
    const Shape& s = x.shape();
    int64_t outer = 1, D = 1, inner = 1;
    for (int64_t i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= s[i];
      else if (i == axis || coerce_2d_) D *= s[i];
      else inner *= s[i];
    }
    if (x.numel() == 0) return Status::OK();
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor xf, ToFloatScratch(ctx, x));
        TOB_ASSIGN_OR_RETURN(Tensor yf, ctx.AllocateScratch(DType::kFloat32, y.shape()));
        const float* xp = xf.data<float>();
        float* yp = yf.data<float>();
        ParallelFor(ctx.thread_pool(), outer, std::max<int64_t>(1, 4096 / (D * inner)), [&](int64_t b, int64_t e) {
          for (int64_t o = b; o < e; ++o) {
            if (log_) SoftmaxBlockRounded<T, true>(xp + o * D * inner, D, inner, yp + o * D * inner);
            else SoftmaxBlockRounded<T, false>(xp + o * D * inner, D, inner, yp + o * D * inner);
          }
        });
        return FromFloatScratch(ctx, yf, &y);
      } else {
        return Run<T>(ctx, x.data<T>(), y.data<T>(), outer, D, inner);
      }
    });
  }

 private:
  template <typename T>
  Status Run(const KernelContext& ctx, const T* x, T* y, int64_t outer, int64_t D, int64_t inner) const {
    return log_ ? SoftmaxTyped<T, true>(ctx, x, y, outer, D, inner)
                : SoftmaxTyped<T, false>(ctx, x, y, outer, D, inner);
  }

  int64_t axis_;
  bool coerce_2d_;
  bool log_;
};

// Hardmax: 1 at the first maximum of each row (NaN counts as the maximum, as numpy's argmax), 0
// elsewhere. Same axis rules as Softmax.
class HardmaxKernel final : public OpKernel {
 public:
  HardmaxKernel(const Node& node, int64_t axis, bool coerce_2d) : OpKernel(node), axis_(axis), coerce_2d_(coerce_2d) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool coerce_2d) {
    int64_t axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, coerce_2d ? int64_t{1} : int64_t{-1}));
    return MakeKernel<HardmaxKernel>(node, axis, coerce_2d);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t rank = std::max<int64_t>(1, x.rank());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", x.rank());
    int64_t outer = 1, D = 1, inner = 1;
    for (int64_t i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= x.dim(i);
      else if (i == axis || coerce_2d_) D *= x.dim(i);
      else inner *= x.dim(i);
    }
    if (x.numel() == 0) return Status::OK();
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      ParallelFor(ctx.thread_pool(), outer * inner, std::max<int64_t>(1, 8192 / D), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t o = r / inner, i = r % inner;
          const T* row = xp + o * D * inner + i;
          T* out = yp + o * D * inner + i;
          int64_t best = 0;
          double best_d = static_cast<double>(row[0]);
          for (int64_t d = 1; d < D && best_d == best_d; ++d) {
            const double v = static_cast<double>(row[d * inner]);
            if (v > best_d || v != v) {
              best = d;
              best_d = v;
            }
          }
          for (int64_t d = 0; d < D; ++d) out[d * inner] = static_cast<T>(d == best ? 1.0f : 0.0f);
        }
      });
      return Status::OK();
    });
  }

 private:
  int64_t axis_;
  bool coerce_2d_;
};

KernelFactory SoftmaxFactory(bool coerce_2d, bool log) {
  return [coerce_2d, log](const Node& n) { return SoftmaxKernel::Create(n, coerce_2d, log); };
}

}  // namespace

void RegisterCpuSoftmaxKernels(KernelRegistry& registry) {
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    registry.Register(Def(op).Versions(1, 12).Constraint("T", {0}, FloatTypes()).Factory(SoftmaxFactory(true, log)));
    registry.Register(Def(op).Versions(13).Constraint("T", {0}, FloatTypes()).Factory(SoftmaxFactory(false, log)));
  }
  registry.Register(Def("Hardmax").Versions(1, 12).Constraint("T", {0}, FloatTypes()).Factory([](const Node& n) {
    return HardmaxKernel::Create(n, true);
  }));
  registry.Register(Def("Hardmax").Versions(13).Constraint("T", {0}, FloatTypes()).Factory([](const Node& n) {
    return HardmaxKernel::Create(n, false);
  }));
}

}  // namespace tob
