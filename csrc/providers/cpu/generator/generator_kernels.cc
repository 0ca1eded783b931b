#include "providers/cpu/generator/generator_kernels.h"

namespace tob {

void RegisterCpuGeneratorKernels(KernelRegistry& registry) {
  cpu::RegisterConstantKernels(registry);
  cpu::RegisterMatrixKernels(registry);
  cpu::RegisterRangeKernels(registry);
  cpu::RegisterOneHotKernels(registry);
  cpu::RegisterDropoutKernels(registry);
  cpu::RegisterRandomKernels(registry);
}

}  // namespace tob
