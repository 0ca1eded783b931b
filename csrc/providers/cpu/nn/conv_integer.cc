// ConvInteger (10) and QLinearConv (10): convolutions of int8/uint8 X and W of any spatial rank,
// with group, strides, dilations, pads / auto_pad (the float Conv's geometry,
// providers/cpu/nn/window_geometry.h). Per (image, group): the float conv's im2col
// (conv_columns.h) fills the column matrix, padding with X's zero point so that padded taps add
// nothing, and the integer GEMM (qgemm.h) multiplies the group's weights by it with exact int32
// sums, subtracting the zero points: X's one value, W's one value or one per output channel.
// QLinearConv adds the int32 bias and requantizes each sum (math/quantize_math.h):
// multiplier x_scale * w_scale[m] / y_scale in float32, sum * multiplier + y_zero_point in float64,
// rounded half to even and saturated, as onnx's reference does.
#include <algorithm>
#include <vector>

#include "framework/kernel_registry.h"
#include "math/quantize_math.h"
#include "providers/cpu/nn/conv_columns.h"
#include "providers/cpu/nn/qgemm.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

struct IntConvInputs {
  const Tensor* x;
  const Tensor* w;
  const Tensor* x_zp;  // nullptr: 0
  const Tensor* w_zp;  // nullptr: 0
};

struct IntConvShape {
  int64_t N, C, M, group, Cg, Mg, in_size, out_size, kernel_dim;
};

// Checks the shapes and zero points; the geometry of the call.
StatusOr<WindowGeometry> Prepare(const KernelContext& ctx, const WindowAttributes& attrs, const IntConvInputs& in,
                                 const Tensor& y, IntConvShape* s) {
  const Tensor& x = *in.x;
  const Tensor& w = *in.w;
  const int64_t group = attrs.group;
  if (x.rank() < 3 || w.rank() != x.rank())
    return ctx.Fail("expected X [N, C, D1, ...] and W of the same rank, got ", ShapeToString(x.shape()), " and ",
                    ShapeToString(w.shape()));
  if (x.dim(1) != w.dim(1) * group || w.dim(0) % group != 0)
    return ctx.Fail("X has ", x.dim(1), " channels; W ", ShapeToString(w.shape()), " with group ", group, " expects ",
                    w.dim(1) * group);
  if (in.x_zp != nullptr && (in.x_zp->numel() != 1 || in.x_zp->dtype() != x.dtype()))
    return ctx.Fail("x_zero_point must be one ", DTypeName(x.dtype()), " value, got ", DTypeName(in.x_zp->dtype()),
                    ShapeToString(in.x_zp->shape()));
  if (in.w_zp != nullptr && (in.w_zp->dtype() != w.dtype() ||
                             (in.w_zp->numel() != 1 && (in.w_zp->rank() != 1 || in.w_zp->dim(0) != w.dim(0)))))
    return ctx.Fail("w_zero_point must be one ", DTypeName(w.dtype()), " value or one per output channel (", w.dim(0),
                    "), got ", DTypeName(in.w_zp->dtype()), ShapeToString(in.w_zp->shape()));
  std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  TOB_ASSIGN_OR_RETURN(WindowGeometry g, WindowGeometry::Compute(ctx.node(), attrs, x.shape(), kernel, false));
  Shape expected{x.dim(0), w.dim(0)};
  expected.insert(expected.end(), g.out.begin(), g.out.end());
  if (y.shape() != expected)
    return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
  s->N = x.dim(0);
  s->C = x.dim(1);
  s->M = w.dim(0);
  s->group = group;
  s->Cg = s->C / group;
  s->Mg = s->M / group;
  s->in_size = g.in_size();
  s->out_size = g.out_size();
  s->kernel_dim = s->Cg * g.kernel_size();
  return g;
}

// acc[n, m, :] = the exact int32 convolution sums with the zero points subtracted.
Status IntegerConv(const KernelContext& ctx, const IntConvInputs& in, const WindowGeometry& geometry,
                   const IntConvShape& s, int32_t* acc) {
  if (s.N * s.M * s.out_size == 0) return Status::OK();
  const bool pointwise = geometry.IsPointwise();
  const WindowGeometry g = geometry.rank() <= 2 ? geometry.As2D() : geometry;
  const uint8_t x_pad = in.x_zp != nullptr ? in.x_zp->data<uint8_t>()[0] : 0;
  const int32_t x_zero = in.x_zp != nullptr ? static_cast<int32_t>(in.x_zp->ElementAsInt64(0)) : 0;
  std::vector<int32_t> w_zero(static_cast<size_t>(s.M), 0);
  if (in.w_zp != nullptr)
    for (int64_t m = 0; m < s.M; ++m)
      w_zero[m] = static_cast<int32_t>(in.w_zp->ElementAsInt64(in.w_zp->numel() == 1 ? 0 : m));
  Tensor cols;
  if (!pointwise) {
    TOB_ASSIGN_OR_RETURN(cols, ctx.AllocateScratch(DType::kUInt8, {s.kernel_dim * s.out_size}));
  }
  TOB_ASSIGN_OR_RETURN(
      Tensor work, ctx.AllocateScratch(DType::kUInt8,
                                       {static_cast<int64_t>(qgemm::WorkspaceBytes(s.Mg, s.out_size, s.kernel_dim))}));
  const auto* x = in.x->data<uint8_t>();
  const auto* w = in.w->data<uint8_t>();
  const bool x_signed = in.x->dtype() == DType::kInt8, w_signed = in.w->dtype() == DType::kInt8;
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t gi = 0; gi < s.group; ++gi) {
      const uint8_t* xg = x + (n * s.C + gi * s.Cg) * s.in_size;
      const uint8_t* b = xg;
      int64_t ldb = s.in_size;
      if (!pointwise) {
        uint8_t* col = cols.data<uint8_t>();
        ParallelFor(ctx.thread_pool(), s.Cg, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c) {
            if (g.rank() == 2) conv_columns::Im2Col2D(xg + c * s.in_size, g, c, col, s.out_size, x_pad);
            else conv_columns::Im2ColND(xg + c * s.in_size, g, c, col, s.out_size, x_pad);
          }
        });
        b = col;
        ldb = s.out_size;
      }
      qgemm::Operand qa{w + gi * s.Mg * s.kernel_dim, s.kernel_dim, w_signed, w_zero.data() + gi * s.Mg, true};
      qgemm::Operand qb{b, ldb, x_signed, &x_zero, false};
      qgemm::Run(s.Mg, s.out_size, s.kernel_dim, qa, qb, acc + (n * s.M + gi * s.Mg) * s.out_size, s.out_size,
                 work.raw_data(), ctx.thread_pool());
    }
  }
  return Status::OK();
}

class ConvIntegerKernel final : public OpKernel {
 public:
  ConvIntegerKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    return MakeKernel<ConvIntegerKernel>(node, std::move(attrs));
  }
  Status Compute(KernelContext& ctx) const override {
    IntConvInputs in{ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)};
    Tensor& y = *ctx.output(0);
    IntConvShape s;
    TOB_ASSIGN_OR_RETURN(WindowGeometry g, Prepare(ctx, attrs_, in, y, &s));
    return IntegerConv(ctx, in, g, s, y.data<int32_t>());
  }

 private:
  WindowAttributes attrs_;
};

class QLinearConvKernel final : public OpKernel {
 public:
  QLinearConvKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    return MakeKernel<QLinearConvKernel>(node, std::move(attrs));
  }
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x_scale = *ctx.input(1);
    const Tensor& w = *ctx.input(3);
    const Tensor& w_scale = *ctx.input(4);
    const Tensor& y_scale = *ctx.input(6);
    const Tensor& y_zp = *ctx.input(7);
    const Tensor* bias = ctx.input(8);
    Tensor& y = *ctx.output(0);
    IntConvInputs in{ctx.input(0), &w, ctx.input(2), ctx.input(5)};
    IntConvShape s;
    TOB_ASSIGN_OR_RETURN(WindowGeometry g, Prepare(ctx, attrs_, in, y, &s));
    if (x_scale.numel() != 1 || y_scale.numel() != 1 || y_zp.numel() != 1)
      return ctx.Fail("x_scale, y_scale and y_zero_point must hold one value, got ", ShapeToString(x_scale.shape()),
                      ", ", ShapeToString(y_scale.shape()), " and ", ShapeToString(y_zp.shape()));
    if (w_scale.numel() != 1 && (w_scale.rank() != 1 || w_scale.dim(0) != s.M))
      return ctx.Fail("w_scale must be one value or one per output channel (", s.M, "), got ",
                      ShapeToString(w_scale.shape()));
    if (bias != nullptr && (bias->rank() != 1 || bias->dim(0) != s.M))
      return ctx.Fail("the bias must be 1-D with ", s.M, " values, got ", ShapeToString(bias->shape()));
    TOB_ASSIGN_OR_RETURN(Tensor acc, ctx.AllocateScratch(DType::kInt32, y.shape()));
    TOB_RETURN_IF_ERROR(IntegerConv(ctx, in, g, s, acc.data<int32_t>()));
    const double xs = x_scale.ElementAsDouble(0), ys = y_scale.ElementAsDouble(0), yz = y_zp.ElementAsDouble(0);
    std::vector<double> mult(static_cast<size_t>(s.M));
    for (int64_t m = 0; m < s.M; ++m)
      mult[m] =
          RequantizeMultiplier(xs, w_scale.ElementAsDouble(w_scale.numel() == 1 ? 0 : m), ys, QuantPrecision::kFloat32);
    const bool out_signed = y.dtype() == DType::kInt8;
    const int64_t lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
    const int32_t* a = acc.data<int32_t>();
    const int32_t* b = bias != nullptr ? bias->data<int32_t>() : nullptr;
    ParallelFor(ctx.thread_pool(), s.N * s.M, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, s.out_size)),
                [&](int64_t p0, int64_t p1) {
                  for (int64_t p = p0; p < p1; ++p) {
                    const int64_t m = p % s.M;
                    const uint32_t add = b != nullptr ? static_cast<uint32_t>(b[m]) : 0u;
                    for (int64_t i = p * s.out_size; i < (p + 1) * s.out_size; ++i) {
                      const auto sum = static_cast<int32_t>(static_cast<uint32_t>(a[i]) + add);
                      const int64_t v = Requantize(sum, mult[m], yz, lo, hi);
                      if (out_signed) y.data<int8_t>()[i] = static_cast<int8_t>(v);
                      else y.data<uint8_t>()[i] = static_cast<uint8_t>(v);
                    }
                  }
                });
    return Status::OK();
  }

 private:
  WindowAttributes attrs_;
};

}  // namespace

void RegisterCpuConvIntegerKernels(KernelRegistry& registry) {
  const std::vector<DType> bytes{DType::kInt8, DType::kUInt8};
  registry.Register(Def("ConvInteger")
                        .Versions(10)
                        .Constraint("T1", {0, 2}, bytes)
                        .Constraint("T2", {1, 3}, bytes)
                        .Kernel<ConvIntegerKernel>());
  registry.Register(Def("QLinearConv")
                        .Versions(10)
                        .Constraint("T1", {0, 2}, bytes)
                        .Constraint("T2", {3, 5}, bytes)
                        .Constraint("T3", {7}, bytes)
                        .Constraint("tensor(float)", {1, 4, 6}, {DType::kFloat32})
                        .Constraint("T4", {8}, {DType::kInt32})
                        .Kernel<QLinearConvKernel>());
}

}  // namespace tob
