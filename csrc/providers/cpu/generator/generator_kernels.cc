#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuGeneratorKernels(KernelRegistry& registry) { (void)registry; }

}  // namespace tob
