// ONNX Cast on the GPU (kernels/elementwise/cast.cu). The target type is validated when the kernel is built;
// CudaExecutionProvider::CanRun already declines targets launch_cast does not support.
#include "framework/kernel_registry.h"
#include "kernels/elementwise/cast.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"

namespace tob {

namespace {

class CudaCastKernel final : public OpKernel {
 public:
  CudaCastKernel(const Node& node, DType to) : OpKernel(node), to_(to) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t to = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("to", &to));
    const DType target = DTypeFromOnnx(static_cast<int32_t>(to));
    if (target == DType::kUndefined || !cuda::CastSupported(ToElementType(DType::kFloat32), ToElementType(target)))
      return NotImplemented(node.Describe(), ": ", kCudaProvider, " cannot Cast to ONNX type ", to);
    return MakeKernel<CudaCastKernel>(node, target);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (y.dtype() != to_ || y.numel() != x.numel())
      return ctx.Fail("output ", DTypeName(y.dtype()), ShapeToString(y.shape()), " does not match ", DTypeName(to_),
                      ShapeToString(x.shape()));
    if (!cuda::CastSupported(ToElementType(x.dtype()), ToElementType(to_)))
      return ctx.Fail("cannot cast ", DTypeName(x.dtype()), " to ", DTypeName(to_), " on CUDA");
    return CheckCuda("launch_cast", cuda::launch_cast(ToElementType(x.dtype()), ToElementType(to_), x.raw_data(),
                                                      y.raw_data(), x.numel(), dev->stream()));
  }

 private:
  DType to_;
};

}  // namespace

void RegisterCudaCastKernels(KernelRegistry& registry) {
  std::vector<DType> types = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt8, DType::kUInt8,
                              DType::kInt16,   DType::kInt32,   DType::kInt64,   DType::kBool};
  registry.Register(
      Def("Cast").Versions(6, 12).Provider(kCudaProvider).Constraint("T1", {0}, types).Kernel<CudaCastKernel>());
  types.push_back(DType::kBFloat16);
  // Opset 19 added 'saturate', which only concerns float8 targets (not run here).
  registry.Register(
      Def("Cast").Versions(13).Provider(kCudaProvider).Constraint("T1", {0}, types).Kernel<CudaCastKernel>());
}

}  // namespace tob
