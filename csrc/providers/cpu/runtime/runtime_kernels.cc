#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuRuntimeKernels(KernelRegistry& registry) { (void)registry; }

}  // namespace tob
