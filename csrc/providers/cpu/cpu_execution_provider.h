// The CPU execution provider: host memory, the kernels registered under kCpuProvider
// (cpu_kernel_families.inc).
#pragma once

#include <memory>
#include <string>

#include "framework/execution_provider.h"

namespace tob {

class CpuExecutionProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return kCpuProvider; }
  Device device() const override { return Device{}; }
  std::shared_ptr<Allocator> allocator() const override { return CpuAllocator::Default(); }
  Status CopyTensor(const Tensor& src, Tensor& dst) const override;
};

}  // namespace tob
