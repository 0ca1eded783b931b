// com.microsoft::ConvGrad (dY, X, W; Conv's attributes) -> dX, dW, dB, each computed only when
// the node asks for it (an omitted output). Any spatial rank, groups, strides, dilations, pads
// and auto_pad. Per chunk of images and per group g, with col = im2col(X) laid out as
// [Cg * K, images * out_size] and dY_g as [Mg, images * out_size]:
//   dW_g += dY_g x col^T        (one GEMM with K = images * out_size)
//   col   = W_g^T x dY_g, dX = col2im(col)
//   dB[m] = sum of dY[:, m]
// Input-gradient paths: 1x1 stride-1 unpadded convs compute dX straight as W_g^T x dY_g per image;
// other stride-1 convs as a forward conv of dY with the flipped weight (one GEMM with a long K, no
// scatter); strided ones through col2im. Depthwise 1-D/2-D convs use direct loops
// (depthwise_conv_grad.h).
#include "providers/cpu/training/conv_grad.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"
#include "providers/cpu/nn/conv_columns.h"
#include "providers/cpu/nn/conv_packed.h"
#include "providers/cpu/nn/gemm.h"
#include "providers/cpu/nn/vec_math.h"
#include "providers/cpu/nn/window_geometry.h"
#include "providers/cpu/training/depthwise_conv_grad.h"

namespace tob {

namespace {

std::atomic<int64_t> g_batch_folds{0};

// The column buffer of one chunk of images stays below this.
// A chunk's columns stay below this: im2col writes them and the GEMM reads them straight after,
// so they should still be in the core's L2 (1-2 MiB on current x86 server cores) when it does.
// Measured (one thread, a [32, 16, 26, 26] -> 32 3x3 conv's ConvGrad): 32 MiB chunks 8.0 ms for dX
// and 2.5 ms for dW, 512 KiB chunks 2.8 and 1.5 ms.
constexpr int64_t kMaxColumnBytes = int64_t{512} << 10;

struct ConvGradShape {
  int64_t N, C, M, group, Cg, Mg, in_size, out_size, kernel_dim;
};

template <typename C>
void BiasGrad(const C* dy, const ConvGradShape& s, C* db, ThreadPool* pool) {
  ParallelFor(pool, s.M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, s.N * s.out_size)),
              [&](int64_t b, int64_t e) {
                for (int64_t m = b; m < e; ++m) {
                  double total = 0;
                  for (int64_t n = 0; n < s.N; ++n) total += vec::Sum(dy + (n * s.M + m) * s.out_size, s.out_size);
                  db[m] = static_cast<C>(total);
                }
              });
}

// dX = W_g^T x dY_g per (image, group): the 1x1 stride-1 case, where X itself is the columns.
template <typename C>
Status PointwiseInputGrad(const C* dy, const C* w, const ConvGradShape& s, C* dx, ThreadPool* pool) {
  std::vector<const C*> a, b;
  std::vector<C*> c;
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t g = 0; g < s.group; ++g) {
      a.push_back(w + g * s.Mg * s.Cg);
      b.push_back(dy + (n * s.M + g * s.Mg) * s.out_size);
      c.push_back(dx + (n * s.C + g * s.Cg) * s.in_size);
    }
  }
  return BatchedGemm(true, false, s.Cg, s.out_size, s.Mg, C(1), a.data(), s.Cg, b.data(), s.out_size, C(0), c.data(),
                     s.out_size, static_cast<int64_t>(a.size()), pool);
}

// Images per chunk so that `per_image` column elements of C stay below kMaxColumnBytes.
template <typename C>
int64_t ImagesPerChunk(int64_t per_image, int64_t N) {
  const int64_t bytes = std::max<int64_t>(1, per_image * static_cast<int64_t>(sizeof(C)));
  return std::clamp<int64_t>(kMaxColumnBytes / bytes, 1, std::max<int64_t>(1, N));
}

// Fills `cols` ([group][rows_per_group, ld]) with the columns of images [n0, n0 + nb): planes
// (n, g * channels + c) of `src` ([N, group * channels, plane]) through im2col with geometry g.
template <typename C>
void ChunkColumns(const C* src, int64_t n0, int64_t nb, int64_t group, int64_t channels, int64_t plane,
                  int64_t rows_per_group, int64_t out_size, int64_t ld, const WindowGeometry& geometry, C* cols,
                  ThreadPool* pool) {
  const WindowGeometry g2 = geometry.As2D();
  const int64_t work = std::max<int64_t>(1, out_size * geometry.kernel_size());
  ParallelFor(pool, nb * group * channels, std::max<int64_t>(1, 16384 / work), [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t nl = u / (group * channels), gi = (u / channels) % group, ci = u % channels;
      const C* p = src + ((n0 + nl) * group * channels + gi * channels + ci) * plane;
      C* dst = cols + gi * rows_per_group * ld + nl * out_size;
      if (g2.rank() == 2) conv_columns::Im2Col2D(p, g2, ci, dst, ld);
      else conv_columns::Im2ColND(p, geometry, ci, dst, ld);
    }
  });
}

// Scratch of the column paths: a chunk of `images` images' columns ([group][Cg * K, images *
// out_size]) and, for more than one image, their dY rows gathered into one matrix.
template <typename C>
struct ColumnScratch {
  int64_t images = 1;
  Tensor columns, rows;
  C* col() { return columns.data<C>(); }
  C* row_buffer() { return images > 1 ? rows.data<C>() : nullptr; }
};

template <typename C>
StatusOr<ColumnScratch<C>> AllocateColumnScratch(const KernelContext& ctx, const ConvGradShape& s) {
  ColumnScratch<C> scratch;
  scratch.images = ImagesPerChunk<C>(s.group * s.kernel_dim * s.out_size, s.N);
  TOB_ASSIGN_OR_RETURN(scratch.columns,
                       ctx.AllocateScratch(DTypeOf<C>(), {scratch.images * s.group * s.kernel_dim * s.out_size}));
  if (scratch.images > 1) {
    TOB_ASSIGN_OR_RETURN(scratch.rows, ctx.AllocateScratch(DTypeOf<C>(), {s.M * scratch.images * s.out_size}));
  }
  return scratch;
}

// Rows of dY for images [n0, n0 + nb) as one [M, nb * out_size] matrix: dY itself for one
// image, else gathered into `buffer`.
template <typename C>
const C* ChunkOutputRows(const C* dy, const ConvGradShape& s, int64_t n0, int64_t nb, C* buffer, ThreadPool* pool) {
  if (nb == 1) return dy + n0 * s.M * s.out_size;
  const int64_t ld = nb * s.out_size;
  ParallelFor(pool, nb * s.M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, s.out_size)),
              [&](int64_t begin, int64_t end) {
                for (int64_t u = begin; u < end; ++u) {
                  const int64_t nl = u / s.M, m = u % s.M;
                  std::memcpy(buffer + m * ld + nl * s.out_size, dy + ((n0 + nl) * s.M + m) * s.out_size,
                              sizeof(C) * s.out_size);
                }
              });
  return buffer;
}

// dW_g = sum over chunks of dY_g x im2col(X)_g^T.
template <typename C>
Status WeightGrad(const KernelContext& ctx, const C* dy, const C* x, const ConvGradShape& s,
                  const WindowGeometry& geometry, C* dw) {
  ThreadPool* pool = ctx.thread_pool();
  std::vector<const C*> a(s.group), b(s.group);
  std::vector<C*> c(s.group);
  if (geometry.IsPointwise()) {
    // X is its own column matrix: accumulate dY_g[n] x X_g[n]^T image by image, nothing copied.
    for (int64_t n = 0; n < s.N; ++n) {
      for (int64_t gi = 0; gi < s.group; ++gi) {
        a[gi] = dy + (n * s.M + gi * s.Mg) * s.out_size;
        b[gi] = x + (n * s.C + gi * s.Cg) * s.in_size;
        c[gi] = dw + gi * s.Mg * s.kernel_dim;
      }
      TOB_RETURN_IF_ERROR(BatchedGemm(false, true, s.Mg, s.Cg, s.out_size, C(1), a.data(), s.out_size, b.data(),
                                      s.in_size, n == 0 ? C(0) : C(1), c.data(), s.kernel_dim, s.group, pool));
    }
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(ColumnScratch<C> scratch, AllocateColumnScratch<C>(ctx, s));
  const int64_t images = scratch.images;
  C* col = scratch.col();
  for (int64_t n0 = 0; n0 < s.N; n0 += images) {
    const int64_t nb = std::min(images, s.N - n0), ld = nb * s.out_size;
    const C* dy_rows = ChunkOutputRows(dy, s, n0, nb, scratch.row_buffer(), pool);
    ChunkColumns(x, n0, nb, s.group, s.Cg, s.in_size, s.kernel_dim, s.out_size, ld, geometry, col, pool);
    for (int64_t gi = 0; gi < s.group; ++gi) {
      a[gi] = dy_rows + gi * s.Mg * ld;
      b[gi] = col + gi * s.kernel_dim * ld;
      c[gi] = dw + gi * s.Mg * s.kernel_dim;
    }
    TOB_RETURN_IF_ERROR(BatchedGemm(false, true, s.Mg, s.kernel_dim, ld, C(1), a.data(), ld, b.data(), ld,
                                    n0 == 0 ? C(0) : C(1), c.data(), s.kernel_dim, s.group, pool));
  }
  return Status::OK();
}

// dX by columns: col = W_g^T x dY_g, then col2im adds the columns back into dX (any stride).
template <typename C>
Status InputGradByColumns(const KernelContext& ctx, const C* dy, const C* w, const ConvGradShape& s,
                          const WindowGeometry& geometry, C* dx) {
  ThreadPool* pool = ctx.thread_pool();
  TOB_ASSIGN_OR_RETURN(ColumnScratch<C> scratch, AllocateColumnScratch<C>(ctx, s));
  const int64_t images = scratch.images;
  C* col = scratch.col();
  const WindowGeometry g2 = geometry.As2D();
  const int64_t work = std::max<int64_t>(1, s.out_size * geometry.kernel_size());
  std::vector<const C*> a(s.group), b(s.group);
  std::vector<C*> c(s.group);
  for (int64_t n0 = 0; n0 < s.N; n0 += images) {
    const int64_t nb = std::min(images, s.N - n0), ld = nb * s.out_size;
    const C* dy_rows = ChunkOutputRows(dy, s, n0, nb, scratch.row_buffer(), pool);
    for (int64_t gi = 0; gi < s.group; ++gi) {
      a[gi] = w + gi * s.Mg * s.kernel_dim;
      b[gi] = dy_rows + gi * s.Mg * ld;
      c[gi] = col + gi * s.kernel_dim * ld;
    }
    TOB_RETURN_IF_ERROR(BatchedGemm(true, false, s.kernel_dim, ld, s.Mg, C(1), a.data(), s.kernel_dim, b.data(), ld,
                                    C(0), c.data(), ld, s.group, pool));
    ParallelFor(pool, nb * s.group * s.Cg, std::max<int64_t>(1, 16384 / work), [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t nl = u / (s.group * s.Cg), gi = (u / s.Cg) % s.group, ci = u % s.Cg;
        C* plane = dx + ((n0 + nl) * s.C + gi * s.Cg + ci) * s.in_size;
        std::fill(plane, plane + s.in_size, C(0));
        const C* src = col + gi * s.kernel_dim * ld + nl * s.out_size;
        if (g2.rank() == 2) conv_columns::Col2Im2D(src, g2, ci, ld, plane);
        else conv_columns::Col2ImND(src, geometry, ci, ld, plane);
      }
    });
  }
  return Status::OK();
}

// For stride 1, dX is a forward conv of dY with the weight flipped in space and transposed in
// channels, padded by dilation * (kernel - 1) - pad: im2col(dY) feeds one GEMM per image and
// group with K = Mg * kernel size, and no col2im scatter. Empty when the pads are too large for
// this form (then the caller uses the column path).
std::optional<WindowGeometry> FlippedGeometry(const WindowGeometry& g) {
  WindowGeometry f;
  for (size_t d = 0; d < g.rank(); ++d) {
    if (g.strides[d] != 1) return std::nullopt;
    const int64_t span = g.dilations[d] * (g.kernel[d] - 1);
    if (g.pad_begin[d] > span || g.pad_end[d] > span) return std::nullopt;
    f.in.push_back(g.out[d]);
    f.out.push_back(g.in[d]);
    f.kernel.push_back(g.kernel[d]);
    f.strides.push_back(1);
    f.dilations.push_back(g.dilations[d]);
    f.pad_begin.push_back(span - g.pad_begin[d]);
    f.pad_end.push_back(span - g.pad_end[d]);
  }
  return f;
}

template <typename C>
Status InputGradByFlippedConv(const KernelContext& ctx, const C* dy, const C* w, const ConvGradShape& s,
                              const WindowGeometry& flipped, C* dx) {
  ThreadPool* pool = ctx.thread_pool();
  const int64_t K = flipped.kernel_size(), rows = s.Mg * K;
  // wt[g][c][m * K + k] = w[g * Mg + m][c][K - 1 - k]
  TOB_ASSIGN_OR_RETURN(Tensor wt_t, ctx.AllocateScratch(DTypeOf<C>(), {s.group * s.Cg * rows}));
  C* wt = wt_t.data<C>();
  for (int64_t gi = 0; gi < s.group; ++gi)
    for (int64_t ci = 0; ci < s.Cg; ++ci)
      for (int64_t m = 0; m < s.Mg; ++m) {
        const C* src = w + ((gi * s.Mg + m) * s.Cg + ci) * K;
        C* dst = wt + (gi * s.Cg + ci) * rows + m * K;
        for (int64_t k = 0; k < K; ++k) dst[k] = src[K - 1 - k];
      }
  const int64_t images = ImagesPerChunk<C>(s.group * rows * s.in_size, s.N);
  TOB_ASSIGN_OR_RETURN(Tensor col_t, ctx.AllocateScratch(DTypeOf<C>(), {images * s.group * rows * s.in_size}));
  C* col = col_t.data<C>();
  // Small images fold the chunk into one GEMM per group, [Cg, images * in_size], scattered into dX
  // afterwards: one GEMM per image would pack the weight again for each few-column product.
  const bool fold = conv_packed::BatchFoldWins(std::min(images, s.N), s.in_size, false);
  Tensor folded_t;
  if (fold) {
    TOB_ASSIGN_OR_RETURN(folded_t, ctx.AllocateScratch(DTypeOf<C>(), {images * s.group * s.Cg * s.in_size}));
  }
  std::vector<const C*> a, b;
  std::vector<C*> c;
  for (int64_t n0 = 0; n0 < s.N; n0 += images) {
    const int64_t nb = std::min(images, s.N - n0), ld = nb * s.in_size;
    ChunkColumns(dy, n0, nb, s.group, s.Mg, s.out_size, rows, s.in_size, ld, flipped, col, pool);
    a.clear();
    b.clear();
    c.clear();
    if (fold) {
      C* folded = folded_t.data<C>();
      for (int64_t gi = 0; gi < s.group; ++gi) {
        a.push_back(wt + gi * s.Cg * rows);
        b.push_back(col + gi * rows * ld);
        c.push_back(folded + gi * s.Cg * ld);
      }
      TOB_RETURN_IF_ERROR(BatchedGemm(false, false, s.Cg, ld, rows, C(1), a.data(), rows, b.data(), ld, C(0), c.data(),
                                      ld, s.group, pool));
      g_batch_folds.fetch_add(1, std::memory_order_relaxed);
      // folded[g][c][nl * in_size + i] -> dX[n0 + nl][g * Cg + c][i]
      for (int64_t nl = 0; nl < nb; ++nl)
        for (int64_t gc = 0; gc < s.group * s.Cg; ++gc)
          std::memcpy(dx + ((n0 + nl) * s.C + gc) * s.in_size, folded + gc * ld + nl * s.in_size,
                      sizeof(C) * s.in_size);
      continue;
    }
    for (int64_t nl = 0; nl < nb; ++nl)
      for (int64_t gi = 0; gi < s.group; ++gi) {
        a.push_back(wt + gi * s.Cg * rows);
        b.push_back(col + gi * rows * ld + nl * s.in_size);
        c.push_back(dx + ((n0 + nl) * s.C + gi * s.Cg) * s.in_size);
      }
    TOB_RETURN_IF_ERROR(BatchedGemm(false, false, s.Cg, s.in_size, rows, C(1), a.data(), rows, b.data(), ld, C(0),
                                    c.data(), s.in_size, static_cast<int64_t>(a.size()), pool));
  }
  return Status::OK();
}

template <typename C>
Status ConvGradTyped(const KernelContext& ctx, const C* dy, const C* x, const C* w, const ConvGradShape& s,
                     const WindowGeometry& geometry, C* dx, C* dw, C* db) {
  ThreadPool* pool = ctx.thread_pool();
  if (db != nullptr) BiasGrad(dy, s, db, pool);
  if (s.Cg == 1 && s.group > 1 && geometry.rank() <= 2) {
    const conv_grad::DepthwiseShape ds{s.N, s.C, s.M};
    const WindowGeometry g2 = geometry.As2D();
    if (dx != nullptr) conv_grad::DepthwiseInputGrad(dy, w, ds, g2, dx, pool);
    if (dw != nullptr) {
      TOB_ASSIGN_OR_RETURN(Tensor lanes, ctx.AllocateScratch(DTypeOf<C>(), {s.M, g2.kernel_size(), g2.out[1]}));
      conv_grad::DepthwiseWeightGrad(dy, x, ds, g2, dw, lanes.data<C>(), pool);
    }
    return Status::OK();
  }
  if (dw != nullptr) TOB_RETURN_IF_ERROR(WeightGrad(ctx, dy, x, s, geometry, dw));
  if (dx == nullptr) return Status::OK();
  if (geometry.IsPointwise()) return PointwiseInputGrad(dy, w, s, dx, pool);
  if (std::optional<WindowGeometry> flipped = FlippedGeometry(geometry))
    return InputGradByFlippedConv(ctx, dy, w, s, *flipped, dx);
  return InputGradByColumns(ctx, dy, w, s, geometry, dx);
}

class ConvGradKernel final : public OpKernel {
 public:
  ConvGradKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    return MakeKernel<ConvGradKernel>(node, std::move(attrs));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    const Tensor& w = *ctx.input(2);
    const int64_t group = attrs_.group;
    if (x.rank() < 3 || w.rank() != x.rank() || dy.rank() != x.rank())
      return ctx.Fail("expected dY, X [N, C, D1, ...] and W of one rank, got ", ShapeToString(dy.shape()), ", ",
                      ShapeToString(x.shape()), " and ", ShapeToString(w.shape()));
    if (dy.dtype() != x.dtype() || w.dtype() != x.dtype()) return ctx.Fail("dY, X and W must have one dtype");
    if (x.dim(1) != w.dim(1) * group || w.dim(0) % group != 0)
      return ctx.Fail("X has ", x.dim(1), " channels; W ", ShapeToString(w.shape()), " with group ", group, " expects ",
                      w.dim(1) * group);
    std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    TOB_ASSIGN_OR_RETURN(WindowGeometry geometry, WindowGeometry::Compute(node(), attrs_, x.shape(), kernel, false));
    Shape expected{x.dim(0), w.dim(0)};
    expected.insert(expected.end(), geometry.out.begin(), geometry.out.end());
    if (dy.shape() != expected)
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " is not the Conv output shape ", ShapeToString(expected));
    ConvGradShape s;
    s.N = x.dim(0);
    s.C = x.dim(1);
    s.M = w.dim(0);
    s.group = group;
    s.Cg = s.C / group;
    s.Mg = s.M / group;
    s.in_size = geometry.in_size();
    s.out_size = geometry.out_size();
    s.kernel_dim = s.Cg * geometry.kernel_size();
    Tensor* outs[3] = {ctx.output(0), ctx.output(1), ctx.output(2)};
    for (Tensor* o : outs)
      if (o != nullptr && o->numel() > 0 && (s.N == 0 || s.out_size == 0)) std::memset(o->raw_data(), 0, o->nbytes());
    if (s.N == 0 || s.out_size == 0) return Status::OK();
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor dyf, ToFloatScratch(ctx, dy));
        TOB_ASSIGN_OR_RETURN(Tensor xf, ToFloatScratch(ctx, x));
        TOB_ASSIGN_OR_RETURN(Tensor wf, ToFloatScratch(ctx, w));
        Tensor outf[3];
        for (int i = 0; i < 3; ++i) {
          if (outs[i] == nullptr) continue;
          TOB_ASSIGN_OR_RETURN(outf[i], ctx.AllocateScratch(DType::kFloat32, outs[i]->shape()));
        }
        auto ptr = [&](int i) { return outs[i] != nullptr ? outf[i].data<float>() : nullptr; };
        TOB_RETURN_IF_ERROR(ConvGradTyped<float>(ctx, dyf.data<float>(), xf.data<float>(), wf.data<float>(), s,
                                                 geometry, ptr(0), ptr(1), ptr(2)));
        for (int i = 0; i < 3; ++i)
          if (outs[i] != nullptr) TOB_RETURN_IF_ERROR(FromFloatScratch(ctx, outf[i], outs[i]));
        return Status::OK();
      } else {
        auto ptr = [&](int i) { return outs[i] != nullptr ? outs[i]->data<T>() : nullptr; };
        return ConvGradTyped<T>(ctx, dy.data<T>(), x.data<T>(), w.data<T>(), s, geometry, ptr(0), ptr(1), ptr(2));
      }
    });
  }

 private:
  WindowAttributes attrs_;
};

}  // namespace

int64_t conv_grad::BatchFoldsRun() { return g_batch_folds.load(std::memory_order_relaxed); }

void RegisterCpuConvGradKernels(KernelRegistry& registry) {
  registry.Register(Def("ConvGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2}, FloatTypes())
                        .SkipsUnusedOutputs()
                        .Kernel<ConvGradKernel>());
}

}  // namespace tob
