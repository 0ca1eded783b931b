// The older normalizations of the ONNX standard: LpNormalization (x over its L1 or L2 norm along
// one axis; an all-zero slice stays zero), MeanVarianceNormalization ((x - mean) / (std + 1e-9) over a set of axes, the
// op's function body) and LRN (x over (bias + alpha / size * the sum of squares of `size` neighbouring channels) ^
// beta). Each is computed in float64 from the input's values and rounded once to its type, as the ONNX reference
// computes them with numpy.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
  else return static_cast<double>(v);
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

int64_t NormalizedAxis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

class LpNormalizationKernel final : public OpKernel {
 public:
  LpNormalizationKernel(const Node& node, int64_t axis, int64_t p) : OpKernel(node), axis_(axis), p_(p) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = -1, p = 2;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, int64_t{-1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("p", &p, int64_t{2}));
    if (p != 1 && p != 2) return InvalidModel(node.Describe(), ": attribute 'p' must be 1 or 2, got ", p);
    return MakeKernel<LpNormalizationKernel>(node, axis, p);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t axis = NormalizedAxis(axis_, x.rank());
    if (axis < 0 || axis >= x.rank()) return ctx.Fail("axis ", axis_, " is out of range for rank ", x.rank());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    const int64_t n = x.dim(axis);
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const int64_t base = o * n * inner + i;
          double norm = 0.0;
          for (int64_t k = 0; k < n; ++k) {
            const double v = ToDouble(in[base + k * inner]);
            norm += p_ == 1 ? std::fabs(v) : v * v;
          }
          if (p_ == 2) norm = std::sqrt(norm);
          if (norm == 0.0) norm = 1.0;  // an all-zero slice stays zero (the reference's rule), not NaN
          for (int64_t k = 0; k < n; ++k) out[base + k * inner] = FromDouble<T>(ToDouble(in[base + k * inner]) / norm);
        }
    });
    return known ? Status::OK() : ctx.Fail("unsupported type ", DTypeName(x.dtype()));
  }

 private:
  int64_t axis_, p_;
};

class MeanVarianceNormalizationKernel final : public OpKernel {
 public:
  MeanVarianceNormalizationKernel(const Node& node, std::vector<int64_t> axes)
      : OpKernel(node), axes_(std::move(axes)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::vector<int64_t> axes;
    TOB_RETURN_IF_ERROR(node.GetAttr("axes", &axes, std::vector<int64_t>{0, 2, 3}));
    return MakeKernel<MeanVarianceNormalizationKernel>(node, std::move(axes));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t rank = x.rank();
    std::vector<bool> reduced(static_cast<size_t>(rank), false);
    for (int64_t a : axes_) {
      const int64_t axis = NormalizedAxis(a, rank);
      if (axis < 0 || axis >= rank) return ctx.Fail("axis ", a, " is out of range for rank ", rank);
      reduced[axis] = true;
    }
    // Each element's group: its coordinates along the kept axes, linearised.
    const int64_t total = x.numel();
    std::vector<int64_t> group(static_cast<size_t>(total));
    int64_t groups = 1;
    for (int64_t d = 0; d < rank; ++d)
      if (!reduced[d]) groups *= x.dim(d);
    for (int64_t e = 0; e < total; ++e) {
      int64_t rest = e, g = 0, scale = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t c = rest % x.dim(d);
        rest /= x.dim(d);
        if (!reduced[d]) {
          g += c * scale;
          scale *= x.dim(d);
        }
      }
      group[e] = g;
    }
    std::vector<double> sum(static_cast<size_t>(groups), 0.0), squares(static_cast<size_t>(groups), 0.0);
    const double count = groups == 0 ? 1.0 : static_cast<double>(total) / static_cast<double>(groups);
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      for (int64_t e = 0; e < total; ++e) {
        const double v = ToDouble(in[e]);
        sum[group[e]] += v;
        squares[group[e]] += v * v;
      }
      for (int64_t e = 0; e < total; ++e) {
        const double mean = sum[group[e]] / count;
        const double variance = squares[group[e]] / count - mean * mean;
        out[e] = FromDouble<T>((ToDouble(in[e]) - mean) / (std::sqrt(variance) + 1e-9));
      }
    });
    return known ? Status::OK() : ctx.Fail("unsupported type ", DTypeName(x.dtype()));
  }

 private:
  std::vector<int64_t> axes_;
};

class LrnKernel final : public OpKernel {
 public:
  LrnKernel(const Node& node, float alpha, float beta, float bias, int64_t size)
      : OpKernel(node), alpha_(alpha), beta_(beta), bias_(bias), size_(size) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
    int64_t size = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &alpha, 1e-4f));
    TOB_RETURN_IF_ERROR(node.GetAttr("beta", &beta, 0.75f));
    TOB_RETURN_IF_ERROR(node.GetAttr("bias", &bias, 1.0f));
    TOB_RETURN_IF_ERROR(node.GetAttr("size", &size));
    if (size < 1) return InvalidModel(node.Describe(), ": attribute 'size' must be >= 1, got ", size);
    return MakeKernel<LrnKernel>(node, alpha, beta, bias, size);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() < 2) return ctx.Fail("X must be [N, C, ...], got ", ShapeToString(x.shape()));
    const int64_t batches = x.dim(0), channels = x.dim(1);
    const int64_t spatial = channels == 0 || batches == 0 ? 0 : x.numel() / (batches * channels);
    const int64_t before = (size_ - 1) / 2, after = size_ - 1 - before;  // floor and ceil of (size-1)/2
    const double scale = static_cast<double>(alpha_) / static_cast<double>(size_);
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      for (int64_t b = 0; b < batches; ++b)
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t s = 0; s < spatial; ++s) {
            double squares = 0.0;
            for (int64_t k = std::max<int64_t>(0, c - before); k <= std::min(channels - 1, c + after); ++k) {
              const double v = ToDouble(in[(b * channels + k) * spatial + s]);
              squares += v * v;
            }
            const int64_t at = (b * channels + c) * spatial + s;
            out[at] = FromDouble<T>(ToDouble(in[at]) / std::pow(bias_ + scale * squares, static_cast<double>(beta_)));
          }
    });
    return known ? Status::OK() : ctx.Fail("unsupported type ", DTypeName(x.dtype()));
  }

 private:
  float alpha_, beta_, bias_;
  int64_t size_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuClassicNormKernels(KernelRegistry& registry) {
  const std::vector<DType> f3{DType::kFloat32, DType::kFloat64, DType::kFloat16};
  const std::vector<DType> f4{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  registry.Register(
      Def("LpNormalization").Versions(1, 21).Constraint("T", {0}, f3).Kernel<cpu::LpNormalizationKernel>());
  registry.Register(Def("LpNormalization").Versions(22).Constraint("T", {0}, f4).Kernel<cpu::LpNormalizationKernel>());
  registry.Register(Def("MeanVarianceNormalization")
                        .Versions(9, 12)
                        .Constraint("T", {0}, f3)
                        .Kernel<cpu::MeanVarianceNormalizationKernel>());
  registry.Register(Def("MeanVarianceNormalization")
                        .Versions(13)
                        .Constraint("T", {0}, f4)
                        .Kernel<cpu::MeanVarianceNormalizationKernel>());
  registry.Register(Def("LRN").Versions(1, 12).Constraint("T", {0}, f3).Kernel<cpu::LrnKernel>());
  registry.Register(Def("LRN").Versions(13).Constraint("T", {0}, f4).Kernel<cpu::LrnKernel>());
}

}  // namespace tob
