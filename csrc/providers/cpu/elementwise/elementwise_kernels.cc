#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuElementwiseKernels(KernelRegistry& registry) { (void)registry; }

}  // namespace tob
