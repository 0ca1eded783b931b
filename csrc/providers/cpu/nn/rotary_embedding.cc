// RotaryEmbedding (ai.onnx 23): rotates the first rotary_dim values of every head by the angles
// of the token's position. X is 4-D [batch, heads, seq, head_size] or 3-D [batch, seq, heads *
// head_size] (num_heads given). With position_ids [batch, seq] the caches are tables
// [max_position, rotary_dim / 2] indexed by position; without, they are [batch, seq,
// rotary_dim / 2] already. Pairs (x1, x2) are the two halves of the rotated part, or its
// even/odd values when interleaved:
//   x1' = cos x1 - sin x2,   x2' = sin x1 + cos x2
// The values past rotary_dim pass through. 16-bit types compute in float32.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "providers/cpu/float_compute.h"

namespace tob {

namespace {

// A float32 value rounded to the 16-bit type T and widened back.
template <typename T>
float Round(float v) {
  return static_cast<float>(T(v));
}

// ai.tob's float32 rotation of one head, the chain's arithmetic bit for bit: the four products are
// stored before they are combined, in loops of their own, so that the compiler cannot contract a
// product and a sum into one fused multiply-add (which rounds once where the chain's Mul and Add
// nodes round twice). `products` holds 4 * half floats.
template <bool kInterleaved>
void ChainRotateFloat(const float* x, const float* c, const float* s, int64_t half, float* products, float* y) {
  float* x1c = products;
  float* x2s = products + half;
  float* x2c = products + 2 * half;
  float* x1s = products + 3 * half;
  for (int64_t k = 0; k < half; ++k) {  // contiguous halves: vectorised
    const float x1 = x[kInterleaved ? 2 * k : k], x2 = x[kInterleaved ? 2 * k + 1 : k + half];
    x1c[k] = x1 * c[k];
    x2s[k] = x2 * s[k];
    x2c[k] = x2 * c[k];
    x1s[k] = x1 * s[k];
  }
  for (int64_t k = 0; k < half; ++k) {
    y[kInterleaved ? 2 * k : k] = x1c[k] - x2s[k];
    y[kInterleaved ? 2 * k + 1 : k + half] = x2c[k] + x1s[k];
  }
}

// ai.tob's form (optimizer/rotary_embedding_fusion.cc) repeats the chain it replaced bit for bit:
// in float32 that is cos x1 - sin x2 as written (two products, one difference); in 16-bit types
// each product is rounded to the type first, as the chain's Mul nodes store them.
class RotaryEmbeddingKernel final : public OpKernel {
 public:
  RotaryEmbeddingKernel(const Node& node, bool interleaved, int64_t rotary_dim, int64_t num_heads)
      : OpKernel(node),
        interleaved_(interleaved),
        rotary_dim_(rotary_dim),
        num_heads_(num_heads),
        chain_(node.domain() == kTobDomain) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t interleaved = 0, rotary_dim = 0, num_heads = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("interleaved", &interleaved, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("rotary_embedding_dim", &rotary_dim, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("num_heads", &num_heads, int64_t{0}));
    if (rotary_dim < 0 || num_heads < 0)
      return InvalidModel(node.Describe(), ": rotary_embedding_dim and num_heads must not be negative");
    return MakeKernel<RotaryEmbeddingKernel>(node, interleaved != 0, rotary_dim, num_heads);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& cos_cache = *ctx.input(1);
    const Tensor& sin_cache = *ctx.input(2);
    const Tensor* positions = ctx.input(3);
    Tensor& y = *ctx.output(0);
    if (x.rank() != 3 && x.rank() != 4) return ctx.Fail("X must be 3-D or 4-D, got ", ShapeToString(x.shape()));
    const bool three_d = x.rank() == 3;
    const int64_t batch = x.dim(0), seq = three_d ? x.dim(1) : x.dim(2);
    const int64_t heads = three_d ? num_heads_ : x.dim(1);
    if (three_d && (heads <= 0 || x.dim(2) % heads != 0))
      return ctx.Fail("X's hidden size ", x.dim(2), " is not a multiple of num_heads ", num_heads_);
    const int64_t head_size = three_d ? x.dim(2) / heads : x.dim(3);
    const int64_t rotary_dim = rotary_dim_ == 0 ? head_size : rotary_dim_;
    if (rotary_dim > head_size || rotary_dim % 2 != 0)
      return ctx.Fail("rotary_embedding_dim ", rotary_dim, " must be even and at most the head size ", head_size);
    const int64_t half = rotary_dim / 2;
    if (cos_cache.dtype() != x.dtype() || sin_cache.dtype() != x.dtype() || cos_cache.shape() != sin_cache.shape())
      return ctx.Fail("cos_cache and sin_cache must have X's dtype and one shape");
    if (positions != nullptr) {
      if (cos_cache.rank() != 2 || cos_cache.dim(1) != half || positions->shape() != Shape{batch, seq})
        return ctx.Fail("with position_ids [", batch, ", ", seq, "] the caches must be [max_position, ", half,
                        "], got ", ShapeToString(cos_cache.shape()), " and position_ids ",
                        ShapeToString(positions->shape()));
      const int64_t* pos = positions->data<int64_t>();
      for (int64_t i = 0; i < positions->numel(); ++i)
        if (pos[i] < 0 || pos[i] >= cos_cache.dim(0))
          return ctx.Fail("position_ids[", i, "] = ", pos[i], " is outside the caches' ", cos_cache.dim(0),
                          " positions");
    } else if (cos_cache.shape() != Shape{batch, seq, half}) {
      return ctx.Fail("without position_ids the caches must be [", batch, ", ", seq, ", ", half, "], got ",
                      ShapeToString(cos_cache.shape()));
    }
    // Offsets of (b, h, s): 4-D [B, H, S, D] or 3-D [B, S, H * D].
    const int64_t batch_stride = heads * seq * head_size;
    const int64_t head_stride = three_d ? head_size : seq * head_size;
    const int64_t seq_stride = three_d ? heads * head_size : head_size;
    return DispatchFloat(ctx, x.dtype(), [&]<typename T>() -> Status {
      using C = ComputeType<T>;
      const T* xp = x.data<T>();
      const T* cp = cos_cache.data<T>();
      const T* sp = sin_cache.data<T>();
      T* yp = y.data<T>();
      const int64_t* pos = positions != nullptr ? positions->data<int64_t>() : nullptr;
      // Work items walk X in memory order: (b, h) with s inside for 4-D X, (b, s) with h inside for
      // 3-D; each is one (b, h, s) row of head_size values.
      const int64_t outer = three_d ? batch * seq : batch * heads, inner = three_d ? heads : seq;
      ParallelFor(ctx.thread_pool(), outer, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inner * head_size)),
                  [&](int64_t begin, int64_t end) {
                    std::vector<float> products;  // ai.tob's float32 form: [4, half]
                    if (chain_ && std::is_same_v<T, float>) products.resize(static_cast<size_t>(4 * half));
                    for (int64_t o = begin; o < end; ++o)
                      for (int64_t j = 0; j < inner; ++j) {
                        const int64_t b = o / (three_d ? seq : heads);
                        const int64_t s = three_d ? o % seq : j, h = three_d ? j : o % heads;
                        const int64_t bs = b * seq + s;
                        const int64_t row = pos != nullptr ? pos[bs] : bs;  // cache row of this token
                        const T* c = cp + row * half;
                        const T* sn = sp + row * half;
                        const int64_t off = b * batch_stride + h * head_stride + s * seq_stride;
                        const T* xr = xp + off;
                        T* yr = yp + off;
                        if constexpr (std::is_same_v<T, float>) {
                          if (chain_) {
                            if (interleaved_) ChainRotateFloat<true>(xr, c, sn, half, products.data(), yr);
                            else ChainRotateFloat<false>(xr, c, sn, half, products.data(), yr);
                            std::copy(xr + rotary_dim, xr + head_size, yr + rotary_dim);
                            continue;
                          }
                        }
                        for (int64_t k = 0; k < half; ++k) {
                          const int64_t i1 = interleaved_ ? 2 * k : k, i2 = interleaved_ ? 2 * k + 1 : k + half;
                          const C x1 = static_cast<C>(xr[i1]), x2 = static_cast<C>(xr[i2]);
                          const C ck = static_cast<C>(c[k]), sk = static_cast<C>(sn[k]);
                          if constexpr (kIs16BitFloat<T>) {
                            if (chain_) {  // each product rounded to T, as the chain's Mul nodes do
                              yr[i1] = static_cast<T>(Round<T>(x1 * ck) - Round<T>(x2 * sk));
                              yr[i2] = static_cast<T>(Round<T>(x2 * ck) + Round<T>(x1 * sk));
                              continue;
                            }
                          }
                          yr[i1] = static_cast<T>(ck * x1 - sk * x2);
                          yr[i2] = static_cast<T>(sk * x1 + ck * x2);
                        }
                        std::copy(xr + rotary_dim, xr + head_size, yr + rotary_dim);
                      }
                  });
      return Status::OK();
    });
  }

 private:
  bool interleaved_;
  int64_t rotary_dim_;
  int64_t num_heads_;
  bool chain_;
};

}  // namespace

void RegisterCpuRotaryEmbeddingKernels(KernelRegistry& registry) {
  registry.Register(Def("RotaryEmbedding")
                        .Versions(23)
                        .Constraint("T", {0, 1, 2}, {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
                        .Constraint("M", {3}, {DType::kInt64})
                        .Kernel<RotaryEmbeddingKernel>());
  // ai.tob's, at any opset: what optimizer/rotary_embedding_fusion.cc emits below opset 23.
  registry.Register(Def("RotaryEmbedding")
                        .Domain(kTobDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1, 2}, {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
                        .Constraint("M", {3}, {DType::kInt64})
                        .Kernel<RotaryEmbeddingKernel>());
}

}  // namespace tob
