// FlashAttention (com.microsoft) forward on the GPU (kernels/training/flash_attention.cu), float32
// with an optional float32 additive mask; the semantics and the checks are the CPU kernel's
// (providers/cpu/training/flash_attention.cc). FlashAttentionGrad and the 16-bit types run on
// the CPU provider.
#include <cmath>

#include "framework/kernel_registry.h"
#include "kernels/training/flash_attention.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"

namespace tob {

namespace {

class CudaFlashAttentionKernel final : public OpKernel {
 public:
  CudaFlashAttentionKernel(const Node& node, bool causal, float scale, bool has_scale)
      : OpKernel(node), causal_(causal), scale_(scale), has_scale_(has_scale) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t causal = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("is_causal", &causal, int64_t{0}));
    if (causal != 0 && causal != 1) return InvalidModel(node.Describe(), ": is_causal must be 0 or 1, got ", causal);
    float scale = 0;
    const bool has_scale = node.FindAttribute("scale") != nullptr;
    if (has_scale) TOB_RETURN_IF_ERROR(node.GetAttr("scale", &scale));
    return MakeKernel<CudaFlashAttentionKernel>(node, causal != 0, scale, has_scale);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& q = *ctx.input(0);
    const Tensor& k = *ctx.input(1);
    const Tensor& v = *ctx.input(2);
    if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
      return ctx.Fail("Q ", ShapeToString(q.shape()), ", K ", ShapeToString(k.shape()), " and V ",
                      ShapeToString(v.shape()), " must be 4-D [batch, heads, seq, head_size]");
    cuda::FlashForwardArgs a;
    a.batch = q.dim(0);
    a.heads = q.dim(1);
    a.q_seq = q.dim(2);
    a.head = q.dim(3);
    a.kv_heads = k.dim(1);
    a.kv_seq = k.dim(2);
    a.v_head = v.dim(3);
    if (k.dim(0) != a.batch || v.dim(0) != a.batch || k.dim(3) != a.head || v.dim(1) != a.kv_heads ||
        v.dim(2) != a.kv_seq)
      return ctx.Fail("K ", ShapeToString(k.shape()), " and V ", ShapeToString(v.shape()), " do not match Q ",
                      ShapeToString(q.shape()));
    if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0)
      return ctx.Fail("Q's ", a.heads, " heads are not a multiple of K/V's ", a.kv_heads);
    if (a.head > cuda::kFlashMaxHeadSize || a.v_head > cuda::kFlashMaxHeadSize)
      return ctx.Fail("head sizes ", a.head, " / ", a.v_head, " exceed the CUDA kernel's ", cuda::kFlashMaxHeadSize);
    if (const Tensor* mask = ctx.input(3); mask != nullptr) {
      if (mask->rank() < 1 || mask->rank() > 4 || mask->dtype() != DType::kFloat32)
        return ctx.Fail("attn_mask must be float32 of rank 1 to 4 on CUDA, got ", DTypeName(mask->dtype()),
                        ShapeToString(mask->shape()));
      const int64_t target[4] = {a.batch, a.heads, a.q_seq, a.kv_seq};
      Shape dims(4 - mask->rank(), 1);
      dims.insert(dims.end(), mask->shape().begin(), mask->shape().end());
      int64_t stride = 1;
      for (int d = 3; d >= 0; --d) {
        if (dims[d] != 1 && dims[d] != target[d])
          return ctx.Fail("attn_mask ", ShapeToString(mask->shape()), " does not broadcast to [", a.batch, ", ",
                          a.heads, ", ", a.q_seq, ", ", a.kv_seq, "]");
        a.mask_stride[d] = dims[d] == 1 ? 0 : stride;
        stride *= dims[d];
      }
      a.mask = mask->data<float>();
    }
    a.q = q.data<float>();
    a.k = k.data<float>();
    a.v = v.data<float>();
    a.y = ctx.output(0)->data<float>();
    a.lse = ctx.output(1) != nullptr ? ctx.output(1)->data<float>() : nullptr;
    a.scale = has_scale_ ? scale_ : static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head)));
    a.causal = causal_;
    return CheckCuda("launch_flash_attention_forward", cuda::launch_flash_attention_forward(a, dev->stream()));
  }

 private:
  bool causal_;
  float scale_;
  bool has_scale_;
};

}  // namespace

void RegisterCudaFlashAttentionKernels(KernelRegistry& registry) {
  registry.Register(Def("FlashAttention")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0, 1, 2}, {DType::kFloat32})
                        .Constraint("M", {3}, {DType::kFloat32})
                        .Kernel<CudaFlashAttentionKernel>());
}

}  // namespace tob
