// MemcpyFromHost / MemcpyToHost (domain com.microsoft), the copies the partitioner inserts where
// an edge joins the host and a GPU. The direction comes from where the tensors actually are, so
// the kernel is right whichever allocator the executor gave the output.
#include <cstring>

#include "framework/kernel_registry.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"

namespace tob {

namespace {

class CudaMemcpyKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<CudaMemcpyKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor& out = *ctx.output(0);
    if (out.dtype() != in.dtype() || out.nbytes() != in.nbytes())
      return ctx.Fail("output ", DTypeName(out.dtype()), ShapeToString(out.shape()), " does not match input ",
                      DTypeName(in.dtype()), ShapeToString(in.shape()));
    if (in.nbytes() == 0 || out.SharesDataWith(in)) return Status::OK();
    const Device from = in.device(), to = out.device();
    if (from.type == DeviceType::kCPU && to.type == DeviceType::kCPU) {
      std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
      return Status::OK();
    }
    if (from.type == DeviceType::kCUDA && to.type == DeviceType::kCUDA && from.index != to.index)
      return ctx.Fail("copies between two GPUs (", from.ToString(), " -> ", to.ToString(), ") go through the host");
    const int device = from.type == DeviceType::kCUDA ? from.index : to.index;
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, CudaDeviceContext::Get(device));
    CudaDeviceGuard guard(device);
    TOB_RETURN_IF_ERROR(guard.status());
    const cudaMemcpyKind kind = from.type == DeviceType::kCPU ? cudaMemcpyHostToDevice
                                : to.type == DeviceType::kCPU ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
    TOB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.raw_data(), in.raw_data(), in.nbytes(), kind, dev->stream()));
    // The host side is read (or may be freed) by the next host step as soon as we return.
    if (kind != cudaMemcpyDeviceToDevice) TOB_RETURN_IF_ERROR(dev->Synchronize());
    return Status::OK();
  }
};

}  // namespace

void RegisterCudaMemcpyKernels(KernelRegistry& registry) {
  registry.Register(Def("MemcpyFromHost")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0}, AllTypes())
                        .Kernel<CudaMemcpyKernel>());
  // The copy back lands in host memory: the executor allocates its output there.
  registry.Register(Def("MemcpyToHost")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0}, AllTypes())
                        .HostOutput(0)
                        .Kernel<CudaMemcpyKernel>());
}

}  // namespace tob
