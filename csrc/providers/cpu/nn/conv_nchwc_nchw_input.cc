// NchwcConvNchwInput (ai.tob): a conv that reads a plain NCHW image and writes the blocked layout,
// which the NchwcLayout pass (optimizer/nchwc_layout.cc) puts at a network's stem:
//   NchwcConvNchwInput(X [N, C, H, W], W [M, C, KH, KW], B?) -> Y [N, Mb, OH, OW, 16]
// with Conv's attributes (group 1) and `activation` "" or "Relu". W is packed once per session
// (PrePack; per call when it is not a constant); a padded conv reads a zero-bordered NCHW copy of
// X, so every tap of every tile reads inside it. The tiles (conv_nchwc_nchw_input.h) store the
// output blocks as they compute them. docs/architecture.md "The blocked layout (NCHWc)".
#include "providers/cpu/nn/conv_nchwc_nchw_input.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "providers/cpu/nn/conv_nchwc.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace conv_nchwc {

int64_t NchwInputBlockStride(int64_t C, int64_t KK) { return C * KK * kBlock + kNchwInputBlockPad; }

void PackWeightsNchwInput(const float* w, int64_t M, int64_t C, int64_t KK, float* dst) {
  const int64_t Mb = Blocks(M), stride = NchwInputBlockStride(C, KK);
  std::memset(dst, 0, static_cast<size_t>(Mb * stride) * sizeof(float));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t t = 0; t < C * KK; ++t) dst[(m / kBlock) * stride + t * kBlock + m % kBlock] = w[m * C * KK + t];
}

}  // namespace conv_nchwc

namespace {

using conv_nchwc::kBlock;

std::atomic<int64_t> g_nchw_input_convs{0};

// Y (blocked, Mb blocks) = act(conv(X) + bias) for N NCHW images of C planes H x W whose every
// window lies inside X (a padded conv passes its bordered copy); `packed` from
// conv_nchwc::PackWeightsNchwInput, `bias` null or Mb * 16 floats.
void NchwInputConv2D(ThreadPool* pool, const float* x, const float* packed, const float* bias, float* y, int64_t N,
                     int64_t C, int64_t H, int64_t W, int64_t Mb, const WindowGeometry& g, bool relu) {
  const int64_t KH = g.kernel[0], KW = g.kernel[1], OH = g.out[0], OW = g.out[1];
  const int64_t sh = g.strides[0], sw = g.strides[1];
  const int64_t ntaps = C * KH * KW, wblock = conv_nchwc::NchwInputBlockStride(C, KH * KW);
  std::vector<int64_t> xoff(static_cast<size_t>(ntaps));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t kh = 0; kh < KH; ++kh)
      for (int64_t kw = 0; kw < KW; ++kw)
        xoff[static_cast<size_t>((c * KH + kh) * KW + kw)] = c * H * W + kh * g.dilations[0] * W + kw * g.dilations[1];
  const int64_t pairs = (Mb + 1) / 2, out_plane = OH * OW * kBlock;
  // A task is one output row of a pair of output blocks; consecutive tasks are the pairs of one
  // row, which read the same input rows (the packed weights of a stem, 37 KiB for ResNet's, stay
  // in L1/L2 throughout).
  const int64_t tasks = N * OH * pairs;
  const int64_t threads = pool != nullptr ? std::max(1, pool->num_threads()) : 1;
  const int64_t slots = std::min(threads, tasks);
  const int64_t tiles = (OW + conv_nchwc::kTileRows - 1) / conv_nchwc::kTileRows;
  std::atomic<int64_t> next{0};
  ParallelFor(pool, slots, 1, [&](int64_t slot_begin, int64_t slot_end) {
    for (int64_t slot = slot_begin; slot < slot_end; ++slot)
      for (int64_t t = next++; t < tasks; t = next++) {
        const int64_t pair = t % pairs, oh = (t / pairs) % OH, n = t / (pairs * OH);
        const int64_t mb = pair * 2;
        const int blocks = static_cast<int>(std::min<int64_t>(2, Mb - mb));
        const float* row = x + n * C * H * W + oh * sh * W;
        float* out = y + (n * Mb + mb) * out_plane + oh * OW * kBlock;
        const float* bias_p = bias != nullptr ? bias + mb * kBlock : nullptr;
        // Tiles of even sizes (112 = 10 x 11 + 2 x 1 would leave latency-bound tiles of one row).
        for (int64_t tile = 0, ow0 = 0; tile < tiles; ++tile) {
          const int rows = static_cast<int>(OW / tiles + (tile < OW % tiles ? 1 : 0));
          conv_nchwc::TileNchwInput(rows, blocks, row + ow0 * sw, sw, xoff.data(), ntaps, packed + mb * wblock, wblock,
                                    bias_p, relu, out + ow0 * kBlock, out_plane);
          ow0 += rows;
        }
      }
  });
}

class NchwcConvNchwInputKernel final : public OpKernel {
 public:
  NchwcConvNchwInputKernel(const Node& node, WindowAttributes attrs, bool relu)
      : OpKernel(node), attrs_(std::move(attrs)), relu_(relu) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    if (attrs.group != 1)
      return InvalidModel(node.Describe(), ": NchwcConvNchwInput takes group 1, got group ", attrs.group);
    std::string activation;
    TOB_RETURN_IF_ERROR(node.GetAttr("activation", &activation, std::string()));
    if (!activation.empty() && activation != "Relu")
      return InvalidModel(node.Describe(), ": NchwcConvNchwInput's activation must be empty or Relu, got '", activation,
                          "'");
    return MakeKernel<NchwcConvNchwInputKernel>(node, std::move(attrs), activation == "Relu");
  }

  Status PrePack(int input_index, const Tensor& constant, bool* packed) override {
    *packed = false;
    if (input_index != 1 || constant.dtype() != DType::kFloat32 || constant.rank() != 4) return Status::OK();
    const int64_t M = constant.dim(0), C = constant.dim(1), KK = constant.dim(2) * constant.dim(3);
    packed_w_.assign(static_cast<size_t>(conv_nchwc::Blocks(M) * conv_nchwc::NchwInputBlockStride(C, KK)), 0.f);
    conv_nchwc::PackWeightsNchwInput(constant.data<float>(), M, C, KK, packed_w_.data());
    packed_shape_ = constant.shape();
    *packed = true;
    return Status::OK();
  }
  size_t PrePackedBytes() const override { return packed_w_.size() * sizeof(float); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& w = *ctx.input(1);
    const Tensor* bias = ctx.input(2);
    Tensor& y = *ctx.output(0);
    if (x.rank() != 4 || w.rank() != 4)
      return ctx.Fail("expected X [N, C, H, W] and W [M, C, KH, KW], got ", ShapeToString(x.shape()), " and ",
                      ShapeToString(w.shape()));
    const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), Mb = conv_nchwc::Blocks(M);
    if (w.dim(1) != C) return ctx.Fail("W ", ShapeToString(w.shape()), " has ", w.dim(1), " input channels, X has ", C);
    if (bias != nullptr && (bias->rank() != 1 || bias->dim(0) != M))
      return ctx.Fail("B must be [", M, "], got ", ShapeToString(bias->shape()));
    TOB_ASSIGN_OR_RETURN(WindowGeometry g,
                         WindowGeometry::Compute(node(), attrs_, x.shape(), {w.dim(2), w.dim(3)}, false));
    const Shape expected{N, Mb, g.out[0], g.out[1], kBlock};
    if (y.shape() != expected)
      return ctx.Fail("output shape ", ShapeToString(y.shape()), " differs from ", ShapeToString(expected));
    if (y.numel() == 0) return Status::OK();
    const float* packed = packed_w_.data();
    std::vector<float> packed_here;
    if (packed_w_.empty() || w.shape() != packed_shape_) {
      packed_here.assign(static_cast<size_t>(Mb * conv_nchwc::NchwInputBlockStride(C, g.kernel_size())), 0.f);
      conv_nchwc::PackWeightsNchwInput(w.data<float>(), M, C, g.kernel_size(), packed_here.data());
      packed = packed_here.data();
    }
    std::vector<float> padded_bias;
    if (bias != nullptr) {
      padded_bias.assign(static_cast<size_t>(Mb * kBlock), 0.f);
      std::copy(bias->data<float>(), bias->data<float>() + M, padded_bias.begin());
    }
    const float* xin = x.data<float>();
    int64_t H = x.dim(2), W = x.dim(3);
    Tensor padded;
    if (g.pad_begin[0] > 0 || g.pad_begin[1] > 0 || g.pad_end[0] > 0 || g.pad_end[1] > 0) {
      // The stem's input is small (3 planes): a zero-bordered copy costs a fraction of the conv
      // and leaves the tiles one loop with no border test.
      const int64_t pt = g.pad_begin[0], pl = g.pad_begin[1];
      const int64_t Hp = H + pt + g.pad_end[0], Wp = W + pl + g.pad_end[1];
      TOB_ASSIGN_OR_RETURN(padded, ctx.AllocateScratch(DType::kFloat32, {N * C * Hp * Wp}));
      float* dst = padded.data<float>();
      const float* src = xin;
      ParallelFor(ctx.thread_pool(), N * C, 1, [&](int64_t begin, int64_t end) {
        for (int64_t p = begin; p < end; ++p) {
          float* plane = dst + p * Hp * Wp;
          std::memset(plane, 0, static_cast<size_t>(pt * Wp) * sizeof(float));
          for (int64_t h = 0; h < H; ++h) {
            float* r = plane + (pt + h) * Wp;
            std::memset(r, 0, static_cast<size_t>(pl) * sizeof(float));
            std::memcpy(r + pl, src + (p * H + h) * W, static_cast<size_t>(W) * sizeof(float));
            std::memset(r + pl + W, 0, static_cast<size_t>(Wp - pl - W) * sizeof(float));
          }
          std::memset(plane + (pt + H) * Wp, 0, static_cast<size_t>((Hp - pt - H) * Wp) * sizeof(float));
        }
      });
      xin = dst;
      H = Hp;
      W = Wp;
    }
    NchwInputConv2D(ctx.thread_pool(), xin, packed, bias != nullptr ? padded_bias.data() : nullptr, y.data<float>(), N,
                    C, H, W, Mb, g, relu_);
    conv_nchwc::ZeroSpareLanes(y.data<float>(), N, M, g.out[0] * g.out[1]);
    g_nchw_input_convs.fetch_add(1, std::memory_order_relaxed);
    return Status::OK();
  }

 private:
  WindowAttributes attrs_;
  bool relu_;
  std::vector<float> packed_w_;  // set once by PrePack, read-only afterwards
  Shape packed_shape_;
};

}  // namespace

namespace conv_nchwc {

int64_t NchwInputConvsRun() { return g_nchw_input_convs.load(std::memory_order_relaxed); }

}  // namespace conv_nchwc

void RegisterCpuNchwcConvNchwInputKernels(KernelRegistry& registry) {
  registry.Register(Def("NchwcConvNchwInput")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2}, {DType::kFloat32})
                        .Kernel<NchwcConvNchwInputKernel>());
}

}  // namespace tob
