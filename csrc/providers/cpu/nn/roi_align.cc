// RoiAlign (opsets 10, 16, 22): each region of interest, in input coordinates times
// spatial_scale, is cut into output_height x output_width bins; each bin samples a grid of
// sampling_ratio^2 points (ceil(roi size / bins) per axis when 0) by bilinear interpolation and
// pools them by average or max. The arithmetic is onnx's reference (and onnxruntime's) to the
// letter: coordinate_transformation_mode "half_pixel" (opset 16's default) shifts by -0.5 and
// keeps malformed rois as they are, "output_half_pixel" (opset 10's only behaviour) forces rois to
// at least 1 x 1; a sample outside [-1, size] contributes 0; "max" takes the largest of each
// sample's four *weighted* corners. Coordinates, weights and sums are float64, each output rounded
// to the type once.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

template <typename T>
double Widen(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
  else return static_cast<double>(v);
}

template <typename T>
T Narrow(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

// One sample: its four corners (flat offsets into an H x W plane) and their weights.
struct Sample {
  int64_t pos[4] = {0, 0, 0, 0};
  double w[4] = {0, 0, 0, 0};
};

Sample BilinearSample(double y, double x, int64_t height, int64_t width) {
  Sample s;
  if (y < -1.0 || y > static_cast<double>(height) || x < -1.0 || x > static_cast<double>(width)) return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<double>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<double>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const double ly = y - static_cast<double>(y_low), lx = x - static_cast<double>(x_low);
  const double hy = 1.0 - ly, hx = 1.0 - lx;
  s.pos[0] = y_low * width + x_low;
  s.pos[1] = y_low * width + x_high;
  s.pos[2] = y_high * width + x_low;
  s.pos[3] = y_high * width + x_high;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

// The largest |roi coordinate| * spatial_scale with an adaptive sampling grid (sampling_ratio 0).
constexpr double kMaxRoiExtent = 1 << 20;

class RoiAlignKernel final : public OpKernel {
 public:
  RoiAlignKernel(const Node& node, bool half_pixel, bool max_mode, int64_t out_h, int64_t out_w, int64_t sampling_ratio,
                 float spatial_scale)
      : OpKernel(node),
        half_pixel_(half_pixel),
        max_mode_(max_mode),
        out_h_(out_h),
        out_w_(out_w),
        sampling_ratio_(sampling_ratio),
        spatial_scale_(spatial_scale) {}

  // half_pixel_default: the transformation without the attribute (opset 16: half_pixel; opset 10
  // has no attribute and behaves as output_half_pixel).
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool half_pixel_default) {
    std::string mode, transform;
    int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
    float spatial_scale = 1.0f;
    TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode, std::string("avg")));
    TOB_RETURN_IF_ERROR(node.GetAttr("coordinate_transformation_mode", &transform,
                                     std::string(half_pixel_default ? "half_pixel" : "output_half_pixel")));
    TOB_RETURN_IF_ERROR(node.GetAttr("output_height", &out_h, int64_t{1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("output_width", &out_w, int64_t{1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("sampling_ratio", &sampling_ratio, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("spatial_scale", &spatial_scale, 1.0f));
    if (mode != "avg" && mode != "max")
      return InvalidModel(node.Describe(), ": mode must be 'avg' or 'max', got '", mode, "'");
    if (transform != "half_pixel" && transform != "output_half_pixel")
      return InvalidModel(node.Describe(), ": coordinate_transformation_mode must be 'half_pixel' or ",
                          "'output_half_pixel', got '", transform, "'");
    if (out_h <= 0 || out_w <= 0 || sampling_ratio < 0)
      return InvalidModel(node.Describe(), ": output_height / output_width must be positive and sampling_ratio >= 0");
    return MakeKernel<RoiAlignKernel>(node, transform == "half_pixel", mode == "max", out_h, out_w, sampling_ratio,
                                      spatial_scale);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& rois = *ctx.input(1);
    const Tensor& batch = *ctx.input(2);
    Tensor& y = *ctx.output(0);
    const int64_t n = x.dim(0), channels = x.dim(1), height = x.dim(2), width = x.dim(3);
    const int64_t num_rois = rois.dim(0);
    const int64_t* batch_index = batch.data<int64_t>();
    for (int64_t r = 0; r < num_rois; ++r) {
      if (batch_index[r] < 0 || batch_index[r] >= n)
        return ctx.Fail("batch_indices[", r, "] = ", batch_index[r], " is outside [0, ", n, ")");
      // A non-finite corner has no sample position; an adaptive grid (sampling_ratio 0) follows
      // the roi's size, so a roi far larger than any image would ask for billions of samples.
      for (int k = 0; k < 4; ++k) {
        const double v = rois.ElementAsDouble(r * 4 + k);
        if (!std::isfinite(v)) return ctx.Fail("rois[", r, "] has a non-finite coordinate ", v);
        if (sampling_ratio_ == 0 && std::fabs(v) * spatial_scale_ > kMaxRoiExtent)
          return ctx.Fail("rois[", r, "] coordinate ", v, " times spatial_scale exceeds ", kMaxRoiExtent,
                          " (the adaptive sampling grid would be that large)");
      }
    }
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      const T* boxes = rois.data<T>();
      T* out = y.data<T>();
      ParallelFor(ctx.thread_pool(), num_rois, 1, [&](int64_t r0, int64_t r1) {
        std::vector<Sample> samples;
        for (int64_t r = r0; r < r1; ++r) {
          RoiSamples(boxes + r * 4, &samples, height, width);
          const int64_t per_bin = static_cast<int64_t>(samples.size()) / (out_h_ * out_w_);
          const double count = static_cast<double>(std::max<int64_t>(per_bin, 1));
          for (int64_t c = 0; c < channels; ++c) {
            const T* plane = in + (batch_index[r] * channels + c) * height * width;
            T* dst = out + (r * channels + c) * out_h_ * out_w_;
            for (int64_t bin = 0; bin < out_h_ * out_w_; ++bin) {
              double value = 0.0;
              for (int64_t k = 0; k < per_bin; ++k) {
                const Sample& s = samples[static_cast<size_t>(bin * per_bin + k)];
                if (max_mode_) {
                  double v = s.w[0] * Widen(plane[s.pos[0]]);
                  for (int q = 1; q < 4; ++q) v = std::max(v, s.w[q] * Widen(plane[s.pos[q]]));
                  value = k == 0 ? v : std::max(value, v);
                } else {
                  for (int q = 0; q < 4; ++q) value += s.w[q] * Widen(plane[s.pos[q]]);
                }
              }
              dst[bin] = Narrow<T>(max_mode_ ? value : value / count);
            }
          }
        }
      });
    });
    return known ? Status::OK() : ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
  }

 private:
  // The samples of every bin of one roi, bin by bin (row-major), each bin's grid row-major.
  template <typename T>
  void RoiSamples(const T* box, std::vector<Sample>* samples, int64_t height, int64_t width) const {
    const double offset = half_pixel_ ? 0.5 : 0.0;
    const double scale = static_cast<double>(spatial_scale_);
    const double start_w = Widen(box[0]) * scale - offset, start_h = Widen(box[1]) * scale - offset;
    const double end_w = Widen(box[2]) * scale - offset, end_h = Widen(box[3]) * scale - offset;
    double roi_w = end_w - start_w, roi_h = end_h - start_h;
    if (!half_pixel_) {  // malformed rois become 1 x 1
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    const double bin_h = roi_h / static_cast<double>(out_h_), bin_w = roi_w / static_cast<double>(out_w_);
    const int64_t grid_h = sampling_ratio_ > 0 ? sampling_ratio_ : static_cast<int64_t>(std::ceil(roi_h / out_h_));
    const int64_t grid_w = sampling_ratio_ > 0 ? sampling_ratio_ : static_cast<int64_t>(std::ceil(roi_w / out_w_));
    samples->clear();
    for (int64_t ph = 0; ph < out_h_; ++ph)
      for (int64_t pw = 0; pw < out_w_; ++pw)
        for (int64_t iy = 0; iy < grid_h; ++iy) {
          const double yy = start_h + ph * bin_h + (iy + 0.5) * bin_h / static_cast<double>(grid_h);
          for (int64_t ix = 0; ix < grid_w; ++ix) {
            const double xx = start_w + pw * bin_w + (ix + 0.5) * bin_w / static_cast<double>(grid_w);
            samples->push_back(BilinearSample(yy, xx, height, width));
          }
        }
  }

  bool half_pixel_, max_mode_;
  int64_t out_h_, out_w_, sampling_ratio_;
  float spatial_scale_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuRoiAlignKernels(KernelRegistry& registry) {
  const std::vector<DType> f3{DType::kFloat32, DType::kFloat64, DType::kFloat16};
  const std::vector<DType> f4{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("RoiAlign")
                        .Versions(10, 15)
                        .Constraint("T1", {0, 1}, f3)
                        .Constraint("T2", {2}, {DType::kInt64})
                        .Factory([](const Node& n) { return cpu::RoiAlignKernel::Create(n, false); }));
  registry.Register(Def("RoiAlign")
                        .Versions(16, 21)
                        .Constraint("T1", {0, 1}, f3)
                        .Constraint("T2", {2}, {DType::kInt64})
                        .Factory([](const Node& n) { return cpu::RoiAlignKernel::Create(n, true); }));
  registry.Register(Def("RoiAlign")
                        .Versions(22)
                        .Constraint("T1", {0, 1}, f4)
                        .Constraint("T2", {2}, {DType::kInt64})
                        .Factory([](const Node& n) { return cpu::RoiAlignKernel::Create(n, true); }));
}

}  // namespace tob
