#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuReductionKernels(KernelRegistry& registry) { (void)registry; }

}  // namespace tob
