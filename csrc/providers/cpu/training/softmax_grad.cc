// SoftmaxGrad_13 / LogSoftmaxGrad_13 (one axis, default -1) and SoftmaxGrad / LogSoftmaxGrad (the
// opset < 13 semantics: the input viewed as 2-D at `axis`, default 1); inputs (dY, Y) with Y the
// forward output:
//   softmax:     dX = Y * (dY - sum(dY * Y, axis))
//   log-softmax: dX = dY - exp(Y) * sum(dY, axis)
// The tensor is [outer, D, inner] around the axis. inner == 1 (the usual last axis) runs one
// contiguous row at a time with AVX2 reductions; otherwise the inner lanes are carried as
// vectors and the sums kept per lane.
#include <algorithm>
#include <cmath>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"

namespace tob {

namespace {

inline float Dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float s = 0.f;
#if defined(TOB_NN_AVX2)
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
  s = vec::HorizontalSum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline double Dot(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

template <typename C, bool kLog>
void GradRow(const C* dy, const C* y, C* dx, int64_t D) {
  if constexpr (kLog) {
    const C s = vec::Sum(dy, D);
    for (int64_t i = 0; i < D; ++i) dx[i] = y[i];
    vec::ExpInPlace(dx, D);
    for (int64_t i = 0; i < D; ++i) dx[i] = dy[i] - dx[i] * s;
  } else {
    const C s = Dot(dy, y, D);
    for (int64_t i = 0; i < D; ++i) dx[i] = y[i] * (dy[i] - s);
  }
}

// One [D, inner] block; `sum` holds `inner` values of scratch.
template <typename C, bool kLog>
void GradBlock(const C* dy, const C* y, C* dx, int64_t D, int64_t inner, C* sum) {
  std::fill(sum, sum + inner, C(0));
  for (int64_t d = 0; d < D; ++d) {
    const C* dyr = dy + d * inner;
    const C* yr = y + d * inner;
    if constexpr (kLog) {
      for (int64_t i = 0; i < inner; ++i) sum[i] += dyr[i];
    } else {
      for (int64_t i = 0; i < inner; ++i) sum[i] += dyr[i] * yr[i];
    }
  }
  for (int64_t d = 0; d < D; ++d) {
    const C* dyr = dy + d * inner;
    const C* yr = y + d * inner;
    C* dxr = dx + d * inner;
    if constexpr (kLog) {
      for (int64_t i = 0; i < inner; ++i) dxr[i] = yr[i];
      vec::ExpInPlace(dxr, inner);
      for (int64_t i = 0; i < inner; ++i) dxr[i] = dyr[i] - dxr[i] * sum[i];
    } else {
      for (int64_t i = 0; i < inner; ++i) dxr[i] = yr[i] * (dyr[i] - sum[i]);
    }
  }
}

template <typename C, bool kLog>
Status GradTyped(const KernelContext& ctx, const C* dy, const C* y, C* dx, int64_t outer, int64_t D, int64_t inner) {
  ThreadPool* pool = ctx.thread_pool();
  if (inner == 1) {
    ParallelFor(pool, outer, std::max<int64_t>(1, 8192 / D), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) GradRow<C, kLog>(dy + r * D, y + r * D, dx + r * D, D);
    });
    return Status::OK();
  }
  const int64_t chunks = std::min<int64_t>(outer, pool != nullptr ? pool->num_threads() : 1);
  TOB_ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateScratch(DTypeOf<C>(), {chunks, inner}));
  C* lanes = scratch.data<C>();
  ParallelFor(pool, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      for (int64_t o = outer * c / chunks; o < outer * (c + 1) / chunks; ++o) {
        const int64_t off = o * D * inner;
        GradBlock<C, kLog>(dy + off, y + off, dx + off, D, inner, lanes + c * inner);
      }
    }
  });
  return Status::OK();
}

class SoftmaxGradKernel final : public OpKernel {
 public:
  SoftmaxGradKernel(const Node& node, int64_t axis, bool coerce_2d, bool log)
      : OpKernel(node), axis_(axis), coerce_2d_(coerce_2d), log_(log) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool coerce_2d, bool log) {
    int64_t axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, coerce_2d ? int64_t{1} : int64_t{-1}));
    return MakeKernel<SoftmaxGradKernel>(node, axis, coerce_2d, log);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& y = *ctx.input(1);
    Tensor& dx = *ctx.output(0);
    if (dy.shape() != y.shape() || dy.dtype() != y.dtype())
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " and Y ", ShapeToString(y.shape()),
                      " must have one shape and dtype");
    const int64_t rank = std::max<int64_t>(1, y.rank());
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", y.rank());
    int64_t outer = 1, D = 1, inner = 1;
    for (int64_t i = 0; i < y.rank(); ++i) {
      if (i < axis) outer *= y.dim(i);
      else if (i == axis || coerce_2d_) D *= y.dim(i);
      else inner *= y.dim(i);
    }
    if (y.numel() == 0) return Status::OK();
    return DispatchFloat(ctx, y.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor dyf, ToFloatScratch(ctx, dy));
        TOB_ASSIGN_OR_RETURN(Tensor yf, ToFloatScratch(ctx, y));
        TOB_ASSIGN_OR_RETURN(Tensor dxf, ctx.AllocateScratch(DType::kFloat32, dx.shape()));
        TOB_RETURN_IF_ERROR(Run(ctx, dyf.data<float>(), yf.data<float>(), dxf.data<float>(), outer, D, inner));
        return FromFloatScratch(ctx, dxf, &dx);
      } else {
        return Run(ctx, dy.data<T>(), y.data<T>(), dx.data<T>(), outer, D, inner);
      }
    });
  }

 private:
  template <typename C>
  Status Run(const KernelContext& ctx, const C* dy, const C* y, C* dx, int64_t outer, int64_t D, int64_t inner) const {
    return log_ ? GradTyped<C, true>(ctx, dy, y, dx, outer, D, inner)
                : GradTyped<C, false>(ctx, dy, y, dx, outer, D, inner);
  }

  int64_t axis_;
  bool coerce_2d_;
  bool log_;
};

KernelFactory SoftmaxGradFactory(bool coerce_2d, bool log) {
  return [coerce_2d, log](const Node& n) { return SoftmaxGradKernel::Create(n, coerce_2d, log); };
}

}  // namespace

void RegisterCpuSoftmaxGradKernels(KernelRegistry& registry) {
  for (bool log : {false, true}) {
    const std::string op = log ? "LogSoftmaxGrad" : "SoftmaxGrad";
    registry.Register(Def(op + "_13")
                          .Domain(kMicrosoftDomain)
                          .Versions(1)
                          .Constraint("T", {0, 1}, FloatTypes())
                          .Factory(SoftmaxGradFactory(false, log)));
    registry.Register(Def(op)
                          .Domain(kMicrosoftDomain)
                          .Versions(1)
                          .Constraint("T", {0, 1}, FloatTypes())
                          .Factory(SoftmaxGradFactory(true, log)));
  }
}

}  // namespace tob
