// The blocked (NCHWc) convolution and its reorders, ops of the engine's domain (ai.tob) that only
// the NchwcLayout pass (optimizer/nchwc_layout.cc) puts in a graph:
//   ReorderToNchwc(X [N, C, H, W]) -> [N, Cb, H, W, 16]
//   ReorderFromNchwc(X [N, Cb, H, W, 16], channels = C) -> [N, C, H, W]
//   NchwcConv(X blocked, W [M, C, KH, KW], B?, Z blocked?) -> Y [N, Mb, OH, OW, 16]
// with Conv's attributes (group 1) and `activation` "" or "Relu". W is packed once per session
// (PrePack; per call when it is not a constant); the tiles (conv_nchwc.h) store the output blocks
// as they compute them. docs/architecture.md "The blocked layout (NCHWc)".
#include "providers/cpu/nn/conv_nchwc.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace conv_nchwc {

void ReorderToBlocked(const float* x, int64_t C, int64_t HW, int64_t cb0, int64_t cb1, float* y) {
  constexpr int64_t kChunk = 64;  // positions per pass: 16 source rows of 256 bytes stay in L1
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const int64_t lanes = std::min(kBlock, C - cb * kBlock);
    float* dst = y + cb * HW * kBlock;
    const float* src = x + cb * kBlock * HW;
    for (int64_t i0 = 0; i0 < HW; i0 += kChunk) {
      const int64_t i1 = std::min(HW, i0 + kChunk);
      for (int64_t i = i0; i < i1; ++i) {
        float* d = dst + i * kBlock;
        for (int64_t l = 0; l < lanes; ++l) d[l] = src[l * HW + i];
        for (int64_t l = lanes; l < kBlock; ++l) d[l] = 0.f;
      }
    }
  }
}

void ReorderFromBlocked(const float* x, int64_t C, int64_t HW, int64_t cb0, int64_t cb1, float* y) {
  constexpr int64_t kChunk = 64;
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const int64_t lanes = std::min(kBlock, C - cb * kBlock);
    const float* src = x + cb * HW * kBlock;
    float* dst = y + cb * kBlock * HW;
    for (int64_t i0 = 0; i0 < HW; i0 += kChunk) {
      const int64_t i1 = std::min(HW, i0 + kChunk);
      for (int64_t l = 0; l < lanes; ++l)
        for (int64_t i = i0; i < i1; ++i) dst[l * HW + i] = src[i * kBlock + l];
    }
  }
}

void ZeroSpareLanes(float* y, int64_t images, int64_t C, int64_t HW) {
  const int64_t used = C % kBlock;
  if (used == 0) return;
  const int64_t Cb = Blocks(C);
  for (int64_t n = 0; n < images; ++n) {
    float* last = y + ((n * Cb + Cb - 1) * HW) * kBlock;
    for (int64_t i = 0; i < HW; ++i) std::fill(last + i * kBlock + used, last + (i + 1) * kBlock, 0.f);
  }
}

void PadBlocked(const float* x, int64_t H, int64_t W, int64_t pt, int64_t pl, int64_t Hp, int64_t Wp, int64_t cb0,
                int64_t cb1, float* y) {
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    const float* src = x + cb * H * W * kBlock;
    float* dst = y + cb * Hp * Wp * kBlock;
    for (int64_t h = 0; h < Hp; ++h) {
      float* row = dst + h * Wp * kBlock;
      const int64_t ih = h - pt;
      if (ih < 0 || ih >= H) {
        std::memset(row, 0, static_cast<size_t>(Wp * kBlock) * sizeof(float));
        continue;
      }
      const int64_t right = std::max<int64_t>(0, Wp - pl - W);
      std::memset(row, 0, static_cast<size_t>(pl * kBlock) * sizeof(float));
      std::memcpy(row + pl * kBlock, src + ih * W * kBlock, static_cast<size_t>(W * kBlock) * sizeof(float));
      std::memset(row + (pl + W) * kBlock, 0, static_cast<size_t>(right * kBlock) * sizeof(float));
    }
  }
}

int64_t PackedBlockStride(int64_t C, int64_t KK) { return Blocks(C) * KK * kBlock * kBlock + kWeightBlockPad; }

void PackWeights(const float* w, int64_t M, int64_t C, int64_t KK, float* dst) {
  const int64_t Mb = Blocks(M), stride = PackedBlockStride(C, KK);
  std::memset(dst, 0, static_cast<size_t>(Mb * stride) * sizeof(float));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t k = 0; k < KK; ++k) {
        const int64_t at =
            (m / kBlock) * stride + (((c / kBlock) * KK + k) * kBlock + c % kBlock) * kBlock + m % kBlock;
        dst[at] = w[(m * C + c) * KK + k];
      }
}

}  // namespace conv_nchwc

namespace {

using conv_nchwc::kBlock;
using conv_nchwc::Tap;

std::atomic<int64_t> g_nchwc_convs{0};

// A task covers a pair of output blocks for about this many output positions (8 register tiles):
// whole rows of a narrow image, or a part of a wide row.
constexpr int64_t kTaskPositions = 8 * conv_nchwc::kTileRows;
// Taps per K block: the weights of 16 taps of two output blocks (32 KiB) stay in L1 while every
// tile of the task runs over them; the tiles accumulate the K blocks in the output.
constexpr int64_t kBlockTaps = 16;
// Packed weights up to this size stay in L2 through the whole conv.
constexpr int64_t kSmallWeightBytes = int64_t{256} << 10;

// One image's geometry for the blocked conv, with no padding left (conv_nchwc::PadBlocked made a
// bordered copy); a pointwise conv is one row of H * W positions.
struct BlockedGeometry {
  int64_t H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl;
};

BlockedGeometry MakeBlockedGeometry(const WindowGeometry& g) {
  if (g.IsPointwise()) return {1, g.in_size(), 1, g.out_size(), 1, 1, 1, 1, 1, 1, 0, 0};
  return {g.in[0],      g.in[1],      g.out[0],       g.out[1],       g.kernel[0],    g.kernel[1],
          g.strides[0], g.strides[1], g.dilations[0], g.dilations[1], g.pad_begin[0], g.pad_begin[1]};
}

// Y (blocked, Mb blocks) = act(conv(X blocked, Cb blocks) + bias + Z) for N images whose every
// window lies inside X (b.pt == b.pl == 0, no padding at the end); `packed` from
// conv_nchwc::PackWeights, `bias` null or Mb * 16 floats.
void BlockedConv2D(ThreadPool* pool, const float* x, const float* packed, const float* bias, const float* z, float* y,
                   int64_t N, int64_t Cb, int64_t Mb, const BlockedGeometry& b, bool relu) {
  const int64_t KK = b.KH * b.KW, ntaps = Cb * KK;
  const int64_t wblock = conv_nchwc::PackedBlockStride(Cb * kBlock, KK);
  const int64_t in_plane = b.H * b.W * kBlock, out_plane = b.OH * b.OW * kBlock;
  const int64_t in_image = Cb * in_plane, out_image = Mb * out_plane;
  // Every tap reads every position inside X: the offsets from a position's window origin.
  std::vector<Tap> taps(static_cast<size_t>(ntaps));
  for (int64_t cb = 0; cb < Cb; ++cb)
    for (int64_t kh = 0; kh < b.KH; ++kh)
      for (int64_t kw = 0; kw < b.KW; ++kw) {
        Tap& tap = taps[static_cast<size_t>((cb * b.KH + kh) * b.KW + kw)];
        tap.x = cb * in_plane + (kh * b.dh * b.W + kw * b.dw) * kBlock;
        tap.w = ((cb * b.KH + kh) * b.KW + kw) * kBlock * kBlock;
        tap.valid = ~0u;
      }
  const int64_t pairs = (Mb + 1) / 2;
  const int64_t OH = b.OH, OW = b.OW;
  // A row longer than a task splits into chunks of even lengths (196 = 66 + 66 + 64, not 96 + 96 + 4:
  // a task of a few positions reuses its weights a few times), shorter rows group into tasks of even
  // row counts (14 = 5 + 5 + 4, not 6 + 6 + 2).
  const int64_t chunks = (OW + kTaskPositions - 1) / kTaskPositions;
  const int64_t chunk_len = (OW + chunks - 1) / chunks;
  const int64_t max_rows = chunks > 1 ? 1 : std::max<int64_t>(1, kTaskPositions / std::max<int64_t>(1, OW));
  const int64_t row_groups = (OH + max_rows - 1) / max_rows;
  const int64_t rows_per_task = (OH + row_groups - 1) / row_groups;
  const int64_t tasks = pairs * N * row_groups * chunks;
  // Consecutive tasks of a thread share their weights (a pair's, streamed from L2 or memory once
  // for all its positions) unless the whole packed weight is small: then they share their input
  // positions instead (every pair of one block of positions in a row, the input block in L1).
  const bool positions_major = Mb * wblock * static_cast<int64_t>(sizeof(float)) <= kSmallWeightBytes;
  // One slot per thread, each claiming tasks one at a time: a preempted worker holds back only
  // the task it is on (a contiguous share per thread would wait for the slowest one).
  const int64_t threads = pool != nullptr ? std::max(1, pool->num_threads()) : 1;
  const int64_t slots = std::min(threads, tasks);
  std::atomic<int64_t> next{0};
  // The pair a task computes: position-major tasks take the pairs in turn, weight-major tasks run
  // every position of one pair before the next pair.
  const auto pair_of = [&](int64_t t) { return positions_major ? t % pairs : t / (N * row_groups * chunks); };
  // The weights of the next K block (or of the first K block of the task a thread is likely to
  // claim next) are prefetched into L2 while a K block runs: a weight-major conv streams its packed
  // weights from memory once, and the hardware prefetchers alone left ResNet-50's last stages 10-25%
  // slower (docs/performance.md, "NchwcConv's last stages").
  const int64_t first_block_floats = std::min(ntaps, kBlockTaps) * kBlock * kBlock;
  ParallelFor(pool, slots, 1, [&](int64_t slot_begin, int64_t slot_end) {
    for (int64_t slot = slot_begin; slot < slot_end; ++slot)
      for (int64_t t = next++; t < tasks; t = next++) {
        int64_t rest = t;
        if (positions_major) rest /= pairs;
        const int64_t chunk = rest % chunks;
        rest /= chunks;
        const int64_t rg = rest % row_groups;
        rest /= row_groups;
        const int64_t n = rest % N;
        const int64_t pair = pair_of(t);
        const int64_t mb = pair * 2;
        const int blocks = static_cast<int>(std::min<int64_t>(2, Mb - mb));
        const float* xi = x + n * in_image;
        const float* w = packed + mb * wblock;
        const float* bias_p = bias != nullptr ? bias + mb * kBlock : nullptr;
        const int64_t oh0 = rg * rows_per_task, oh1 = std::min(OH, oh0 + rows_per_task);
        const int64_t ow_begin = chunk * chunk_len, ow_end = std::min(OW, ow_begin + chunk_len);
        // The row's positions in tiles of even sizes (49 = 10 + 10 + 10 + 10 + 9, not 4 x 12 + 1: a
        // tile of a few rows is latency-bound on its few accumulators).
        const int64_t span = ow_end - ow_begin, tiles = (span + conv_nchwc::kTileRows - 1) / conv_nchwc::kTileRows;
        const int64_t task_tiles = (oh1 - oh0) * tiles;
        for (int64_t k0 = 0; k0 < ntaps; k0 += kBlockTaps) {
          const int64_t k1 = std::min(ntaps, k0 + kBlockTaps);
          // What to prefetch, shared out among the K block's tiles (each takes its slice of both blocks).
          const float* pf = nullptr;
          int64_t pf_floats = 0;
          if (positions_major) {
            // The whole packed W stays in L2.
          } else if (k1 < ntaps) {
            pf = w + k1 * kBlock * kBlock;
            pf_floats = (std::min(ntaps, k1 + kBlockTaps) - k1) * kBlock * kBlock;
          } else if (t + slots < tasks && pair_of(t + slots) != pair) {
            pf = packed + pair_of(t + slots) * 2 * wblock;
            pf_floats = first_block_floats;
          }
          int64_t tile_index = 0;
          for (int64_t oh = oh0; oh < oh1; ++oh) {
            const int64_t out_row = n * out_image + mb * out_plane + oh * b.OW * kBlock;
            for (int64_t tile = 0, ow0 = ow_begin; tile < tiles; ++tile, ++tile_index) {
              const int rows = static_cast<int>(span / tiles + (tile < span % tiles ? 1 : 0));
              const int64_t at = out_row + ow0 * kBlock;
              const int64_t pf0 = pf_floats * tile_index / task_tiles / kBlock * kBlock;
              const int64_t pf1 = pf_floats * (tile_index + 1) / task_tiles / kBlock * kBlock;
              conv_nchwc::Tile(rows, blocks, xi + (oh * b.sh * b.W + ow0 * b.sw) * kBlock, b.sw * kBlock,
                               taps.data() + k0, k1 - k0, w, wblock, bias_p, z != nullptr ? z + at : nullptr, relu,
                               k0 == 0, k1 == ntaps, y + at, out_plane, pf != nullptr ? pf + pf0 : nullptr, pf1 - pf0);
              ow0 += rows;
            }
          }
        }
      }
  });
}

// Reads a blocked tensor's true channel count check: [N, Cb, H, W, 16].
bool IsBlocked(const Tensor& t) { return t.rank() == 5 && t.dim(4) == kBlock; }

class NchwcConvKernel final : public OpKernel {
 public:
  NchwcConvKernel(const Node& node, WindowAttributes attrs, bool relu)
      : OpKernel(node), attrs_(std::move(attrs)), relu_(relu) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    if (attrs.group != 1) return InvalidModel(node.Describe(), ": NchwcConv takes group 1, got group ", attrs.group);
    std::string activation;
    TOB_RETURN_IF_ERROR(node.GetAttr("activation", &activation, std::string()));
    if (!activation.empty() && activation != "Relu")
      return InvalidModel(node.Describe(), ": NchwcConv's activation must be empty or Relu, got '", activation, "'");
    return MakeKernel<NchwcConvKernel>(node, std::move(attrs), activation == "Relu");
  }

  Status PrePack(int input_index, const Tensor& constant, bool* packed) override {
    *packed = false;
    if (input_index != 1 || constant.dtype() != DType::kFloat32 || constant.rank() != 4) return Status::OK();
    const int64_t M = constant.dim(0), C = constant.dim(1), KK = constant.dim(2) * constant.dim(3);
    packed_w_.assign(static_cast<size_t>(conv_nchwc::Blocks(M) * conv_nchwc::PackedBlockStride(C, KK)), 0.f);
    conv_nchwc::PackWeights(constant.data<float>(), M, C, KK, packed_w_.data());
    packed_shape_ = constant.shape();
    *packed = true;
    return Status::OK();
  }
  size_t PrePackedBytes() const override { return packed_w_.size() * sizeof(float); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    const Tensor* bias = ctx.input(2);
    const Tensor* z = ctx.input(3);
    Tensor& y = *ctx.output(0);
    if (!IsBlocked(x) || w.rank() != 4)
      return ctx.Fail("expected X blocked [N, Cb, H, W, 16] and W [M, C, KH, KW], got ", ShapeToString(x.shape()),
                      " and ", ShapeToString(w.shape()));
    const int64_t N = x.dim(0), Cb = x.dim(1), M = w.dim(0), C = w.dim(1), Mb = conv_nchwc::Blocks(M);
    if (conv_nchwc::Blocks(C) != Cb)
      return ctx.Fail("W ", ShapeToString(w.shape()), " has ", C, " input channels, which need ", conv_nchwc::Blocks(C),
                      " blocks; X has ", Cb);
    if (bias != nullptr && (bias->rank() != 1 || bias->dim(0) != M))
      return ctx.Fail("B must be [", M, "], got ", ShapeToString(bias->shape()));
    TOB_ASSIGN_OR_RETURN(WindowGeometry g, WindowGeometry::Compute(node(), attrs_, {N, C, x.dim(2), x.dim(3)},
                                                                   {w.dim(2), w.dim(3)}, false));
    const Shape expected{N, Mb, g.out[0], g.out[1], kBlock};
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    if (z != nullptr && z->shape() != expected)
      return ctx.Fail("Z must be blocked like the output, ", ShapeToString(expected), ", got ",
                      ShapeToString(z->shape()));
    if (y.numel() == 0) return Status::OK();
    const float* packed = packed_w_.data();
    std::vector<float> packed_here;
    if (packed_w_.empty() || w.shape() != packed_shape_) {
      packed_here.assign(static_cast<size_t>(Mb * conv_nchwc::PackedBlockStride(C, g.kernel_size())), 0.f);
      conv_nchwc::PackWeights(w.data<float>(), M, C, g.kernel_size(), packed_here.data());
      packed = packed_here.data();
    }
    std::vector<float> padded_bias;
    if (bias != nullptr) {
      padded_bias.assign(static_cast<size_t>(Mb * kBlock), 0.f);
      std::copy(bias->data<float>(), bias->data<float>() + M, padded_bias.begin());
    }
    BlockedGeometry b = MakeBlockedGeometry(g);
    const float* xin = x.data<float>();
    Tensor padded;
    if (b.pt > 0 || b.pl > 0 || g.pad_end[0] > 0 || g.pad_end[1] > 0) {
      // A padded conv reads a zero-bordered copy of X, so that every tap of every tile reads inside
      // it (the tiles' fast loop) instead of masking the positions over the border.
      const int64_t H = b.H, W = b.W, pt = b.pt, pl = b.pl;
      const int64_t Hp = H + pt + g.pad_end[0], Wp = W + pl + g.pad_end[1];
      TOB_ASSIGN_OR_RETURN(padded, ctx.AllocateScratch(DType::kFloat32, {N * Cb * Hp * Wp * kBlock}));
      float* dst = padded.data<float>();
      ParallelFor(ctx.thread_pool(), N * Cb, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, Hp * Wp * kBlock)),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t i = begin; i < end; ++i) {
                      const int64_t n = i / Cb, cb = i % Cb;
                      conv_nchwc::PadBlocked(xin + n * Cb * H * W * kBlock, H, W, pt, pl, Hp, Wp, cb, cb + 1,
                                             dst + n * Cb * Hp * Wp * kBlock);
                    }
                  });
      xin = dst;
      b.H = Hp;
      b.W = Wp;
      b.pt = b.pl = 0;
    }
    BlockedConv2D(ctx.thread_pool(), xin, packed, bias != nullptr ? padded_bias.data() : nullptr,
                  z != nullptr ? z->data<float>() : nullptr, y.data<float>(), N, Cb, Mb, b, relu_);
    conv_nchwc::ZeroSpareLanes(y.data<float>(), N, M, g.out[0] * g.out[1]);
    g_nchwc_convs.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

 private:
  WindowAttributes attrs_;
  bool relu_;
  std::vector<float> packed_w_;  // set once by PrePack, read-only afterwards
  Shape packed_shape_;
};

class ReorderToNchwcKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<ReorderToNchwcKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.rank() != 4) return ctx.Fail("expected X [N, C, H, W], got ", ShapeToString(x.shape()));
    const int64_t N = x.dim(0), C = x.dim(1), HW = x.dim(2) * x.dim(3), Cb = conv_nchwc::Blocks(C);
    const Shape expected{N, Cb, x.dim(2), x.dim(3), kBlock};
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    const float* src = x.data<float>();
    float* dst = y.data<float>();
    ParallelFor(ctx.thread_pool(), N * Cb, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, HW * kBlock)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t i = begin; i < end; ++i) {
                    const int64_t n = i / Cb, cb = i % Cb;
                    conv_nchwc::ReorderToBlocked(src + n * C * HW, C, HW, cb, cb + 1, dst + n * Cb * HW * kBlock);
                  }
                });
    return Status::OK();
  }
};

class ReorderFromNchwcKernel final : public OpKernel {
 public:
  ReorderFromNchwcKernel(const Node& node, int64_t channels) : OpKernel(node), channels_(channels) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t channels = -1;
    TOB_RETURN_IF_ERROR(node.GetAttr("channels", &channels, int64_t{-1}));
    if (channels < 1)
      return InvalidModel(node.Describe(), ": ReorderFromNchwc needs a positive `channels` attribute, got ", channels);
    return MakeKernel<ReorderFromNchwcKernel>(node, channels);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t C = channels_;
    if (!IsBlocked(x) || x.dim(1) != conv_nchwc::Blocks(C))
      return ctx.Fail("expected X [N, ", conv_nchwc::Blocks(C), ", H, W, 16] for ", C, " channels, got ",
                      ShapeToString(x.shape()));
    const int64_t N = x.dim(0), Cb = x.dim(1), HW = x.dim(2) * x.dim(3);
    const Shape expected{N, C, x.dim(2), x.dim(3)};
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    const float* src = x.data<float>();
    float* dst = y.data<float>();
    ParallelFor(ctx.thread_pool(), N * Cb, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, HW * kBlock)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t i = begin; i < end; ++i) {
                    const int64_t n = i / Cb, cb = i % Cb;
                    conv_nchwc::ReorderFromBlocked(src + n * Cb * HW * kBlock, C, HW, cb, cb + 1, dst + n * C * HW);
                  }
                });
    return Status::OK();
  }

 private:
  int64_t channels_;
};

}  // namespace

namespace conv_nchwc {

int64_t BlockedConvsRun() { return g_nchwc_convs.load(std::memory_order_relaxed); }

}  // namespace conv_nchwc

void RegisterCpuNchwcConvKernels(KernelRegistry& registry) {
  const std::vector<DType> f32{DType::kFloat32};
  registry.Register(
      Def("NchwcConv").Domain(kTobDomain).Versions(1).Constraint("T", {0, 1, 2, 3}, f32).Kernel<NchwcConvKernel>());
  registry.Register(
      Def("ReorderToNchwc").Domain(kTobDomain).Versions(1).Constraint("T", {0}, f32).Kernel<ReorderToNchwcKernel>());
  registry.Register(Def("ReorderFromNchwc")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0}, f32)
                        .Kernel<ReorderFromNchwcKernel>());
}

}  // namespace tob
