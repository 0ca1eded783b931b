// The CUDA provider's kernel families; RegisterCudaKernels (framework/kernel_registry.h) calls
// each of them.
#pragma once

#include "framework/kernel_registry.h"

namespace tob {

void RegisterCudaElementwiseKernels(KernelRegistry& registry);
void RegisterCudaCastKernels(KernelRegistry& registry);
void RegisterCudaGemmKernels(KernelRegistry& registry);
void RegisterCudaMemcpyKernels(KernelRegistry& registry);
void RegisterCudaOptimizerKernels(KernelRegistry& registry);  // cuda_optimizer_kernels.cc

}  // namespace tob
