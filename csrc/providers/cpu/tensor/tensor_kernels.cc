#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuTensorKernels(KernelRegistry& registry) { (void)registry; }

}  // namespace tob
