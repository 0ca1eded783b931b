// NchwcMaxPool (ai.tob): MaxPool on a blocked activation, which the NchwcLayout pass
// (optimizer/nchwc_layout.cc) puts where a pool reads a blocked conv's output, so that the chain
// stays blocked through it (ResNet's stem -> MaxPool -> first bottleneck):
//   NchwcMaxPool(X [N, Cb, H, W, 16]) -> Y [N, Cb, OH, OW, 16]
// with MaxPool's attributes (kernel_shape, strides, pads, dilations, ceil_mode, auto_pad); no
// Indices. Rows of (image, block) planes split across the pool; the taps of each window are
// clipped to the plane once per output position, each tap one 64-byte vector max. NaN propagates
// as in every MaxPool path (docs/architecture.md "Pooling (CPU)").
#include "providers/cpu/nn/pool_nchwc.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "providers/cpu/nn/conv_nchwc.h"
#include "providers/cpu/nn/window_geometry.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TOB_NCP_AVX512 1
#define TOB_AVX512_FN __attribute__((target("avx512f")))
#endif

namespace tob {

namespace conv_nchwc {

namespace {

// The taps [lo, hi) of a window starting at `start` (kernel k, dilation d) inside [0, size).
inline void Taps(int64_t start, int64_t d, int64_t k, int64_t size, int64_t* lo, int64_t* hi) {
  ValidOutputRange(start, d, size, k, lo, hi);
}

}  // namespace

bool WindowsAllTouchInput(const PoolWindow2D& p) {
  int64_t lo, hi;
  for (int64_t o = 0; o < p.OH; ++o) {
    Taps(o * p.sh - p.pt, p.dh, p.KH, p.H, &lo, &hi);
    if (lo >= hi) return false;
  }
  for (int64_t o = 0; o < p.OW; ++o) {
    Taps(o * p.sw - p.pl, p.dw, p.KW, p.W, &lo, &hi);
    if (lo >= hi) return false;
  }
  return true;
}

void MaxPoolBlockedRowsScalar(const float* x, const PoolWindow2D& p, int64_t oh0, int64_t oh1, float* y) {
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const int64_t h0 = oh * p.sh - p.pt;
    int64_t kh0, kh1;
    Taps(h0, p.dh, p.KH, p.H, &kh0, &kh1);
    for (int64_t ow = 0; ow < p.OW; ++ow) {
      const int64_t w0 = ow * p.sw - p.pl;
      int64_t kw0, kw1;
      Taps(w0, p.dw, p.KW, p.W, &kw0, &kw1);
      float best[kBlock];
      bool nan[kBlock] = {};
      std::fill(best, best + kBlock, -std::numeric_limits<float>::infinity());
      for (int64_t kh = kh0; kh < kh1; ++kh)
        for (int64_t kw = kw0; kw < kw1; ++kw) {
          const float* v = x + ((h0 + kh * p.dh) * p.W + w0 + kw * p.dw) * kBlock;
          for (int l = 0; l < kBlock; ++l) {
            nan[l] = nan[l] || std::isnan(v[l]);
            best[l] = v[l] > best[l] ? v[l] : best[l];
          }
        }
      float* out = y + (oh * p.OW + ow) * kBlock;
      for (int l = 0; l < kBlock; ++l) out[l] = nan[l] ? std::numeric_limits<float>::quiet_NaN() : best[l];
    }
  }
}

#if TOB_NCP_AVX512

namespace {

// The maximum by vmaxps (which would drop a NaN tap), the NaN lanes seen on the side by an
// unordered compare per tap, blended in at the end. G output positions at a time, each its own
// chain of maxima: one position's chain alone is bound by vmaxps' latency (4 cycles a tap).
template <int G>
TOB_AVX512_FN inline void MaxPoolPositions(const float* base, int64_t step, int64_t row_stride, int64_t tap_stride,
                                           int64_t rows, int64_t taps, float* out) {
  __m512 best[G];
  __mmask16 nan[G];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) {
    best[g] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    nan[g] = 0;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = base + r * row_stride;
    for (int64_t t = 0; t < taps; ++t) {
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const __m512 v = _mm512_loadu_ps(row + g * step + t * tap_stride);
        nan[g] |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        best[g] = _mm512_max_ps(best[g], v);
      }
    }
  }
  const __m512 qnan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) _mm512_storeu_ps(out + g * kBlock, _mm512_mask_mov_ps(best[g], nan[g], qnan));
}

TOB_AVX512_FN void MaxPoolRowsAvx512(const float* x, const PoolWindow2D& p, int64_t oh0, int64_t oh1, float* y) {
  constexpr int kGroup = 4;
  std::vector<int64_t> kw_lo(static_cast<size_t>(p.OW)), kw_hi(static_cast<size_t>(p.OW));
  // The interior columns [ow_a, ow_b): every tap of the row inside the plane.
  int64_t ow_a = p.OW, ow_b = p.OW;
  for (int64_t ow = 0; ow < p.OW; ++ow) {
    Taps(ow * p.sw - p.pl, p.dw, p.KW, p.W, &kw_lo[ow], &kw_hi[ow]);
    const bool full = kw_lo[ow] == 0 && kw_hi[ow] == p.KW;
    if (full && ow_a == p.OW) ow_a = ow;
    if (full) ow_b = ow + 1;
  }
  const int64_t step = p.sw * kBlock, row_stride = p.dh * p.W * kBlock, tap_stride = p.dw * kBlock;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    const int64_t h0 = oh * p.sh - p.pt;
    int64_t kh0, kh1;
    Taps(h0, p.dh, p.KH, p.H, &kh0, &kh1);
    float* out = y + oh * p.OW * kBlock;
    const float* row = x + (h0 + kh0 * p.dh) * p.W * kBlock;
    auto single = [&](int64_t ow) {
      const float* base = row + (ow * p.sw - p.pl + kw_lo[ow] * p.dw) * kBlock;
      MaxPoolPositions<1>(base, step, row_stride, tap_stride, kh1 - kh0, kw_hi[ow] - kw_lo[ow], out + ow * kBlock);
    };
    int64_t ow = 0;
    for (; ow < ow_a; ++ow) single(ow);
    for (; ow + kGroup <= ow_b; ow += kGroup)
      MaxPoolPositions<kGroup>(row + (ow * p.sw - p.pl) * kBlock, step, row_stride, tap_stride, kh1 - kh0, p.KW,
                               out + ow * kBlock);
    for (; ow < p.OW; ++ow) single(ow);
  }
}

}  // namespace

void MaxPoolBlockedRows(const float* x, const PoolWindow2D& p, int64_t oh0, int64_t oh1, float* y) {
  if (!Avx512Available()) return MaxPoolBlockedRowsScalar(x, p, oh0, oh1, y);
  MaxPoolRowsAvx512(x, p, oh0, oh1, y);
}

#else

void MaxPoolBlockedRows(const float* x, const PoolWindow2D& p, int64_t oh0, int64_t oh1, float* y) {
  MaxPoolBlockedRowsScalar(x, p, oh0, oh1, y);
}

#endif

}  // namespace conv_nchwc

namespace {

using conv_nchwc::kBlock;

std::atomic<int64_t> g_nchwc_pools{0};

class NchwcMaxPoolKernel final : public OpKernel {
 public:
  NchwcMaxPoolKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    if (attrs.kernel_shape.size() != 2)
      return InvalidModel(node.Describe(), ": NchwcMaxPool needs a 2-D kernel_shape, got ", attrs.kernel_shape.size(),
                          " dims");
    return MakeKernel<NchwcMaxPoolKernel>(node, std::move(attrs));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() != 5 || x.dim(4) != kBlock)
      return ctx.Fail("expected X blocked [N, Cb, H, W, 16], got ", ShapeToString(x.shape()));
    const int64_t N = x.dim(0), Cb = x.dim(1), H = x.dim(2), W = x.dim(3);
    TOB_ASSIGN_OR_RETURN(WindowGeometry g, WindowGeometry::Compute(node(), attrs_, {N, Cb * kBlock, H, W}, {}, false));
    const Shape expected{N, Cb, g.out[0], g.out[1], kBlock};
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    const conv_nchwc::PoolWindow2D p{H,
                                     W,
                                     g.out[0],
                                     g.out[1],
                                     g.kernel[0],
                                     g.kernel[1],
                                     g.strides[0],
                                     g.strides[1],
                                     g.dilations[0],
                                     g.dilations[1],
                                     g.pad_begin[0],
                                     g.pad_begin[1]};
    // A window entirely in the padding would have no maximum, and would write -inf into the spare
    // lanes that the next blocked conv reads as zeros.
    if (!conv_nchwc::WindowsAllTouchInput(p))
      return ctx.Fail("a window of this geometry lies entirely in the padding (kernel ", g.kernel[0], "x", g.kernel[1],
                      ", pads ", g.pad_begin[0], ",", g.pad_begin[1], ",", g.pad_end[0], ",", g.pad_end[1], ", input ",
                      H, "x", W, ")");
    if (y.numel() == 0) return Status::OK();
    const float* src = x.data<float>();
    float* dst = y.data<float>();
    const int64_t OH = g.out[0], OW = g.out[1];
    const int64_t rows = N * Cb * OH;
    // About 16 KiB of output per task.
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, OW * kBlock));
    ParallelFor(ctx.thread_pool(), rows, grain, [&](int64_t begin, int64_t end) {
      while (begin < end) {
        const int64_t plane = begin / OH, oh0 = begin % OH, oh1 = std::min(OH, oh0 + (end - begin));
        conv_nchwc::MaxPoolBlockedRows(src + plane * H * W * kBlock, p, oh0, oh1, dst + plane * OH * OW * kBlock);
        begin += oh1 - oh0;
      }
    });
    g_nchwc_pools.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

 private:
  WindowAttributes attrs_;
};

}  // namespace

namespace conv_nchwc {

int64_t BlockedPoolsRun() { return g_nchwc_pools.load(std::memory_order_relaxed); }

}  // namespace conv_nchwc

void RegisterCpuNchwcPoolKernels(KernelRegistry& registry) {
  registry.Register(Def("NchwcMaxPool")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0}, {DType::kFloat32})
                        .Kernel<NchwcMaxPoolKernel>());
}

}  // namespace tob
