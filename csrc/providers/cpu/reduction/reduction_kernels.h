// Registration entry points of the CPU reduction kernels, one per file of this folder;
// RegisterCpuReductionKernels (reduction_kernels.cc) calls them all.
#pragma once

#include "framework/kernel_registry.h"

namespace tob::cpu {

void RegisterReduceKernels(KernelRegistry& registry);     // Reduce{Sum,Mean,Max,...}
void RegisterArgReduceKernels(KernelRegistry& registry);  // ArgMax, ArgMin
void RegisterCumSumKernels(KernelRegistry& registry);     // CumSum

}  // namespace tob::cpu
