#include "providers/cpu/tensor/tensor_kernels.h"

namespace tob {

void RegisterCpuTensorKernels(KernelRegistry& registry) {
  RegisterCpuReshapeKernels(registry);
  RegisterCpuTransposeKernels(registry);
  RegisterCpuConcatSplitKernels(registry);
  RegisterCpuSliceKernels(registry);
  RegisterCpuExpandTileKernels(registry);
  RegisterCpuPadKernels(registry);
  RegisterCpuGatherKernels(registry);
  RegisterCpuScatterKernels(registry);
}

}  // namespace tob
