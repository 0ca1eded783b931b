// com.microsoft::LayerNormalizationGrad (Y_grad, X, scale, mean, inv_std_dev; axis) -> X_grad,
// scale_grad, bias_grad (optional). mean and inv_std_dev are the Mean / InvStdDev outputs of the
// forward LayerNormalization (float32 or float64, one value per normalized row). With
// xhat = (x - mean) * inv_std and g = dy * scale, per row of D elements:
//   X_grad     = inv_std * (g - mean(g) - xhat * mean(g * xhat))
//   scale_grad = sum over rows of dy * xhat,  bias_grad = sum over rows of dy
// Each row is read twice: once for the two row sums, once to write X_grad and accumulate the
// parameter gradients, with no per-row scratch (long rows stay cache-friendly).
// Rows are cut into a fixed number of chunks (a function of the row count only, so the result
// does not depend on the thread count); each chunk keeps its own scale/bias partial sums, which
// are then added in chunk order.
#include <algorithm>
#include <cstring>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"

namespace tob {

namespace {

constexpr int64_t kMaxChunks = 64;

// Pass 1 of a row: sum(g) and sum(g * (x - mean)) with g = dy * scale (pure reductions, nothing
// stored, so long rows stream through once without scratch rows).
inline void RowSums(const float* dy, const float* x, const float* scale, float mean, int64_t D, float* sum_g,
                    float* sum_gx) {
  int64_t j = 0;
  float s0 = 0.f, s1 = 0.f;
#if defined(TOB_NN_AVX2)
  const __m256 m = _mm256_set1_ps(mean);
  __m256 g0 = _mm256_setzero_ps(), g1 = g0, h0 = g0, h1 = g0;
  for (; j + 16 <= D; j += 16) {
    const __m256 ga = _mm256_mul_ps(_mm256_loadu_ps(dy + j), _mm256_loadu_ps(scale + j));
    const __m256 gb = _mm256_mul_ps(_mm256_loadu_ps(dy + j + 8), _mm256_loadu_ps(scale + j + 8));
    g0 = _mm256_add_ps(g0, ga);
    g1 = _mm256_add_ps(g1, gb);
    h0 = _mm256_fmadd_ps(ga, _mm256_sub_ps(_mm256_loadu_ps(x + j), m), h0);
    h1 = _mm256_fmadd_ps(gb, _mm256_sub_ps(_mm256_loadu_ps(x + j + 8), m), h1);
  }
  s0 = vec::HorizontalSum(_mm256_add_ps(g0, g1));
  s1 = vec::HorizontalSum(_mm256_add_ps(h0, h1));
#endif
  for (; j < D; ++j) {
    const float g = dy[j] * scale[j];
    s0 += g;
    s1 += g * (x[j] - mean);
  }
  *sum_g = s0;
  *sum_gx = s1;
}

inline void RowSums(const double* dy, const double* x, const double* scale, double mean, int64_t D, double* sum_g,
                    double* sum_gx) {
  double a0 = 0, a1 = 0, b0 = 0, b1 = 0;
  int64_t j = 0;
  for (; j + 2 <= D; j += 2) {
    const double g0 = dy[j] * scale[j], g1 = dy[j + 1] * scale[j + 1];
    a0 += g0;
    a1 += g1;
    b0 += g0 * (x[j] - mean);
    b1 += g1 * (x[j + 1] - mean);
  }
  for (; j < D; ++j) {
    a0 += dy[j] * scale[j];
    b0 += dy[j] * scale[j] * (x[j] - mean);
  }
  *sum_g = a0 + a1;
  *sum_gx = b0 + b1;
}

// Pass 2 of a row: dx, and the row's share of the scale and bias gradients. The arrays never
// overlap: restrict lets the compiler vectorise without runtime alias checks. dx may be null.
template <typename C>
void RowGrads(const C* __restrict dy, const C* __restrict x, const C* __restrict scale, C mean, C inv, C mean_g,
              C mean_gx, int64_t D, C* __restrict dx, C* __restrict pscale, C* __restrict pbias) {
  if (dx != nullptr) {
    for (int64_t j = 0; j < D; ++j) {
      const C h = (x[j] - mean) * inv;
      pscale[j] += dy[j] * h;
      pbias[j] += dy[j];
      dx[j] = inv * (dy[j] * scale[j] - mean_g - h * mean_gx);
    }
  } else {
    for (int64_t j = 0; j < D; ++j) {
      pscale[j] += dy[j] * (x[j] - mean) * inv;
      pbias[j] += dy[j];
    }
  }
}

// Per-row statistic (float32 or float64 tensor) as C.
template <typename C>
C StatAt(const Tensor& t, int64_t row) {
  return t.dtype() == DType::kFloat64 ? static_cast<C>(t.data<double>()[row]) : static_cast<C>(t.data<float>()[row]);
}

// A row of T as compute type C: the row itself, or widened into `buf` for 16-bit types.
template <typename T, typename C = ComputeType<T>>
const C* RowAsCompute(const T* row, int64_t D, C* buf) {
  if constexpr (kIs16BitFloat<T>) {
    ToFloat(row, buf, D);
    return buf;
  } else {
    return row;
  }
}

template <typename T>
Status LayerNormGradTyped(const KernelContext& ctx, const Tensor& dy_t, const Tensor& x_t, const Tensor& scale_t,
                          const Tensor& mean_t, const Tensor& inv_t, int64_t rows, int64_t D, Tensor* dx_t,
                          Tensor* dscale_t, Tensor* dbias_t) {
  using C = ComputeType<T>;
  const int64_t chunks = std::min(rows, kMaxChunks);
  // Per chunk: scale and bias partial sums, and (16-bit types) widened dy, x and dx rows.
  constexpr int64_t kBuffers = kIs16BitFloat<T> ? 5 : 2;
  TOB_ASSIGN_OR_RETURN(Tensor scratch, ctx.AllocateScratch(DTypeOf<C>(), {chunks, kBuffers, D}));
  Tensor scale_c = scale_t;
  if constexpr (kIs16BitFloat<T>) {
    TOB_ASSIGN_OR_RETURN(scale_c, ToFloatScratch(ctx, scale_t));
  }
  const T* dy = dy_t.data<T>();
  const T* x = x_t.data<T>();
  const C* scale = scale_c.data<C>();
  T* dx = dx_t != nullptr ? dx_t->data<T>() : nullptr;
  C* buffers = scratch.data<C>();
  const C inv_d = C(1) / static_cast<C>(D);
  ParallelFor(ctx.thread_pool(), chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      C* pscale = buffers + c * kBuffers * D;
      C* pbias = pscale + D;
      std::fill(pscale, pscale + 2 * D, C(0));
      for (int64_t r = rows * c / chunks; r < rows * (c + 1) / chunks; ++r) {
        const C* dyr = RowAsCompute(dy + r * D, D, kIs16BitFloat<T> ? pbias + D : nullptr);
        const C* xr = RowAsCompute(x + r * D, D, kIs16BitFloat<T> ? pbias + 2 * D : nullptr);
        const C mean = StatAt<C>(mean_t, r), inv = StatAt<C>(inv_t, r);
        C sum_g = 0, sum_gx = 0;
        if (dx != nullptr) RowSums(dyr, xr, scale, mean, D, &sum_g, &sum_gx);
        // mean(g * xhat) = inv * mean(g * (x - mean)).
        const C mean_g = sum_g * inv_d, mean_gx = sum_gx * inv * inv_d;
        if constexpr (kIs16BitFloat<T>) {
          C* dx_buf = dx != nullptr ? pbias + 3 * D : nullptr;
          RowGrads(dyr, xr, scale, mean, inv, mean_g, mean_gx, D, dx_buf, pscale, pbias);
          if (dx != nullptr) FromFloat(dx_buf, dx + r * D, D);
        } else {
          RowGrads(dyr, xr, scale, mean, inv, mean_g, mean_gx, D, dx != nullptr ? dx + r * D : nullptr, pscale, pbias);
        }
      }
    }
  });
  if (dscale_t == nullptr && dbias_t == nullptr) return Status::OK();
  T* dscale = dscale_t != nullptr ? dscale_t->data<T>() : nullptr;
  T* dbias = dbias_t != nullptr ? dbias_t->data<T>() : nullptr;
  ParallelFor(ctx.thread_pool(), D, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      C s = 0, b = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        s += buffers[c * kBuffers * D + j];
        b += buffers[c * kBuffers * D + D + j];
      }
      if (dscale != nullptr) dscale[j] = static_cast<T>(s);
      if (dbias != nullptr) dbias[j] = static_cast<T>(b);
    }
  });
  return Status::OK();
}

class LayerNormGradKernel final : public OpKernel {
 public:
  LayerNormGradKernel(const Node& node, int64_t axis) : OpKernel(node), axis_(axis) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = -1;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, int64_t{-1}));
    return MakeKernel<LayerNormGradKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    const Tensor& scale = *ctx.input(2);
    const Tensor& mean = *ctx.input(3);
    const Tensor& inv_std = *ctx.input(4);
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype() || scale.dtype() != x.dtype())
      return ctx.Fail("Y_grad ", ShapeToString(dy.shape()), " and X ", ShapeToString(x.shape()),
                      " must have one shape, and scale their dtype");
    const int64_t axis = axis_ < 0 ? axis_ + x.rank() : axis_;
    if (axis < 0 || axis >= x.rank()) return ctx.Fail("axis ", axis_, " is out of range for rank ", x.rank());
    const int64_t D = NumElements(Shape(x.shape().begin() + axis, x.shape().end()));
    const int64_t rows = D == 0 ? 0 : x.numel() / D;
    if (scale.numel() != D)
      return ctx.Fail("scale ", ShapeToString(scale.shape()), " must have the ", D, " elements of the normalized dims");
    for (const Tensor* stat : {&mean, &inv_std}) {
      if (stat->dtype() != DType::kFloat32 && stat->dtype() != DType::kFloat64)
        return ctx.Fail("mean and inv_std_dev must be float32 or float64, got ", DTypeName(stat->dtype()));
      if (stat->numel() != rows)
        return ctx.Fail("mean and inv_std_dev must have one value per normalized row (", rows, "), got ",
                        ShapeToString(stat->shape()));
    }
    Tensor* dx = ctx.output(0);
    Tensor* dscale = ctx.output(1);
    Tensor* dbias = ctx.output(2);
    if (rows == 0) {
      for (Tensor* t : {dscale, dbias})
        if (t != nullptr && t->nbytes() > 0) std::memset(t->raw_data(), 0, t->nbytes());
      return Status::OK();
    }
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      return LayerNormGradTyped<T>(ctx, dy, x, scale, mean, inv_std, rows, D, dx, dscale, dbias);
    });
  }

 private:
  int64_t axis_;
};

}  // namespace

void RegisterCpuLayerNormGradKernels(KernelRegistry& registry) {
  registry.Register(Def("LayerNormalizationGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2}, FloatTypes())
                        .Constraint("U", {3, 4}, {DType::kFloat32, DType::kFloat64})
                        .SkipsUnusedOutputs()
                        .Kernel<LayerNormGradKernel>());
}

}  // namespace tob
