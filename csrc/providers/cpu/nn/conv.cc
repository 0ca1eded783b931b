// Conv: im2col + GEMM in general, GEMM straight on the input for 1x1 stride-1 convs, and a
// direct loop for depthwise convs (one input channel per group), where GEMM would be a
// matrix-vector product per channel.
#include <algorithm>
#include <cstring>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/conv_columns.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

// The im2col buffers of the images processed together stay below this.
constexpr int64_t kMaxColumnBytes = int64_t{32} << 20;

// Depthwise (C/group == 1): each output channel m reads input channel m / (M/group).
template <typename T>
void DepthwiseConv2D(const T* x, const T* w, const T* bias, T* y, int64_t N, int64_t C, int64_t M,
                     const WindowGeometry& g, ThreadPool* pool) {
  const int64_t H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1];
  const int64_t KH = g.kernel[0], KW = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t multiplier = M / C;
  std::vector<int64_t> ow_lo(KW), ow_hi(KW);
  for (int64_t kw = 0; kw < KW; ++kw) ValidOutputRange(kw * dw - g.pad_begin[1], sw, W, OW, &ow_lo[kw], &ow_hi[kw]);
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, OH * OW * KH * KW));
  ParallelFor(pool, N * M, grain, [&](int64_t begin, int64_t end) {
    for (int64_t nm = begin; nm < end; ++nm) {
      const int64_t n = nm / M, m = nm % M;
      const T* plane = x + (n * C + m / multiplier) * H * W;
      const T* filt = w + m * KH * KW;
      T* out = y + nm * OH * OW;
      const T b = bias != nullptr ? bias[m] : T(0);
      for (int64_t oh = 0; oh < OH; ++oh) {
        T* row = out + oh * OW;
        std::fill(row, row + OW, b);
        for (int64_t kh = 0; kh < KH; ++kh) {
          const int64_t ih = oh * sh - g.pad_begin[0] + kh * dh;
          if (ih < 0 || ih >= H) continue;
          const T* in_row = plane + ih * W;
          for (int64_t kw = 0; kw < KW; ++kw) {
            const T wv = filt[kh * KW + kw];
            const int64_t off = kw * dw - g.pad_begin[1];
            if (sw == 1) {
              for (int64_t ow = ow_lo[kw]; ow < ow_hi[kw]; ++ow) row[ow] += wv * in_row[ow + off];
            } else {
              for (int64_t ow = ow_lo[kw]; ow < ow_hi[kw]; ++ow) row[ow] += wv * in_row[ow * sw + off];
            }
          }
        }
      }
    }
  });
}

// y[n, m, :] = bias[m] for the images [n0, n1).
template <typename T>
void FillBias(T* y, const T* bias, int64_t n0, int64_t n1, int64_t M, int64_t out_size, ThreadPool* pool) {
  ParallelFor(pool, (n1 - n0) * M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, out_size)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  T* dst = y + (n0 * M + i) * out_size;
                  std::fill(dst, dst + out_size, bias[i % M]);
                }
              });
}

template <typename T>
Status ConvTyped(const KernelContext& ctx, const Tensor& X, const Tensor& Wt, const Tensor* B, Tensor& Y,
                 const WindowGeometry& geometry, int64_t group) {
  const int64_t N = X.dim(0), C = X.dim(1), M = Wt.dim(0);
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t in_size = geometry.in_size(), out_size = geometry.out_size();
  const int64_t kernel_dim = Cg * geometry.kernel_size();
  const T* x = X.data<T>();
  const T* w = Wt.data<T>();
  const T* bias = B != nullptr ? B->data<T>() : nullptr;
  T* y = Y.data<T>();
  ThreadPool* pool = ctx.thread_pool();
  if (Y.numel() == 0) return Status::OK();

  if (Cg == 1 && group > 1 && geometry.rank() <= 2) {
    DepthwiseConv2D(x, w, bias, y, N, C, M, geometry.As2D(), pool);
    return Status::OK();
  }

  const bool pointwise = geometry.IsPointwise();
  const int64_t col_per_image = pointwise ? 0 : group * kernel_dim * out_size;
  const int64_t images_per_chunk =
      pointwise ? N : std::clamp<int64_t>(kMaxColumnBytes / std::max<int64_t>(1, col_per_image * sizeof(T)), 1, N);
  Tensor col;
  if (!pointwise) {
    TOB_ASSIGN_OR_RETURN(col, ctx.AllocateScratch(DTypeOf<T>(), {images_per_chunk * col_per_image}));
  }
  const WindowGeometry g2 = geometry.As2D();
  std::vector<const T*> a_ptrs, b_ptrs;
  std::vector<T*> c_ptrs;
  for (int64_t n0 = 0; n0 < N; n0 += images_per_chunk) {
    const int64_t n1 = std::min(N, n0 + images_per_chunk);
    if (!pointwise) {
      T* cols = col.data<T>();
      // One unit per (image, group, input channel) row block of the column buffer.
      ParallelFor(pool, (n1 - n0) * group * Cg, 1, [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          const int64_t ig = u / Cg, c = u % Cg;
          const int64_t n = n0 + ig / group, gi = ig % group;
          const T* xg = x + (n * C + gi * Cg) * in_size;
          T* dst = cols + ig * kernel_dim * out_size;
          if (g2.rank() == 2) conv_columns::Im2Col2D(xg + c * in_size, g2, c, dst, out_size);
          else conv_columns::Im2ColND(xg + c * in_size, geometry, c, dst, out_size);
        }
      });
    }
    if (bias != nullptr) FillBias(y, bias, n0, n1, M, out_size, pool);
    a_ptrs.clear();
    b_ptrs.clear();
    c_ptrs.clear();
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t gi = 0; gi < group; ++gi) {
        a_ptrs.push_back(w + gi * Mg * kernel_dim);
        b_ptrs.push_back(pointwise ? x + (n * C + gi * Cg) * in_size
                                   : col.data<T>() + ((n - n0) * group + gi) * kernel_dim * out_size);
        c_ptrs.push_back(y + (n * M + gi * Mg) * out_size);
      }
    }
    TOB_RETURN_IF_ERROR(BatchedGemm(false, false, Mg, out_size, kernel_dim, T(1), a_ptrs.data(), kernel_dim,
                                    b_ptrs.data(), out_size, bias != nullptr ? T(1) : T(0), c_ptrs.data(), out_size,
                                    static_cast<int64_t>(a_ptrs.size()), pool));
  }
  return Status::OK();
}

class ConvKernel final : public OpKernel {
 public:
  ConvKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    return MakeKernel<ConvKernel>(node, std::move(attrs));
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
    if (x.dim(1) != w.dim(1) * group || w.dim(0) % group != 0)
      return ctx.Fail("X has ", x.dim(1), " channels; W ", ShapeToString(w.shape()), " with group ", group, " expects ",
                      w.dim(1) * group);
    if (b != nullptr && (b->rank() != 1 || b->dim(0) != w.dim(0)))
      return ctx.Fail("bias must be 1-D with ", w.dim(0), " values, got ", ShapeToString(b->shape()));
    std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    auto geometry = WindowGeometry::Compute(node(), attrs_, x.shape(), kernel, false);
    if (!geometry.ok()) return geometry.status();
    Shape expected{x.dim(0), w.dim(0)};
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
        TOB_RETURN_IF_ERROR(ConvTyped<float>(ctx, xf, wf, b ? &bf : nullptr, yf, geometry.value(), group));
        return FromFloatScratch(ctx, yf, &y);
      } else {
        return ConvTyped<T>(ctx, x, w, b, y, geometry.value(), group);
      }
    });
  }

 private:
  WindowAttributes attrs_;
};

}  // namespace

void RegisterCpuConvKernels(KernelRegistry& registry) {
  registry.Register(Def("Conv").Versions(1).Constraint("T", {0, 1, 2}, FloatTypes()).Kernel<ConvKernel>());
}

}  // namespace tob
