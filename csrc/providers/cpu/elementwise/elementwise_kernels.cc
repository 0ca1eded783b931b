#include "providers/cpu/elementwise/elementwise_kernels.h"

namespace tob {

void RegisterCpuElementwiseKernels(KernelRegistry& registry) {
  ew::RegisterBinaryKernels(registry);
  ew::RegisterUnaryKernels(registry);
  ew::RegisterActivationKernels(registry);
  ew::RegisterCompareLogicKernels(registry);
  ew::RegisterWhereKernels(registry);
  ew::RegisterCastKernels(registry);
  ew::RegisterVariadicKernels(registry);
  ew::RegisterClipKernels(registry);
  ew::RegisterBitwiseKernels(registry);
}

}  // namespace tob
