// LayerNormalization (opset 17, and com.microsoft's for older opsets),
// com.microsoft::SkipLayerNormalization and RMSNormalization (opset 23, and ai.tob's with the
// optional InvStdDev output that optimizer/rms_norm_fusion.cc emits). Rows are independent
// and split across the pool; each LayerNorm row is normalised with a two-pass mean/variance (no
// cancellation) using the vectorised reductions of vec_math.h; an RMSNorm row sums its squares
// in float64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/reduction/reduce_loops.h"

namespace tob {

namespace {

// Normalises one row in place or into y: y = (x - mean) * inv_std * scale + bias.
template <typename T>
void NormalizeRow(const T* x, int64_t D, const T* scale, const T* bias, double epsilon, T* y, double* mean_out,
                  double* inv_std_out) {
  const T mean = vec::Sum(x, D) / static_cast<T>(D);
  const T var = vec::SquaredDeviationSum(x, D, mean) / static_cast<T>(D);
  const T inv_std = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var) + epsilon));
  if (bias != nullptr) {
    for (int64_t i = 0; i < D; ++i) y[i] = (x[i] - mean) * inv_std * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < D; ++i) y[i] = (x[i] - mean) * inv_std * scale[i];
  }
  *mean_out = mean;
  *inv_std_out = inv_std;
}

// `t` (broadcastable to the trailing `D`-element block `trailing`) expanded to D contiguous
// values of type T in scratch; the tensor itself when it already has D elements of type T.
template <typename T>
StatusOr<Tensor> ExpandTrailing(const KernelContext& ctx, const Tensor& t, const Shape& trailing) {
  const int64_t D = NumElements(trailing);
  if (t.numel() == D && t.dtype() == DTypeOf<T>()) return t;
  const Shape& ts = t.shape();
  if (ts.size() > trailing.size()) return ctx.Fail("scale/bias ", ShapeToString(ts), " has too many dims");
  std::vector<int64_t> src_strides(trailing.size(), 0);
  for (int64_t i = static_cast<int64_t>(ts.size()) - 1, s = 1; i >= 0; --i) {
    const size_t d = trailing.size() - ts.size() + static_cast<size_t>(i);
    if (ts[i] != 1 && ts[i] != trailing[d])
      return ctx.Fail("scale/bias ", ShapeToString(ts), " does not broadcast to ", ShapeToString(trailing));
    src_strides[d] = ts[i] == 1 ? 0 : s;
    s *= ts[i];
  }
  TOB_ASSIGN_OR_RETURN(Tensor out, ctx.AllocateScratch(DTypeOf<T>(), {D}));
  std::vector<int64_t> index(trailing.size(), 0);
  for (int64_t i = 0; i < D; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < trailing.size(); ++d) off += index[d] * src_strides[d];
    out.data<T>()[i] = static_cast<T>(t.ElementAsDouble(off));
    for (int64_t d = static_cast<int64_t>(trailing.size()) - 1; d >= 0 && ++index[d] == trailing[d]; --d) index[d] = 0;
  }
  return out;
}

// Writes a per-row statistic into a float32/float64 output (nullptr: not requested).
struct StatOutput {
  Tensor* t = nullptr;
  void Set(int64_t row, double v) const {
    if (t == nullptr) return;
    if (t->dtype() == DType::kFloat64) t->data<double>()[row] = v;
    else t->data<float>()[row] = static_cast<float>(v);
  }
};

Status CheckStatOutput(const KernelContext& ctx, const Tensor* t, int64_t rows) {
  if (t == nullptr) return Status::OK();
  if (t->dtype() != DType::kFloat32 && t->dtype() != DType::kFloat64)
    return ctx.Fail("statistics outputs must be float32 or float64, got ", DTypeName(t->dtype()));
  if (t->numel() != rows) return ctx.Fail("statistics output must have ", rows, " elements");
  return Status::OK();
}

// LayerNormalization and RMSNormalization normalise over the dims from `axis` on: the rows and the
// row length D of `x` for a (possibly negative) axis attribute.
struct NormRows {
  Shape trailing;
  int64_t D = 0;
  int64_t rows = 0;
};

StatusOr<NormRows> SplitAtAxis(const KernelContext& ctx, const Tensor& x, int64_t axis_attr) {
  const int64_t axis = axis_attr < 0 ? axis_attr + x.rank() : axis_attr;
  if (axis < 0 || axis >= x.rank()) return ctx.Fail("axis ", axis_attr, " is out of range for rank ", x.rank());
  NormRows r;
  r.trailing = Shape(x.shape().begin() + axis, x.shape().end());
  r.D = NumElements(r.trailing);
  r.rows = r.D == 0 ? 0 : x.numel() / r.D;
  return r;
}

// The axis (default -1) and epsilon (default 1e-5) attributes both normalisations take.
Status ReadNormAttributes(const Node& node, int64_t* axis, float* epsilon) {
  TOB_RETURN_IF_ERROR(node.GetAttr("axis", axis, int64_t{-1}));
  return node.GetAttr("epsilon", epsilon, 1e-5f);
}

class LayerNormKernel final : public OpKernel {
 public:
  LayerNormKernel(const Node& node, int64_t axis, float epsilon) : OpKernel(node), axis_(axis), epsilon_(epsilon) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = -1;
    float epsilon = 1e-5f;
    TOB_RETURN_IF_ERROR(ReadNormAttributes(node, &axis, &epsilon));
    return MakeKernel<LayerNormKernel>(node, axis, epsilon);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(NormRows split, SplitAtAxis(ctx, x, axis_));
    const Shape& trailing = split.trailing;
    const int64_t D = split.D, rows = split.rows;
    StatOutput mean_out{ctx.output(1)}, inv_out{ctx.output(2)};
    TOB_RETURN_IF_ERROR(CheckStatOutput(ctx, mean_out.t, rows));
    TOB_RETURN_IF_ERROR(CheckStatOutput(ctx, inv_out.t, rows));
    if (rows == 0 || D == 0) return Status::OK();
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      using C = ComputeType<T>;
      TOB_ASSIGN_OR_RETURN(Tensor scale, ExpandTrailing<C>(ctx, *ctx.input(1), trailing));
      Tensor bias;
      if (ctx.input(2) != nullptr) {
        TOB_ASSIGN_OR_RETURN(bias, ExpandTrailing<C>(ctx, *ctx.input(2), trailing));
      }
      Tensor xc = x, yc = y;
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(xc, ToFloatScratch(ctx, x));
        TOB_ASSIGN_OR_RETURN(yc, ctx.AllocateScratch(DType::kFloat32, y.shape()));
      }
      const C* xp = xc.data<C>();
      C* yp = yc.data<C>();
      const C* sp = scale.data<C>();
      const C* bp = bias.defined() ? bias.data<C>() : nullptr;
      ParallelFor(ctx.thread_pool(), rows, std::max<int64_t>(1, 16384 / D), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          double mean, inv_std;
          NormalizeRow(xp + r * D, D, sp, bp, epsilon_, yp + r * D, &mean, &inv_std);
          mean_out.Set(r, mean);
          inv_out.Set(r, inv_std);
        }
      });
      if constexpr (kIs16BitFloat<T>) return FromFloatScratch(ctx, yc, &y);
      return Status::OK();
    });
  }

 private:
  int64_t axis_;
  float epsilon_;
};

class SkipLayerNormKernel final : public OpKernel {
 public:
  SkipLayerNormKernel(const Node& node, float epsilon) : OpKernel(node), epsilon_(epsilon) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float epsilon = 1e-12f;
    TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-12f));
    return MakeKernel<SkipLayerNormKernel>(node, epsilon);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& skip = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    Tensor* sum_out = ctx.output(3);
    if (x.rank() < 2) return ctx.Fail("input must be 2-D or 3-D");
    const int64_t D = x.dim(-1);
    const int64_t rows = D == 0 ? 0 : x.numel() / D;
    // skip is the input's shape or a suffix of it (leading 1s allowed): rows repeat cyclically.
    Shape skip_core = skip.shape();
    while (!skip_core.empty() && skip_core.front() == 1 && skip_core.size() > 1) skip_core.erase(skip_core.begin());
    if (skip_core.size() > x.shape().size() ||
        !std::equal(skip_core.begin(), skip_core.end(), x.shape().end() - skip_core.size()))
      return ctx.Fail("skip ", ShapeToString(skip.shape()), " does not broadcast to input ", ShapeToString(x.shape()));
    const int64_t skip_rows = D == 0 ? 1 : std::max<int64_t>(1, skip.numel() / D);
    for (int i = 2; i < 5; ++i)
      if (ctx.input(i) != nullptr && ctx.input(i)->numel() != D)
        return ctx.Fail("input ", i, " must have ", D, " values (hidden size)");
    StatOutput mean_out{ctx.output(1)}, inv_out{ctx.output(2)};
    TOB_RETURN_IF_ERROR(CheckStatOutput(ctx, mean_out.t, rows));
    TOB_RETURN_IF_ERROR(CheckStatOutput(ctx, inv_out.t, rows));
    if (rows == 0) return Status::OK();
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      using C = ComputeType<T>;
      const Shape hidden{D};
      TOB_ASSIGN_OR_RETURN(Tensor gamma, ExpandTrailing<C>(ctx, *ctx.input(2), hidden));
      Tensor beta, bias;
      if (ctx.input(3) != nullptr) {
        TOB_ASSIGN_OR_RETURN(beta, ExpandTrailing<C>(ctx, *ctx.input(3), hidden));
      }
      if (ctx.input(4) != nullptr) {
        TOB_ASSIGN_OR_RETURN(bias, ExpandTrailing<C>(ctx, *ctx.input(4), hidden));
      }
      Tensor xc = x, sc = skip, yc = y;
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(xc, ToFloatScratch(ctx, x));
        TOB_ASSIGN_OR_RETURN(sc, ToFloatScratch(ctx, skip));
        TOB_ASSIGN_OR_RETURN(yc, ctx.AllocateScratch(DType::kFloat32, y.shape()));
      }
      const C* xp = xc.data<C>();
      const C* skp = sc.data<C>();
      const C* gp = gamma.data<C>();
      const C* bp = beta.defined() ? beta.data<C>() : nullptr;
      const C* biasp = bias.defined() ? bias.data<C>() : nullptr;
      C* yp = yc.data<C>();
      ParallelFor(ctx.thread_pool(), rows, std::max<int64_t>(1, 16384 / D), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const C* xr = xp + r * D;
          const C* sr = skp + (r % skip_rows) * D;
          C* yr = yp + r * D;
          if (biasp != nullptr) {
            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] + sr[i] + biasp[i];
          } else {
            for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] + sr[i];
          }
          if (sum_out != nullptr) {
            if constexpr (kIs16BitFloat<T>) FromFloat(yr, sum_out->data<T>() + r * D, D);
            else std::memcpy(sum_out->data<T>() + r * D, yr, sizeof(T) * D);
          }
          double mean, inv_std;
          NormalizeRow(yr, D, gp, bp, epsilon_, yr, &mean, &inv_std);
          mean_out.Set(r, mean);
          inv_out.Set(r, inv_std);
        }
      });
      if constexpr (kIs16BitFloat<T>) return FromFloatScratch(ctx, yc, &y);
      return Status::OK();
    });
  }

 private:
  float epsilon_;
};

// ai.tob::RMSNormalization's row with X of a float32 compute type: the arithmetic of the chain it
// replaces (optimizer/rms_norm_fusion.cc), step by step, so that fusing changes no bit: the squares
// rounded to float32, summed in ReduceMean's order (ReduceContiguous), divided by D, eps added,
// 1 / sqrt, x * inv, rounded to V when V is 16-bit (the chain's Cast), times the scale.
template <typename T, typename V>
void ChainRmsRow(const T* x, int64_t D, const float* scale, float epsilon, float* squares, V* y, float* inv_out) {
  for (int64_t i = 0; i < D; ++i) {
    const auto v = static_cast<float>(x[i]);
    squares[i] = v * v;
  }
  const float sum = cpu::ReduceContiguous<cpu::Combine::kSum, cpu::Map::kIdentity, float, float>(squares, D, 0.f);
  const float inv = 1.0f / std::sqrt(sum / static_cast<float>(D) + epsilon);
  *inv_out = inv;
  for (int64_t i = 0; i < D; ++i) {
    float n = static_cast<float>(x[i]) * inv;
    if constexpr (kIs16BitFloat<V>) n = static_cast<float>(V(n));
    y[i] = static_cast<V>(n * scale[i]);
  }
}

// RMSNormalization: y = x / sqrt(mean(x^2 over the dims from axis) + epsilon) * scale. X (type T)
// and scale / Y (type V) may differ; 16-bit types compute in float32. ai.onnx's sums the squares in
// float64; ai.tob's (the optimizer's fused form) repeats the float32 chain it replaced (ChainRmsRow)
// and may return InvStdDev.
class RmsNormKernel final : public OpKernel {
 public:
  RmsNormKernel(const Node& node, int64_t axis, float epsilon)
      : OpKernel(node), axis_(axis), epsilon_(epsilon), chain_(node.domain() == kTobDomain) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = -1;
    float epsilon = 1e-5f;
    TOB_RETURN_IF_ERROR(ReadNormAttributes(node, &axis, &epsilon));
    return MakeKernel<RmsNormKernel>(node, axis, epsilon);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(NormRows split, SplitAtAxis(ctx, x, axis_));
    const Shape& trailing = split.trailing;
    const int64_t D = split.D, rows = split.rows;
    const StatOutput inv_out{ctx.output(1)};  // ai.tob's InvStdDev
    TOB_RETURN_IF_ERROR(CheckStatOutput(ctx, inv_out.t, rows));
    if (rows == 0) return Status::OK();
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      using C = ComputeType<T>;
      TOB_ASSIGN_OR_RETURN(Tensor scale, ExpandTrailing<C>(ctx, *ctx.input(1), trailing));
      return DispatchFloat(ctx, y.dtype(), [&]<typename V>() -> Status {
        const T* xp = x.data<T>();
        const C* sp = scale.data<C>();
        V* yp = y.data<V>();
        if constexpr (std::is_same_v<C, float>) {
          if (chain_) {
            ParallelFor(ctx.thread_pool(), rows, std::max<int64_t>(1, 16384 / D), [&](int64_t b, int64_t e) {
              std::vector<float> squares(static_cast<size_t>(D));
              for (int64_t r = b; r < e; ++r) {
                float inv = 0;
                ChainRmsRow(xp + r * D, D, sp, epsilon_, squares.data(), yp + r * D, &inv);
                inv_out.Set(r, inv);
              }
            });
            return Status::OK();
          }
        }
        ParallelFor(ctx.thread_pool(), rows, std::max<int64_t>(1, 16384 / D), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const T* xr = xp + r * D;
            double squares = 0;
            for (int64_t i = 0; i < D; ++i) {
              const double v = static_cast<C>(xr[i]);
              squares += v * v;
            }
            const double inv = 1.0 / std::sqrt(squares / static_cast<double>(D) + epsilon_);
            const C inv_rms = static_cast<C>(inv);
            inv_out.Set(r, inv);
            V* yr = yp + r * D;
            for (int64_t i = 0; i < D; ++i) yr[i] = static_cast<V>(static_cast<C>(xr[i]) * inv_rms * sp[i]);
          }
        });
        return Status::OK();
      });
    });
  }

 private:
  int64_t axis_;
  float epsilon_;
  bool chain_;
};

}  // namespace

void RegisterCpuLayerNormKernels(KernelRegistry& registry) {
  registry.Register(
      Def("LayerNormalization").Versions(17).Constraint("T", {0, 1, 2}, FloatTypes()).Kernel<LayerNormKernel>());
  registry.Register(Def("LayerNormalization")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2}, FloatTypes())
                        .Kernel<LayerNormKernel>());
  registry.Register(Def("SkipLayerNormalization")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2, 3, 4}, FloatTypes())
                        .Kernel<SkipLayerNormKernel>());
  registry.Register(Def("RMSNormalization")
                        .Versions(23)
                        .Constraint("T", {0}, FloatTypes())
                        .Constraint("V", {1}, FloatTypes())
                        .Kernel<RmsNormKernel>());
  // The optimizer's fused form (optimizer/rms_norm_fusion.cc), with the optional InvStdDev output.
  registry.Register(Def("RMSNormalization")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0}, FloatTypes())
                        .Constraint("V", {1}, FloatTypes())
                        .Kernel<RmsNormKernel>());
}

}  // namespace tob
