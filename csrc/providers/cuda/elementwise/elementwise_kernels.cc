// The ops of kernels/elementwise/elementwise_ops.inc on the GPU (kernels/elementwise/elementwise.cu).
#include <string>

#include "framework/kernel_registry.h"
#include "kernels/elementwise/elementwise.h"
#include "providers/cuda/cuda_broadcast.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"

namespace tob {

namespace {

class CudaBinaryKernel final : public OpKernel {
 public:
  CudaBinaryKernel(const Node& node, cuda::BinaryOp op) : OpKernel(node), op_(op) {}

  static KernelFactory Factory(cuda::BinaryOp op) {
    return [op](const Node& n) { return MakeKernel<CudaBinaryKernel>(n, op); };
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    if (a.dtype() != b.dtype() || y.dtype() != a.dtype())
      return ctx.Fail("inputs and output must share one dtype, got ", DTypeName(a.dtype()), ", ", DTypeName(b.dtype()),
                      " -> ", DTypeName(y.dtype()));
    const int64_t n = y.numel();
    const bool plain = (a.numel() == n || a.numel() == 1) && (b.numel() == n || b.numel() == 1) &&
                       (a.shape() == y.shape() || a.numel() == 1) && (b.shape() == y.shape() || b.numel() == 1);
    cuda::BroadcastIndexing indexing;
    if (!plain) {
      auto idx = MakeBroadcastIndexing(y.shape(), a.shape(), b.shape());
      if (!idx.ok()) return ctx.Fail(idx.status().message());
      indexing = idx.value();
    }
    return CheckCuda(
        "launch_binary_elementwise",
        cuda::launch_binary_elementwise(op_, ToElementType(a.dtype()), a.raw_data(), a.numel(), b.raw_data(), b.numel(),
                                        y.raw_data(), n, plain ? nullptr : &indexing, dev->stream()));
  }

 private:
  cuda::BinaryOp op_;
};

class CudaUnaryKernel final : public OpKernel {
 public:
  CudaUnaryKernel(const Node& node, cuda::UnaryOp op) : OpKernel(node), op_(op) {}

  static KernelFactory Factory(cuda::UnaryOp op) {
    return [op](const Node& n) { return MakeKernel<CudaUnaryKernel>(n, op); };
  }

  // ONNX Gelu (opset 20): approximate = "none" (erf) or "tanh".
  static StatusOr<std::unique_ptr<OpKernel>> CreateOnnxGelu(const Node& node) {
    std::string approximate;
    TOB_RETURN_IF_ERROR(node.GetAttr("approximate", &approximate, std::string("none")));
    if (approximate == "none") return MakeKernel<CudaUnaryKernel>(node, cuda::UnaryOp::kGelu);
    if (approximate == "tanh") return MakeKernel<CudaUnaryKernel>(node, cuda::UnaryOp::kGeluTanh);
    return InvalidModel(node.Describe(), ": attribute 'approximate' must be \"none\" or \"tanh\", got \"", approximate,
                        "\"");
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (x.dtype() != y.dtype() || x.numel() != y.numel())
      return ctx.Fail("output ", DTypeName(y.dtype()), ShapeToString(y.shape()), " does not match input ",
                      DTypeName(x.dtype()), ShapeToString(x.shape()));
    return CheckCuda("launch_unary_elementwise",
                     cuda::launch_unary_elementwise(op_, ToElementType(x.dtype()), x.raw_data(), y.raw_data(),
                                                    x.numel(), dev->stream()));
  }

 private:
  cuda::UnaryOp op_;
};

const std::vector<DType>& Floats() {
  static const std::vector<DType> types = {DType::kFloat32, DType::kFloat16, DType::kFloat64};
  return types;
}
const std::vector<DType>& FloatsBf16() {
  static const std::vector<DType> types = {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kBFloat16};
  return types;
}
// Add/Sub/Mul/Div also run int32/int64 here: shape arithmetic then stays on the device.
const std::vector<DType>& ArithmeticTypes(bool bf16) {
  static const std::vector<DType> without = {DType::kFloat32, DType::kFloat16, DType::kFloat64, DType::kInt32,
                                             DType::kInt64};
  static const std::vector<DType> with = {DType::kFloat32, DType::kFloat16, DType::kFloat64,
                                          DType::kInt32,   DType::kInt64,   DType::kBFloat16};
  return bf16 ? with : without;
}

}  // namespace

void RegisterCudaElementwiseKernels(KernelRegistry& registry) {
  const std::pair<const char*, cuda::BinaryOp> binary[] = {
#define TOB_CUDA_BINARY_OP(op, functor, onnx_name) {onnx_name, cuda::BinaryOp::op},
#define TOB_CUDA_UNARY_OP(op, functor, onnx_name)
#include "kernels/elementwise/elementwise_ops.inc"
#undef TOB_CUDA_BINARY_OP
#undef TOB_CUDA_UNARY_OP
  };
  for (const auto& [op, kind] : binary) {
    // bfloat16 joined the type set at opset 13 (and the 8/16-bit integers, not run here, at 14).
    registry.Register(Def(op)
                          .Versions(7, 12)
                          .Provider(kCudaProvider)
                          .Constraint("T", {0, 1}, ArithmeticTypes(false))
                          .Factory(CudaBinaryKernel::Factory(kind)));
    registry.Register(Def(op)
                          .Versions(13)
                          .Provider(kCudaProvider)
                          .Constraint("T", {0, 1}, ArithmeticTypes(true))
                          .Factory(CudaBinaryKernel::Factory(kind)));
  }
  const std::pair<const char*, cuda::UnaryOp> unary[] = {
#define TOB_CUDA_BINARY_OP(op, functor, onnx_name)
#define TOB_CUDA_UNARY_OP(op, functor, onnx_name) {onnx_name, cuda::UnaryOp::op},
#include "kernels/elementwise/elementwise_ops.inc"
#undef TOB_CUDA_BINARY_OP
#undef TOB_CUDA_UNARY_OP
  };
  for (const auto& [op, kind] : unary) {
    if (op == nullptr) continue;  // registered below
    registry.Register(Def(op)
                          .Versions(6, 12)
                          .Provider(kCudaProvider)
                          .Constraint("T", {0}, Floats())
                          .Factory(CudaUnaryKernel::Factory(kind)));
    registry.Register(Def(op)
                          .Versions(13)
                          .Provider(kCudaProvider)
                          .Constraint("T", {0}, FloatsBf16())
                          .Factory(CudaUnaryKernel::Factory(kind)));
  }
  registry.Register(Def("Gelu")
                        .Versions(20)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0}, FloatsBf16())
                        .Factory(CudaUnaryKernel::CreateOnnxGelu));
  registry.Register(Def("Gelu")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0}, FloatsBf16())
                        .Factory(CudaUnaryKernel::Factory(cuda::UnaryOp::kGelu)));
}

}  // namespace tob
