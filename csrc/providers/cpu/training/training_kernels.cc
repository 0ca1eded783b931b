#include "providers/cpu/training/training_kernels.h"

namespace tob {

void RegisterCpuTrainingKernels(KernelRegistry& registry) {
  RegisterCpuActivationGradKernels(registry);
  RegisterCpuSoftmaxGradKernels(registry);
  RegisterCpuLayerNormGradKernels(registry);
  RegisterCpuNllLossKernels(registry);
  RegisterCpuGatherGradKernels(registry);
  RegisterCpuConvGradKernels(registry);
  RegisterCpuMaxPoolGradKernels(registry);
  RegisterCpuBatchNormTrainingKernels(registry);
  RegisterCpuOptimizerKernels(registry);
  RegisterCpuLambOptimizerKernels(registry);
  RegisterCpuGradientControlKernels(registry);
}

}  // namespace tob
