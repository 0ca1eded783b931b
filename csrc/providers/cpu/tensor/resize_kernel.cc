// Resize (opset 11 and later) and Upsample (7-9, Resize's predecessor: asymmetric coordinates,
// nearest rounding down, scales only): nearest, linear and cubic interpolation, every
// coordinate_transformation_mode, antialiased downsampling, exclude_outside, tf_crop_and_resize's
// roi and extrapolation_value, axes and keep_aspect_ratio_policy (ops/tensor_resize_attributes.h).
//
// Every mode is separable: one axis at a time, each output position is a weighted sum of a few
// input positions along that axis ("taps"). The taps and weights of an axis depend only on the
// output index, so they are computed once per axis (in float64, with the arithmetic of onnx's
// reference, whose rounding decides ties in nearest mode) and applied to every row. Values are
// carried in float64 between axes and rounded to the output type once, as the reference does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/tensor_resize_attributes.h"

namespace tob {

namespace {

// Taps of one axis: for output position y, input indices index[y * n + k] (clamped into the
// input) with weights weight[y * n + k], or the extrapolation value when extrapolated[y].
struct AxisTaps {
  int64_t n = 0;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<char> extrapolated;
};

// Source coordinate of output index y along an axis of `in` inputs resized to `out` by `scale`.
double SourceCoordinate(const ResizeAttributes& a, double y, double scale, int64_t in, int64_t out, double roi_start,
                        double roi_end, bool* extrapolated) {
  const double in_width = static_cast<double>(in);
  const double out_width = scale * in_width;  // the real-valued output size
  *extrapolated = false;
  switch (a.coordinates) {
    case ResizeCoordinates::kAlignCorners: return out_width == 1 ? 0.0 : y * (in_width - 1) / (out_width - 1);
    case ResizeCoordinates::kAsymmetric: return y / scale;
    case ResizeCoordinates::kTfHalfPixelForNn: return (y + 0.5) / scale;
    case ResizeCoordinates::kPytorchHalfPixel: return out_width == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    case ResizeCoordinates::kHalfPixel: return (y + 0.5) / scale - 0.5;
    case ResizeCoordinates::kHalfPixelSymmetric: {
      const double adjustment = static_cast<double>(out) / out_width;
      const double offset = in_width / 2 * (1 - adjustment);
      return offset + (y + 0.5) / scale - 0.5;
    }
    case ResizeCoordinates::kTfCropAndResize: {
      double x = out_width == 1 ? (roi_end - roi_start) * (in_width - 1) / 2
                                : y * (roi_end - roi_start) * (in_width - 1) / (out_width - 1);
      x += roi_start * (in_width - 1);
      *extrapolated = x < 0 || x > in_width - 1;
      return x;
    }
  }
  return 0.0;
}

// Keys' cubic convolution kernel with parameter A at distance |x|.
double CubicWeight(double x, double A) {
  x = std::abs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0.0;
}

// Weights of the taps for fractional position `ratio` in (0, 1] (1 when the source coordinate is
// an integer): tap k sits at floor-ish(x) + start + k, see NeighbourStart.
std::vector<double> TapWeights(const ResizeAttributes& a, double ratio, double scale) {
  switch (a.mode) {
    case ResizeMode::kNearest: {
      if (ratio == std::floor(ratio)) return {0.0, 1.0};
      bool take_upper = false;
      switch (a.nearest) {
        case ResizeNearest::kRoundPreferFloor: take_upper = ratio > 0.5; break;
        case ResizeNearest::kRoundPreferCeil: take_upper = ratio >= 0.5; break;
        case ResizeNearest::kFloor: take_upper = false; break;
        case ResizeNearest::kCeil: take_upper = true; break;
      }
      return take_upper ? std::vector<double>{0.0, 1.0} : std::vector<double>{1.0, 0.0};
    }
    case ResizeMode::kLinear: {
      if (!a.antialias) return {1 - ratio, ratio};
      // The triangle filter stretched by 1/scale when downsampling.
      const double s = std::min(scale, 1.0);
      const int64_t start = static_cast<int64_t>(std::floor(-1 / s)) + 1;
      const int64_t footprint = 2 - 2 * start;
      std::vector<double> w(static_cast<size_t>(footprint));
      double sum = 0;
      for (int64_t k = 0; k < footprint; ++k) {
        const double arg = (static_cast<double>(start + k) - ratio) * s;
        w[k] = std::clamp(1 - std::abs(arg), 0.0, 1.0);
        sum += w[k];
      }
      for (double& v : w) v /= sum;
      return w;
    }
    case ResizeMode::kCubic: {
      const double A = a.cubic_coeff_a;
      if (!a.antialias) {
        return {CubicWeight(ratio + 1, A), CubicWeight(ratio, A), CubicWeight(1 - ratio, A), CubicWeight(2 - ratio, A)};
      }
      const double s = std::min(scale, 1.0);
      const int64_t start = static_cast<int64_t>(std::floor(-2 / s)) + 1;
      const int64_t end = 2 - start;
      std::vector<double> w;
      double sum = 0;
      for (int64_t i = start; i < end; ++i) {
        w.push_back(CubicWeight(s * (static_cast<double>(i) - ratio), A));
        sum += w.back();
      }
      for (double& v : w) v /= sum;
      return w;
    }
  }
  return {};
}

// Index of the first of n taps around source coordinate x: the n input positions nearest to x,
// ties going to the lower one (the reference pads the input by ceil(n / 2) on both sides and
// picks neighbours in the padded array; the arithmetic is kept so its rounding is the same).
int64_t NeighbourStart(double x, int64_t n) {
  const int64_t pad = (n + 1) / 2;
  const double padded = x + static_cast<double>(pad);
  const double p = std::floor(padded);
  const double frac = padded - p;
  int64_t offset;
  if (n % 2 == 0) offset = frac == 0 ? -(n / 2) : -(n / 2) + 1;
  else offset = frac <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1;
  return static_cast<int64_t>(p) + offset - pad;
}

AxisTaps ComputeTaps(const ResizeAttributes& a, const ResizePlan& plan, size_t axis, int64_t in) {
  AxisTaps t;
  const int64_t out = plan.output[axis];
  const double scale = plan.scales[axis];
  t.extrapolated.assign(static_cast<size_t>(out), 0);
  for (int64_t y = 0; y < out; ++y) {
    bool extrapolated = false;
    const double x = SourceCoordinate(a, static_cast<double>(y), scale, in, out, plan.roi_start[axis],
                                      plan.roi_end[axis], &extrapolated);
    const double x_floor = std::floor(x);
    const double ratio = x == x_floor ? 1.0 : x - x_floor;
    std::vector<double> w = TapWeights(a, ratio, scale);
    if (y == 0) {
      t.n = static_cast<int64_t>(w.size());
      t.index.resize(static_cast<size_t>(out * t.n));
      t.weight.resize(static_cast<size_t>(out * t.n));
    }
    const int64_t start = NeighbourStart(x, t.n);
    if (a.exclude_outside) {
      double sum = 0;
      for (int64_t k = 0; k < t.n; ++k) {
        const int64_t i = start + k;
        if (i < 0 || i >= in) w[k] = 0;
        sum += w[k];
      }
      if (sum != 0)
        for (double& v : w) v /= sum;
    }
    for (int64_t k = 0; k < t.n; ++k) {
      t.index[y * t.n + k] = std::clamp<int64_t>(start + k, 0, in - 1);
      t.weight[y * t.n + k] = w[k];
    }
    t.extrapolated[y] = extrapolated;
  }
  return t;
}

// Whether an axis is left as it is (the reference skips such axes; computing them would give
// the same values up to rounding).
bool IsIdentityAxis(const ResizePlan& plan, size_t axis, int64_t in) {
  const double s = plan.scales[axis];
  return std::abs(s - 1.0) <= 1e-9 * std::max(1.0, std::abs(s)) && plan.output[axis] == in &&
         plan.roi_start[axis] == 0.0 && plan.roi_end[axis] == 1.0;
}

// Interpolates `src` ([outer, in, inner]) along its middle axis into `dst` ([outer, out, inner]).
void ResizeAxis(ThreadPool* pool, const AxisTaps& t, double extrapolation_value, const double* src, double* dst,
                int64_t outer, int64_t in, int64_t out, int64_t inner) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, inner * t.n));
  ParallelFor(pool, outer * out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t o = row / out, y = row % out;
      double* d = dst + row * inner;
      if (t.extrapolated[y]) {
        std::fill(d, d + inner, extrapolation_value);
        continue;
      }
      std::fill(d, d + inner, 0.0);
      for (int64_t k = 0; k < t.n; ++k) {
        const double w = t.weight[y * t.n + k];
        if (w == 0) continue;
        const double* s = src + (o * in + t.index[y * t.n + k]) * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] += w * s[i];
      }
    }
  });
}

template <typename T>
constexpr double LargestFinite() {
  if constexpr (std::is_same_v<T, Float16>) return 65504.0;
  else if constexpr (std::is_same_v<T, BFloat16>) return 3.3895313892515355e38;
  else return static_cast<double>(std::numeric_limits<T>::max());
}

// float64 -> T as the reference's saturate_cast: integers round half to even and saturate,
// floats saturate at their largest finite value.
template <typename T>
T NarrowSaturated(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (v != v) return T(0);
    v = std::nearbyint(v);
    v = std::clamp(v, static_cast<double>(std::numeric_limits<T>::lowest()),
                   static_cast<double>(std::numeric_limits<T>::max()));
    return static_cast<T>(v);
  } else {
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr double hi = LargestFinite<T>();
    if (v > hi) v = hi;
    if (v < -hi) v = -hi;
    return static_cast<T>(static_cast<F>(v));
  }
}

template <typename T>
double Widen(T v) {
  if constexpr (kIs16BitFloat<T>) return static_cast<double>(static_cast<float>(v));
  else return static_cast<double>(v);
}

// How a node's inputs map to Resize's (roi, scales, sizes).
enum class ResizeInputs { kResize, kUpsampleScalesInput, kUpsampleScalesAttribute };

class ResizeKernel final : public OpKernel {
 public:
  ResizeKernel(const Node& node, ResizeAttributes attrs, ResizeInputs inputs, Tensor attribute_scales)
      : OpKernel(node), attrs_(std::move(attrs)), inputs_(inputs), attribute_scales_(std::move(attribute_scales)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, int opset) {
    TOB_ASSIGN_OR_RETURN(ResizeAttributes attrs, ResizeAttributes::Read(node, opset));
    return MakeKernel<ResizeKernel>(node, std::move(attrs), ResizeInputs::kResize, Tensor());
  }

  static StatusOr<std::unique_ptr<OpKernel>> CreateUpsample(const Node& node, int opset) {
    TOB_ASSIGN_OR_RETURN(ResizeAttributes attrs, ResizeAttributes::ReadUpsample(node));
    if (opset >= 9)
      return MakeKernel<ResizeKernel>(node, std::move(attrs), ResizeInputs::kUpsampleScalesInput, Tensor());
    std::vector<float> scales;
    TOB_RETURN_IF_ERROR(node.GetAttr("scales", &scales));
    Tensor t = Tensor::FromVector<float>(scales, {static_cast<int64_t>(scales.size())});
    return MakeKernel<ResizeKernel>(node, std::move(attrs), ResizeInputs::kUpsampleScalesAttribute, std::move(t));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    std::vector<int64_t> dims(x.shape().begin(), x.shape().end());
    const Tensor* roi = inputs_ == ResizeInputs::kResize ? ctx.input(1) : nullptr;
    const Tensor* scales = inputs_ == ResizeInputs::kResize                ? ctx.input(2)
                           : inputs_ == ResizeInputs::kUpsampleScalesInput ? ctx.input(1)
                                                                           : &attribute_scales_;
    const Tensor* sizes = inputs_ == ResizeInputs::kResize ? ctx.input(3) : nullptr;
    TOB_ASSIGN_OR_RETURN(ResizePlan plan, PlanResize(node(), attrs_, dims, roi, scales, sizes));
    if (Shape(plan.output.begin(), plan.output.end()) != y.shape())
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from the planned ",
                      ShapeToString(Shape(plan.output.begin(), plan.output.end())));
    if (y.numel() == 0) return Status::OK();
    if (x.numel() == 0)
      return ctx.Fail("cannot resize an empty input ", ShapeToString(x.shape()), " to a non-empty output");
    Status status;
    bool known = DispatchDType<float, double, Float16, BFloat16, int8_t, uint8_t, int32_t, int64_t>(
        x.dtype(), [&]<typename T>() { status = Run<T>(ctx, x, plan, &y); });
    if (!known) return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    return status;
  }

 private:
  template <typename T>
  Status Run(KernelContext& ctx, const Tensor& x, const ResizePlan& plan, Tensor* y) const {
    std::vector<int64_t> shape(x.shape().begin(), x.shape().end());
    TOB_ASSIGN_OR_RETURN(Tensor current, ctx.AllocateScratch(DType::kFloat64, x.shape()));
    {
      const T* src = x.data<T>();
      double* dst = current.data<double>();
      ParallelFor(ctx.thread_pool(), x.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dst[i] = Widen(src[i]);
      });
    }
    for (size_t axis = 0; axis < shape.size(); ++axis) {
      const int64_t in = shape[axis];
      if (IsIdentityAxis(plan, axis, in)) continue;
      const AxisTaps taps = ComputeTaps(attrs_, plan, axis, in);
      int64_t outer = 1, inner = 1;
      for (size_t d = 0; d < axis; ++d) outer *= shape[d];
      for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
      shape[axis] = plan.output[axis];
      TOB_ASSIGN_OR_RETURN(Tensor next, ctx.AllocateScratch(DType::kFloat64, Shape(shape.begin(), shape.end())));
      ResizeAxis(ctx.thread_pool(), taps, attrs_.extrapolation_value, current.data<double>(), next.data<double>(),
                 outer, in, plan.output[axis], inner);
      current = std::move(next);
    }
    const double* src = current.data<double>();
    T* dst = y->data<T>();
    ParallelFor(ctx.thread_pool(), y->numel(), 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = NarrowSaturated<T>(src[i]);
    });
    return Status::OK();
  }

  ResizeAttributes attrs_;
  ResizeInputs inputs_;
  Tensor attribute_scales_;  // Upsample-7's 'scales' attribute
};

}  // namespace

void RegisterCpuResizeKernels(KernelRegistry& registry) {
  const std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                    DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64};
  // The ranges differ in which attributes exist (13 dropped tf_half_pixel_for_nn, 18 added
  // antialias / axes / keep_aspect_ratio_policy, 19 half_pixel_symmetric); the arithmetic is one.
  for (auto [since, end] : {std::pair{11, 12}, std::pair{13, 17}, std::pair{18, 18}, std::pair{19, kMaxOpset}}) {
    registry.Register(Def("Resize")
                          .Versions(since, end)
                          .Constraint("T1", {0}, types)
                          .Constraint("T2", {1}, {DType::kFloat32, DType::kFloat64, DType::kFloat16})
                          .Constraint("tensor(float)", {2}, {DType::kFloat32})
                          .Constraint("tensor(int64)", {3}, {DType::kInt64})
                          .Factory([opset = since](const Node& n) { return ResizeKernel::Create(n, opset); }));
  }
  registry.Register(Def("Upsample").Versions(7, 8).Constraint("T", {0}, types).Factory([](const Node& n) {
    return ResizeKernel::CreateUpsample(n, 7);
  }));
  registry.Register(Def("Upsample")
                        .Versions(9, 9)
                        .Constraint("T", {0}, types)
                        .Constraint("tensor(float)", {1}, {DType::kFloat32})
                        .Factory([](const Node& n) { return ResizeKernel::CreateUpsample(n, 9); }));
}

}  // namespace tob
