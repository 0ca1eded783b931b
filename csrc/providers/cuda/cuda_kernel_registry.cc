#include "providers/cuda/cuda_kernels.h"

namespace tob {

void RegisterCudaKernels(KernelRegistry& registry) {
  RegisterCudaElementwiseKernels(registry);
  RegisterCudaCastKernels(registry);
  RegisterCudaGemmKernels(registry);
  RegisterCudaMemcpyKernels(registry);
  RegisterCudaOptimizerKernels(registry);
}

}  // namespace tob
