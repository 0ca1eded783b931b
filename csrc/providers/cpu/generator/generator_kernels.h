// Registration entry points of the CPU generator kernels, one per file of this folder;
// RegisterCpuGeneratorKernels (generator_kernels.cc) calls them all.
#pragma once

#include "framework/kernel_registry.h"

namespace tob::cpu {

void RegisterConstantKernels(KernelRegistry& registry);  // Constant, ConstantOfShape
void RegisterMatrixKernels(KernelRegistry& registry);    // EyeLike, Trilu
void RegisterRangeKernels(KernelRegistry& registry);     // Range
void RegisterOneHotKernels(KernelRegistry& registry);    // OneHot
void RegisterDropoutKernels(KernelRegistry& registry);   // Dropout
void RegisterRandomKernels(KernelRegistry& registry);    // Random{Normal,Uniform}[Like]

}  // namespace tob::cpu
