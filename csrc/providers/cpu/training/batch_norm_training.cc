// Training-mode batch normalization, as torch's native_batch_norm / native_batch_norm_backward:
//   BatchNormInternal (X, scale, B, input_mean, input_var; epsilon, momentum, training_mode)
//       -> Y, running_mean, running_var, saved_mean, saved_inv_std
//   BatchNormalizationGrad (dY, X, scale, saved_mean, saved_inv_std; epsilon) -> dX, dScale, dBias
// Per channel c over its M = N * plane values, with xhat = (x - mean) * inv_std:
//   forward (training): mean and biased variance of the batch; saved_inv_std = 1/sqrt(var + eps);
//     running_mean = momentum * input_mean + (1 - momentum) * mean, and running_var the same with
//     the unbiased variance var * M / (M - 1) (torch's update; ONNX momentum = 1 - torch momentum)
//   backward: dBias = sum(dY), dScale = sum(dY * xhat),
//     dX = scale * inv_std * (dY - dBias / M - xhat * dScale / M)
// Statistics are summed per (n, c) plane in float64 and then per channel in image order, so the
// work spreads over N * C planes and the result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"

namespace tob {

namespace {

constexpr int64_t kBlock = 512;

// Sum of x and sum of (x - center)^2 / (dy, dy * (x - center)) over contiguous float rows.
inline void PairSums(const float* a, const float* b, int64_t n, float center, bool square, double* s1, double* s2) {
  int64_t i = 0;
  float t1 = 0.f, t2 = 0.f;
#if defined(TOB_NN_AVX2)
  const __m256 cv = _mm256_set1_ps(center);
  __m256 a1 = _mm256_setzero_ps(), a2 = a1, b1 = a1, b2 = a1;
  for (; i + 16 <= n; i += 16) {
    const __m256 u0 = _mm256_loadu_ps(a + i), u1 = _mm256_loadu_ps(a + i + 8);
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(b + i), cv), d1 = _mm256_sub_ps(_mm256_loadu_ps(b + i + 8), cv);
    a1 = _mm256_add_ps(a1, u0);
    b1 = _mm256_add_ps(b1, u1);
    a2 = _mm256_fmadd_ps(square ? d0 : u0, d0, a2);
    b2 = _mm256_fmadd_ps(square ? d1 : u1, d1, b2);
  }
  t1 = vec::HorizontalSum(_mm256_add_ps(a1, b1));
  t2 = vec::HorizontalSum(_mm256_add_ps(a2, b2));
#endif
  for (; i < n; ++i) {
    const float d = b[i] - center;
    t1 += a[i];
    t2 += (square ? d : a[i]) * d;
  }
  *s1 += t1;
  *s2 += t2;
}

inline void PairSums(const double* a, const double* b, int64_t n, double center, bool square, double* s1, double* s2) {
  double t1 = 0, t2 = 0, u1 = 0, u2 = 0;
  int64_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const double d0 = b[i] - center, d1 = b[i + 1] - center;
    t1 += a[i];
    u1 += a[i + 1];
    t2 += (square ? d0 : a[i]) * d0;
    u2 += (square ? d1 : a[i + 1]) * d1;
  }
  for (; i < n; ++i) {
    const double d = b[i] - center;
    t1 += a[i];
    t2 += (square ? d : a[i]) * d;
  }
  *s1 += t1 + u1;
  *s2 += t2 + u2;
}

// PairSums over a plane of T (16-bit types widened block by block). `a` may equal `b`.
template <typename T>
void PlanePairSums(const T* a, const T* b, int64_t n, double center, bool square, double* s1, double* s2) {
  if constexpr (kIs16BitFloat<T>) {
    float ab[kBlock], bb[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      ToFloat(a + i, ab, m);
      ToFloat(b + i, bb, m);
      PairSums(ab, bb, m, static_cast<float>(center), square, s1, s2);
    }
  } else {
    PairSums(a, b, n, static_cast<T>(center), square, s1, s2);
  }
}

// out[i] = p * u[i] + q * v[i] + r over a plane (v may be null: then q is unused).
template <typename T>
void PlaneAffine(const T* u, const T* v, int64_t n, double p, double q, double r, T* out) {
  using C = ComputeType<T>;
  const C pc = static_cast<C>(p), qc = static_cast<C>(q), rc = static_cast<C>(r);
  if constexpr (kIs16BitFloat<T>) {
    float ub[kBlock], vb[kBlock];
    for (int64_t i = 0; i < n; i += kBlock) {
      const int64_t m = std::min(kBlock, n - i);
      ToFloat(u + i, ub, m);
      if (v != nullptr) ToFloat(v + i, vb, m);
      if (v != nullptr) {
        for (int64_t j = 0; j < m; ++j) ub[j] = pc * ub[j] + qc * vb[j] + rc;
      } else {
        for (int64_t j = 0; j < m; ++j) ub[j] = pc * ub[j] + rc;
      }
      FromFloat(ub, out + i, m);
    }
  } else if (v != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = pc * u[i] + qc * v[i] + rc;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = pc * u[i] + rc;
  }
}

// The [N, C, plane] view of X and the per-channel inputs read as float64 scratch rows.
struct ChannelView {
  int64_t N = 0, C = 0, plane = 0;
  int64_t count() const { return N * plane; }
};

StatusOr<ChannelView> ViewOf(const KernelContext& ctx, const Tensor& x, std::initializer_list<int> channel_inputs) {
  if (x.rank() < 2) return ctx.Fail("X must be [N, C, ...], got ", ShapeToString(x.shape()));
  ChannelView v;
  v.N = x.dim(0);
  v.C = x.dim(1);
  v.plane = v.N * v.C == 0 ? 0 : x.numel() / (v.N * v.C);
  for (int i : channel_inputs)
    if (ctx.input(i)->numel() != v.C)
      return ctx.Fail("input ", i, " has ", ctx.input(i)->numel(), " values, expected ", v.C, " (channels)");
  return v;
}

// Reads per-channel inputs into rows of a [count, C] float64 scratch tensor.
StatusOr<Tensor> ReadChannels(const KernelContext& ctx, const std::vector<int>& inputs, int64_t C, int64_t extra_rows) {
  TOB_ASSIGN_OR_RETURN(Tensor t,
                       ctx.AllocateScratch(DType::kFloat64, {static_cast<int64_t>(inputs.size()) + extra_rows, C}));
  double* d = t.data<double>();
  for (size_t k = 0; k < inputs.size(); ++k)
    for (int64_t c = 0; c < C; ++c) d[k * C + c] = ctx.input(inputs[k])->ElementAsDouble(c);
  return t;
}

Status StoreChannels(const KernelContext& ctx, const double* values, int64_t C, Tensor* out) {
  if (out == nullptr) return Status::OK();
  return DispatchFloat(ctx, out->dtype(), [&]<typename T>() -> Status {
    for (int64_t c = 0; c < C; ++c) out->data<T>()[c] = static_cast<T>(values[c]);
    return Status::OK();
  });
}

// Per-channel sums of per-plane (s1, s2) pairs, planes summed in image order.
void ReducePlanes(const double* plane_sums, const ChannelView& v, double* s1, double* s2) {
  for (int64_t c = 0; c < v.C; ++c) {
    s1[c] = 0;
    s2[c] = 0;
    for (int64_t n = 0; n < v.N; ++n) {
      s1[c] += plane_sums[2 * (n * v.C + c)];
      s2[c] += plane_sums[2 * (n * v.C + c) + 1];
    }
  }
}

class BatchNormInternalKernel final : public OpKernel {
 public:
  BatchNormInternalKernel(const Node& node, float epsilon, float momentum, bool training)
      : OpKernel(node), epsilon_(epsilon), momentum_(momentum), training_(training) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float epsilon = 1e-5f, momentum = 0.9f;
    int64_t training_mode = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-5f));
    TOB_RETURN_IF_ERROR(node.GetAttr("momentum", &momentum, 0.9f));
    TOB_RETURN_IF_ERROR(node.GetAttr("training_mode", &training_mode, int64_t{0}));
    if (epsilon < 0) return InvalidModel(node.Describe(), ": epsilon must be non-negative, got ", epsilon);
    return MakeKernel<BatchNormInternalKernel>(node, epsilon, momentum, training_mode != 0);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(ChannelView v, ViewOf(ctx, x, {1, 2, 3, 4}));
    const int64_t C = v.C;
    // Rows: scale, bias, input_mean, input_var, then mean, var, inv_std, running_mean, running_var.
    TOB_ASSIGN_OR_RETURN(Tensor rows_t, ReadChannels(ctx, {1, 2, 3, 4}, C, 5));
    double* rows = rows_t.data<double>();
    const double *scale = rows, *bias = rows + C, *in_mean = rows + 2 * C, *in_var = rows + 3 * C;
    double *mean = rows + 4 * C, *var = rows + 5 * C, *inv_std = rows + 6 * C;
    double *run_mean = rows + 7 * C, *run_var = rows + 8 * C;
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      const T* xp = x.data<T>();
      if (training_ && v.count() > 0) {
        TOB_ASSIGN_OR_RETURN(Tensor partial_t, ctx.AllocateScratch(DType::kFloat64, {v.N * C, 2}));
        double* partial = partial_t.data<double>();
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, v.plane));
        // Pass 1: sums. Pass 2: squared deviations from the channel mean (no cancellation).
        for (bool square : {false, true}) {
          ParallelFor(ctx.thread_pool(), v.N * C, grain, [&](int64_t b, int64_t e) {
            for (int64_t p = b; p < e; ++p) {
              const T* plane = xp + p * v.plane;
              partial[2 * p] = partial[2 * p + 1] = 0;
              PlanePairSums(plane, plane, v.plane, square ? mean[p % C] : 0.0, square, &partial[2 * p],
                            &partial[2 * p + 1]);
            }
          });
          double* first = square ? run_mean : mean;  // run_mean is free scratch until the end
          ReducePlanes(partial, v, first, var);
          if (!square) {
            for (int64_t c = 0; c < C; ++c) mean[c] /= static_cast<double>(v.count());
          } else {
            for (int64_t c = 0; c < C; ++c) var[c] /= static_cast<double>(v.count());
          }
        }
      } else {
        std::copy(in_mean, in_mean + C, mean);
        std::copy(in_var, in_var + C, var);
      }
      for (int64_t c = 0; c < C; ++c) {
        inv_std[c] = 1.0 / std::sqrt(var[c] + static_cast<double>(epsilon_));
        if (training_) {
          const double m = static_cast<double>(v.count());
          const double unbiased = m > 1 ? var[c] * m / (m - 1) : var[c];
          run_mean[c] = momentum_ * in_mean[c] + (1.0 - momentum_) * mean[c];
          run_var[c] = momentum_ * in_var[c] + (1.0 - momentum_) * unbiased;
        } else {
          run_mean[c] = in_mean[c];
          run_var[c] = in_var[c];
        }
      }
      T* yp = y.data<T>();
      ParallelFor(ctx.thread_pool(), v.N * C, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, v.plane)),
                  [&](int64_t b, int64_t e) {
                    for (int64_t p = b; p < e; ++p) {
                      const int64_t c = p % C;
                      const double a = scale[c] * inv_std[c];
                      PlaneAffine<T>(xp + p * v.plane, nullptr, v.plane, a, 0.0, bias[c] - mean[c] * a,
                                     yp + p * v.plane);
                    }
                  });
      TOB_RETURN_IF_ERROR(StoreChannels(ctx, run_mean, C, ctx.output(1)));
      TOB_RETURN_IF_ERROR(StoreChannels(ctx, run_var, C, ctx.output(2)));
      TOB_RETURN_IF_ERROR(StoreChannels(ctx, mean, C, ctx.output(3)));
      return StoreChannels(ctx, inv_std, C, ctx.output(4));
    });
  }

 private:
  float epsilon_, momentum_;
  bool training_;
};

class BatchNormGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  // epsilon is part of onnxruntime's signature; saved_inv_std already includes it.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float epsilon = 1e-5f;
    TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-5f));
    return MakeKernel<BatchNormGradKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype())
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " and X ", ShapeToString(x.shape()),
                      " must have one shape and dtype");
    TOB_ASSIGN_OR_RETURN(ChannelView v, ViewOf(ctx, x, {2, 3, 4}));
    const int64_t C = v.C;
    // Rows: scale, saved_mean, saved_inv_std, then dBias, dScale (sum of dY * (x - mean)).
    TOB_ASSIGN_OR_RETURN(Tensor rows_t, ReadChannels(ctx, {2, 3, 4}, C, 2));
    double* rows = rows_t.data<double>();
    const double *scale = rows, *mean = rows + C, *inv_std = rows + 2 * C;
    double *dbias = rows + 3 * C, *dscale = rows + 4 * C;
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      const T* dyp = dy.data<T>();
      const T* xp = x.data<T>();
      TOB_ASSIGN_OR_RETURN(Tensor partial_t, ctx.AllocateScratch(DType::kFloat64, {std::max<int64_t>(1, v.N * C), 2}));
      double* partial = partial_t.data<double>();
      const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, v.plane));
      ParallelFor(ctx.thread_pool(), v.N * C, grain, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          partial[2 * p] = partial[2 * p + 1] = 0;
          PlanePairSums(dyp + p * v.plane, xp + p * v.plane, v.plane, mean[p % C], false, &partial[2 * p],
                        &partial[2 * p + 1]);
        }
      });
      ReducePlanes(partial, v, dbias, dscale);
      for (int64_t c = 0; c < C; ++c) dscale[c] *= inv_std[c];
      if (Tensor* dx = ctx.output(0); dx != nullptr && v.count() > 0) {
        const double inv_m = 1.0 / static_cast<double>(v.count());
        T* dxp = dx->data<T>();
        // dX = k (dY - dBias / M) - k inv_std (dScale / M) (x - mean), k = scale * inv_std.
        ParallelFor(ctx.thread_pool(), v.N * C, grain, [&](int64_t b, int64_t e) {
          for (int64_t p = b; p < e; ++p) {
            const int64_t c = p % C;
            const double k = scale[c] * inv_std[c];
            const double q = -k * inv_std[c] * dscale[c] * inv_m;
            const double r = -k * dbias[c] * inv_m - q * mean[c];
            PlaneAffine<T>(dyp + p * v.plane, xp + p * v.plane, v.plane, k, q, r, dxp + p * v.plane);
          }
        });
      }
      TOB_RETURN_IF_ERROR(StoreChannels(ctx, dscale, C, ctx.output(1)));
      return StoreChannels(ctx, dbias, C, ctx.output(2));
    });
  }
};

}  // namespace

void RegisterCpuBatchNormTrainingKernels(KernelRegistry& registry) {
  const auto& f = FloatTypes();
  registry.Register(Def("BatchNormInternal")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0}, f)
                        .Constraint("T1", {1, 2}, f)
                        .Constraint("T2", {3, 4}, f)
                        .Kernel<BatchNormInternalKernel>());
  registry.Register(Def("BatchNormalizationGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1}, f)
                        .Constraint("T1", {2}, f)
                        .Constraint("T2", {3, 4}, f)
                        .SkipsUnusedOutputs()
                        .Kernel<BatchNormGradKernel>());
}

}  // namespace tob
