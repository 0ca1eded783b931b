#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuNnKernels(KernelRegistry& registry) { (void)registry; }

}  // namespace tob
