// ConvTranspose: per image, col = W_g^T x X_g (one GEMM per group), then col2im scatters the
// columns into the output: Conv's col2im (conv_columns.h) on the swapped geometry, since a
// ConvTranspose is the input gradient of a Conv.
#include <algorithm>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/conv_columns.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

template <typename T>
Status ConvTransposeTyped(const KernelContext& ctx, const Tensor& X, const Tensor& Wt, const Tensor* B, Tensor& Y,
                          const WindowGeometry& geometry, int64_t group) {
  const int64_t N = X.dim(0), C = X.dim(1), Mg = Wt.dim(1), M = Mg * group, Cg = C / group;
  const int64_t in_size = geometry.in_size(), out_size = geometry.out_size(), ksize = geometry.kernel_size();
  const int64_t col_rows = Mg * ksize;
  const T* x = X.data<T>();
  const T* w = Wt.data<T>();
  const T* bias = B != nullptr ? B->data<T>() : nullptr;
  T* y = Y.data<T>();
  ThreadPool* pool = ctx.thread_pool();
  if (Y.numel() == 0) return Status::OK();
  TOB_ASSIGN_OR_RETURN(Tensor col, ctx.AllocateScratch(DTypeOf<T>(), {group * col_rows * in_size}));
  // Columns are per input position of X: the "output" of the swapped (Conv) geometry.
  const WindowGeometry as_conv = geometry.Swapped();
  const WindowGeometry g2 = as_conv.As2D();
  std::vector<const T*> a_ptrs(group), b_ptrs(group);
  std::vector<T*> c_ptrs(group);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < group; ++gi) {
      a_ptrs[gi] = w + gi * Cg * col_rows;
      b_ptrs[gi] = x + (n * C + gi * Cg) * in_size;
      c_ptrs[gi] = col.data<T>() + gi * col_rows * in_size;
    }
    TOB_RETURN_IF_ERROR(BatchedGemm(true, false, col_rows, in_size, Cg, T(1), a_ptrs.data(), col_rows, b_ptrs.data(),
                                    in_size, T(0), c_ptrs.data(), in_size, group, pool));
    const T* cols = col.data<T>();
    ParallelFor(pool, M, 1, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        T* plane = y + (n * M + m) * out_size;
        std::fill(plane, plane + out_size, bias != nullptr ? bias[m] : T(0));
        // Channel m is row block (m % Mg) of group m / Mg's columns.
        const T* group_cols = cols + (m / Mg) * col_rows * in_size;
        if (g2.rank() == 2) conv_columns::Col2Im2D(group_cols, g2, m % Mg, in_size, plane);
        else conv_columns::Col2ImND(group_cols, as_conv, m % Mg, in_size, plane);
      }
    });
  }
  return Status::OK();
}

class ConvTransposeKernel final : public OpKernel {
 public:
  ConvTransposeKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    return MakeKernel<ConvTransposeKernel>(node, std::move(attrs));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    const Tensor* b = ctx.input(2);
    Tensor& y = *ctx.output(0);
    const int64_t group = attrs_.group;
    if (x.rank() < 3 || w.rank() != x.rank())
      return ctx.Fail("expected X [N, C, D1, ...] and W of the same rank, got ", ShapeToString(x.shape()), " and ",
                      ShapeToString(w.shape()));
    if (x.dim(1) != w.dim(0) || x.dim(1) % group != 0)
      return ctx.Fail("X has ", x.dim(1), " channels; W ", ShapeToString(w.shape()), " expects ", w.dim(0), " (group ",
                      group, ")");
    const int64_t out_channels = w.dim(1) * group;
    if (b != nullptr && (b->rank() != 1 || b->dim(0) != out_channels))
      return ctx.Fail("bias must be 1-D with ", out_channels, " values, got ", ShapeToString(b->shape()));
    std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    auto geometry = WindowGeometry::Compute(node(), attrs_, x.shape(), kernel, true);
    if (!geometry.ok()) return geometry.status();
    Shape expected{x.dim(0), out_channels};
    expected.insert(expected.end(), geometry.value().out.begin(), geometry.value().out.end());
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor xf, ToFloatScratch(ctx, x));
        TOB_ASSIGN_OR_RETURN(Tensor wf, ToFloatScratch(ctx, w));
        Tensor bf;
        if (b != nullptr) {
          TOB_ASSIGN_OR_RETURN(bf, ToFloatScratch(ctx, *b));
        }
        TOB_ASSIGN_OR_RETURN(Tensor yf, ctx.AllocateScratch(DType::kFloat32, y.shape()));
        TOB_RETURN_IF_ERROR(ConvTransposeTyped<float>(ctx, xf, wf, b ? &bf : nullptr, yf, geometry.value(), group));
        return FromFloatScratch(ctx, yf, &y);
      } else {
        return ConvTransposeTyped<T>(ctx, x, w, b, y, geometry.value(), group);
      }
    });
  }

 private:
  WindowAttributes attrs_;
};

}  // namespace

void RegisterCpuConvTransposeKernels(KernelRegistry& registry) {
  registry.Register(
      Def("ConvTranspose").Versions(1).Constraint("T", {0, 1, 2}, FloatTypes()).Kernel<ConvTransposeKernel>());
}

}  // namespace tob
