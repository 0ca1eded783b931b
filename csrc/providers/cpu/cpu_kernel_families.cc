#include "framework/kernel_registry.h"

namespace tob {

#define TOB_CPU_KERNEL_FAMILY(name) void RegisterCpu##name##Kernels(KernelRegistry& registry);
#include "providers/cpu/cpu_kernel_families.inc"
#undef TOB_CPU_KERNEL_FAMILY

void RegisterCpuKernels(KernelRegistry& registry) {
#define TOB_CPU_KERNEL_FAMILY(name) RegisterCpu##name##Kernels(registry);
#include "providers/cpu/cpu_kernel_families.inc"
#undef TOB_CPU_KERNEL_FAMILY
}

}  // namespace tob
