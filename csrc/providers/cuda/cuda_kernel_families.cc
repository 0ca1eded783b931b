// Declares and calls every function of the CUDA kernel list (cuda_kernel_families.inc).
#include "framework/kernel_registry.h"

namespace tob {

#define TOB_CUDA_KERNELS(family, function) void function(KernelRegistry& registry);
#include "providers/cuda/cuda_kernel_families.inc"
#undef TOB_CUDA_KERNELS

void RegisterCudaKernels(KernelRegistry& registry) {
#define TOB_CUDA_KERNELS(family, function) \
  registry.BeginFamily(#family);           \
  function(registry);
#include "providers/cuda/cuda_kernel_families.inc"
#undef TOB_CUDA_KERNELS
  registry.BeginFamily("");
}

}  // namespace tob
