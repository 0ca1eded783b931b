// Declares and calls every function of the CPU kernel list (cpu_kernel_families.inc).
#include "framework/kernel_registry.h"

namespace tob {

#define TOB_CPU_KERNELS(family, function) void function(KernelRegistry& registry);
#include "providers/cpu/cpu_kernel_families.inc"
#undef TOB_CPU_KERNELS

void RegisterCpuKernels(KernelRegistry& registry) {
#define TOB_CPU_KERNELS(family, function) \
  registry.BeginFamily(#family);          \
  function(registry);
#include "providers/cpu/cpu_kernel_families.inc"
#undef TOB_CPU_KERNELS
  registry.BeginFamily("");
}

}  // namespace tob
