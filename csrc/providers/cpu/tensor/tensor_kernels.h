// Internal to the CPU Tensor (data movement) kernel family: one registration function per file.
#pragma once

#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuReshapeKernels(KernelRegistry& registry);      // reshape_kernels.cc
void RegisterCpuTransposeKernels(KernelRegistry& registry);    // transpose_kernels.cc
void RegisterCpuConcatSplitKernels(KernelRegistry& registry);  // concat_split_kernels.cc
void RegisterCpuSliceKernels(KernelRegistry& registry);        // slice_kernel.cc
void RegisterCpuExpandTileKernels(KernelRegistry& registry);   // expand_tile_kernels.cc
void RegisterCpuPadKernels(KernelRegistry& registry);          // pad_kernel.cc
void RegisterCpuGatherKernels(KernelRegistry& registry);       // gather_kernels.cc
void RegisterCpuScatterKernels(KernelRegistry& registry);      // scatter_kernels.cc

}  // namespace tob
