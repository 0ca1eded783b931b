// ConvTranspose: per image, col = W_g^T x X_g (one GEMM per group), then col2im scatters the
// columns into the output (the adjoint of Conv's im2col).
#include <algorithm>
#include <vector>

#include "providers/cpu/nn/float_convert.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/nn_kernels.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

// Adds the columns of output channel m (col rows m*K .. m*K + K-1, K = kernel size) into y_plane.
template <typename T>
void Col2Im2D(const T* col, const WindowGeometry& g, int64_t m, T* y_plane) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  for (int64_t kh = 0; kh < KH; ++kh) {
    for (int64_t kw = 0; kw < KW; ++kw) {
      const T* src = col + ((m * KH + kh) * KW + kw) * H * W;
      const int64_t w_off = kw * dw - g.pad_begin[1];
      int64_t iw_lo, iw_hi;
      ValidOutputRange(w_off, sw, OW, W, &iw_lo, &iw_hi);
      for (int64_t ih = 0; ih < H; ++ih) {
        const int64_t oh = ih * sh - g.pad_begin[0] + kh * dh;
        if (oh < 0 || oh >= OH) continue;
        T* dst = y_plane + oh * OW;
        const T* s = src + ih * W;
        if (sw == 1) {
          for (int64_t iw = iw_lo; iw < iw_hi; ++iw) dst[iw + w_off] += s[iw];
        } else {
          for (int64_t iw = iw_lo; iw < iw_hi; ++iw) dst[iw * sw + w_off] += s[iw];
        }
      }
    }
  }
}

template <typename T>
void Col2ImND(const T* col, const WindowGeometry& g, int64_t m, T* y_plane) {
  const size_t r = g.rank();
  const int64_t in_size = g.in_size(), ksize = g.kernel_size();
  std::vector<int64_t> k(r, 0), i(r, 0);
  for (int64_t ki = 0; ki < ksize; ++ki) {
    const T* src = col + (m * ksize + ki) * in_size;
    std::fill(i.begin(), i.end(), 0);
    for (int64_t ii = 0; ii < in_size; ++ii) {
      int64_t offset = 0;
      bool inside = true;
      for (size_t d = 0; d < r && inside; ++d) {
        int64_t pos = i[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
        inside = pos >= 0 && pos < g.out[d];
        offset = offset * g.out[d] + pos;
      }
      if (inside) y_plane[offset] += src[ii];
      for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++i[d] == g.in[d]; --d) i[d] = 0;
    }
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++k[d] == g.kernel[d]; --d) k[d] = 0;
  }
}

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
  const WindowGeometry g2 = geometry.As2D();
  std::vector<const T*> a_ptrs(group), b_ptrs(group);
  std::vector<T*> c_ptrs(group);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t gi = 0; gi < group; ++gi) {
      a_ptrs[gi] = w + gi * Cg * col_rows;
      b_ptrs[gi] = x + (n * C + gi * Cg) * in_size;
      c_ptrs[gi] = col.data<T>() + gi * col_rows * in_size;
    }
    TOB_RETURN_IF_ERROR(BatchedGemm(true, false, col_rows, in_size, Cg, T(1), a_ptrs.data(), col_rows,
                                    b_ptrs.data(), in_size, T(0), c_ptrs.data(), in_size, group, pool));
    const T* cols = col.data<T>();
    ParallelFor(pool, M, 1, [&](int64_t begin, int64_t end) {
      for (int64_t m = begin; m < end; ++m) {
        T* plane = y + (n * M + m) * out_size;
        std::fill(plane, plane + out_size, bias != nullptr ? bias[m] : T(0));
        // Channel m is row block (m % Mg) of group m / Mg's columns.
        const T* group_cols = cols + (m / Mg) * col_rows * in_size;
        if (g2.rank() == 2) Col2Im2D(group_cols, g2, m % Mg, plane);
        else Col2ImND(group_cols, geometry, m % Mg, plane);
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
      return ctx.Fail("X has ", x.dim(1), " channels; W ", ShapeToString(w.shape()), " expects ", w.dim(0),
                      " (group ", group, ")");
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
      if constexpr (kIsHalfType<T>) {
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
