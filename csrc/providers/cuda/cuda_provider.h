// The CUDA execution provider: device memory from the device's caching CudaAllocator, copies
// to and from the host on the device's stream, and the kernels of RegisterCudaKernels. The
// stream and cuBLAS handle belong to the device (CudaDeviceContext), shared by every provider
// instance on it, because a kernel finds them from the device its tensors live on: KernelContext
// carries no provider. One stream per device also keeps every launch and copy in order.
//
// This header needs no CUDA headers, so the session and the binding include it freely.
#pragma once

#include <memory>
#include <string>

#include "framework/execution_provider.h"

namespace tob {

class CudaAllocator;
class CudaDeviceContext;

// Whether at least one CUDA device is usable (a driver and a GPU). Never throws; false when the
// driver is missing or too old.
bool CudaDeviceAvailable();
// Number of usable CUDA devices (0 when none).
int CudaDeviceCount();

class CudaExecutionProvider final : public ExecutionProvider {
 public:
  // Touches no CUDA API: the device's stream and cuBLAS handle are created on first use, so an
  // error (bad index, no driver) surfaces as a Status from the first copy or kernel.
  explicit CudaExecutionProvider(int device = 0);

  std::string name() const override { return kCudaProvider; }
  Device device() const override { return Device{DeviceType::kCUDA, device_}; }
  std::shared_ptr<Allocator> allocator() const override;
  // Host <-> this device (synchronised: the host side may be read or freed on return) and
  // device <-> device on this device (stream-ordered).
  Status CopyTensor(const Tensor& src, Tensor& dst) const override;
  // The registry's answer, plus what a kernel def cannot express: Cast's target type.
  bool CanRun(const Node& node, int opset, const KernelRegistry& registry, std::string* why_not) const override;

  // The device's stream and cuBLAS handle.
  StatusOr<CudaDeviceContext*> context() const;

 private:
  int device_;
  std::shared_ptr<CudaAllocator> allocator_;
};

}  // namespace tob
