#include "providers/cuda/cuda_provider.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "kernels/elementwise/cast.h"
#include "providers/cuda/cuda_allocator.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"

namespace tob {

int CudaDeviceCount() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver / no device: not an error for the caller
      return 0;
    }
    return n;
  }();
  return count;
}

bool CudaDeviceAvailable() { return CudaDeviceCount() > 0; }

CudaExecutionProvider::CudaExecutionProvider(int device)
    : device_(device), allocator_(CudaAllocator::ForDevice(device)) {}

std::shared_ptr<Allocator> CudaExecutionProvider::allocator() const { return allocator_; }

StatusOr<CudaDeviceContext*> CudaExecutionProvider::context() const { return CudaDeviceContext::Get(device_); }

Status CudaExecutionProvider::CopyTensor(const Tensor& src, Tensor& dst) const {
  if (src.dtype() != dst.dtype() || src.nbytes() != dst.nbytes())
    return InvalidArgument("CopyTensor: source ", DTypeName(src.dtype()), ShapeToString(src.shape()),
                           " does not match destination ", DTypeName(dst.dtype()), ShapeToString(dst.shape()));
  const Device from = src.device(), to = dst.device();
  for (const Device& d : {from, to})
    if (d.type == DeviceType::kCUDA && d.index != device_)
      return InvalidArgument("CopyTensor on ", device().ToString(), " given a tensor on ", d.ToString());
  if (src.nbytes() == 0) return Status::OK();
  if (from.type == DeviceType::kCPU && to.type == DeviceType::kCPU) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(CudaDeviceContext * ctx, context());
  CudaDeviceGuard guard(device_);
  TOB_RETURN_IF_ERROR(guard.status());
  const cudaMemcpyKind kind = from.type == DeviceType::kCPU ? cudaMemcpyHostToDevice
                              : to.type == DeviceType::kCPU ? cudaMemcpyDeviceToHost
                                                            : cudaMemcpyDeviceToDevice;
  TOB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), kind, ctx->stream()));
  // A host buffer may be read or freed as soon as we return.
  if (kind != cudaMemcpyDeviceToDevice) TOB_RETURN_IF_ERROR(ctx->Synchronize());
  return Status::OK();
}

bool CudaExecutionProvider::CanRun(const Node& node, int opset, const KernelRegistry& registry,
                                   std::string* why_not) const {
  if (!ExecutionProvider::CanRun(node, opset, registry, why_not)) return false;
  if (node.op_type() == "Cast" && node.domain().empty()) {
    int64_t to = 0;
    const DType from = node.input(0) ? node.input(0)->type().dtype : DType::kUndefined;
    if (node.GetAttr("to", &to).ok() &&
        !cuda::CastSupported(ToElementType(from), ToElementType(DTypeFromOnnx(static_cast<int32_t>(to))))) {
      if (why_not) *why_not = StrCat(kCudaProvider, " cannot Cast to ONNX type ", to);
      return false;
    }
  }
  return true;
}

}  // namespace tob
