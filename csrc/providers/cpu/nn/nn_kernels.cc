#include "providers/cpu/nn/nn_kernels.h"

namespace tob {

void RegisterCpuNnKernels(KernelRegistry& registry) {
  RegisterCpuMatMulKernels(registry);
  RegisterCpuConvKernels(registry);
  RegisterCpuConvTransposeKernels(registry);
  RegisterCpuPoolKernels(registry);
  RegisterCpuBatchNormKernels(registry);
  RegisterCpuLayerNormKernels(registry);
  RegisterCpuSoftmaxKernels(registry);
}

}  // namespace tob
