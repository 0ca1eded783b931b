#include "providers/cpu/reduction/reduction_kernels.h"

namespace tob {

void RegisterCpuReductionKernels(KernelRegistry& registry) {
  cpu::RegisterReduceKernels(registry);
  cpu::RegisterArgReduceKernels(registry);
  cpu::RegisterCumSumKernels(registry);
}

}  // namespace tob
