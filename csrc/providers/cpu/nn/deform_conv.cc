// DeformConv (opsets 19, 22), 2-D: a convolution whose every tap reads X at its regular position
// plus a learned offset (offset[n, offset_group, kh, kw, {y, x}, oh, ow]), by bilinear
// interpolation with zeros outside the image (GridSample's zeros padding, as onnx's reference
// samples it), times the optional mask. Per image and group the sampled values form a
// [C / group * kH * kW, oH * oW] column matrix, and the output is W_group x columns through the
// engine's GEMM (nn/gemm.h), plus the bias. float16 / bfloat16 run in float32, rounded once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/nn_window_attributes.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/gemm.h"

namespace tob::cpu {
namespace {

// X's plane (height x width) at (y, x), bilinear, zero outside; NaN for a NaN coordinate.
template <typename C>
C SampleBilinear(const C* plane, int64_t height, int64_t width, C y, C x) {
  if (std::isnan(y) || std::isnan(x)) return std::numeric_limits<C>::quiet_NaN();
  // Every corner outside (this also keeps huge coordinates away from the integer conversion).
  if (y <= C(-1) || x <= C(-1) || y >= static_cast<C>(height) || x >= static_cast<C>(width)) return C(0);
  const C y0f = std::floor(y), x0f = std::floor(x);
  const int64_t y0 = static_cast<int64_t>(y0f), x0 = static_cast<int64_t>(x0f);
  const C ly = y - y0f, lx = x - x0f;
  auto at = [&](int64_t yy, int64_t xx) -> C {
    return yy >= 0 && yy < height && xx >= 0 && xx < width ? plane[yy * width + xx] : C(0);
  };
  return (C(1) - ly) * ((C(1) - lx) * at(y0, x0) + lx * at(y0, x0 + 1)) +
         ly * ((C(1) - lx) * at(y0 + 1, x0) + lx * at(y0 + 1, x0 + 1));
}

struct DeformGeometry {
  int64_t n, channels, height, width, out_channels, out_h, out_w, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, group, offset_group;
};

template <typename C>
Status RunDeformConv(const KernelContext& ctx, const DeformGeometry& g, const C* x, const C* w, const C* offset,
                     const C* bias, const C* mask, C* y) {
  const int64_t cg = g.channels / g.group, mg = g.out_channels / g.group;
  const int64_t taps = g.kh * g.kw, positions = g.out_h * g.out_w, rows = cg * taps;
  const int64_t per_offset_group = g.channels / g.offset_group;
  TOB_ASSIGN_OR_RETURN(Tensor cols, ctx.AllocateScratch(DTypeOf<C>(), {std::max<int64_t>(rows * positions, 1)}));
  C* col = cols.data<C>();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t grp = 0; grp < g.group; ++grp) {
      ParallelFor(ctx.thread_pool(), rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t row = r0; row < r1; ++row) {
          const int64_t icl = row / taps, tap = row % taps, i = tap / g.kw, j = tap % g.kw;
          const int64_t ic = grp * cg + icl, og = ic / per_offset_group;
          const C* plane = x + (n * g.channels + ic) * g.height * g.width;
          const C* off_y = offset + ((n * g.offset_group + og) * taps * 2 + tap * 2) * positions;
          const C* off_x = off_y + positions;
          const C* m = mask != nullptr ? mask + ((n * g.offset_group + og) * taps + tap) * positions : nullptr;
          C* dst = col + row * positions;
          for (int64_t oy = 0; oy < g.out_h; ++oy)
            for (int64_t ox = 0; ox < g.out_w; ++ox) {
              const int64_t p = oy * g.out_w + ox;
              const C yy = static_cast<C>(oy * g.stride_h - g.pad_h + i * g.dil_h) + off_y[p];
              const C xx = static_cast<C>(ox * g.stride_w - g.pad_w + j * g.dil_w) + off_x[p];
              const C v = SampleBilinear(plane, g.height, g.width, yy, xx);
              dst[p] = m != nullptr ? v * m[p] : v;
            }
        }
      });
      C* out = y + (n * g.out_channels + grp * mg) * positions;
      if (mg > 0 && positions > 0) {
        if (rows == 0) std::fill(out, out + mg * positions, C(0));
        else
          TOB_RETURN_IF_ERROR(Gemm(false, false, mg, positions, rows, C(1), w + grp * mg * rows, rows, col, positions,
                                   C(0), out, positions, ctx.thread_pool()));
      }
      if (bias != nullptr)
        for (int64_t m = 0; m < mg; ++m)
          for (int64_t p = 0; p < positions; ++p) out[m * positions + p] += bias[grp * mg + m];
    }
  return Status::OK();
}

class DeformConvKernel final : public OpKernel {
 public:
  DeformConvKernel(const Node& node, WindowAttributes attrs, int64_t offset_group)
      : OpKernel(node), attrs_(std::move(attrs)), offset_group_(offset_group) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    int64_t offset_group = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("offset_group", &offset_group, int64_t{1}));
    if (offset_group <= 0)
      return InvalidModel(node.Describe(), ": attribute 'offset_group' must be positive, got ", offset_group);
    return MakeKernel<DeformConvKernel>(node, std::move(attrs), offset_group);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(WindowAttributes a, attrs_.Resolve(node(), 2, {w.dim(2), w.dim(3)}));
    DeformGeometry g{x.dim(0),  x.dim(1),       x.dim(2),       x.dim(3),     w.dim(0),     y.dim(2),
                     y.dim(3),  w.dim(2),       w.dim(3),       a.strides[0], a.strides[1], a.pads[0],
                     a.pads[1], a.dilations[0], a.dilations[1], a.group,      offset_group_};
    const int inputs[] = {0, 1, 2, 3, 4};
    if (x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64) {
      auto run = [&]<typename C>() {
        const C* p[5] = {};
        for (int i : inputs) p[i] = Present(ctx, i) ? ctx.input(i)->data<C>() : nullptr;
        return RunDeformConv<C>(ctx, g, p[0], p[1], p[2], p[3], p[4], y.data<C>());
      };
      return x.dtype() == DType::kFloat32 ? run.template operator()<float>() : run.template operator()<double>();
    }
    if (x.dtype() != DType::kFloat16 && x.dtype() != DType::kBFloat16)
      return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    Tensor widened[5];
    const float* p[5] = {};
    for (int i : inputs) {
      if (!Present(ctx, i)) continue;
      TOB_ASSIGN_OR_RETURN(widened[i], ToFloatScratch(ctx, *ctx.input(i)));
      p[i] = widened[i].data<float>();
    }
    TOB_ASSIGN_OR_RETURN(Tensor out, ctx.AllocateScratch(DType::kFloat32, y.shape()));
    TOB_RETURN_IF_ERROR(RunDeformConv<float>(ctx, g, p[0], p[1], p[2], p[3], p[4], out.data<float>()));
    return FromFloatScratch(ctx, out, &y);
  }

 private:
  static bool Present(const KernelContext& ctx, int i) { return ctx.input(i) != nullptr && ctx.input(i)->defined(); }

  WindowAttributes attrs_;
  int64_t offset_group_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuDeformConvKernels(KernelRegistry& registry) {
  registry.Register(Def("DeformConv")
                        .Versions(19, 21)
                        .Constraint("T", {0, 1, 2, 3, 4}, {DType::kFloat32, DType::kFloat64, DType::kFloat16})
                        .Kernel<cpu::DeformConvKernel>());
  registry.Register(
      Def("DeformConv")
          .Versions(22)
          .Constraint("T", {0, 1, 2, 3, 4}, {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16})
          .Kernel<cpu::DeformConvKernel>());
}

}  // namespace tob
