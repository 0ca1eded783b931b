// The CPU Nn kernel family, one registration function per file; RegisterCpuNnKernels
// (nn_kernels.cc) calls them all.
#pragma once

#include "framework/kernel_registry.h"

namespace tob {

void RegisterCpuMatMulKernels(KernelRegistry& registry);         // matmul.cc: MatMul, Gemm
void RegisterCpuConvKernels(KernelRegistry& registry);           // conv.cc
void RegisterCpuConvTransposeKernels(KernelRegistry& registry);  // conv_transpose.cc
void RegisterCpuPoolKernels(KernelRegistry& registry);           // pool.cc: Max/Average/Global pools
void RegisterCpuBatchNormKernels(KernelRegistry& registry);      // batch_norm.cc: Batch/InstanceNorm
void RegisterCpuLayerNormKernels(KernelRegistry& registry);      // layer_norm.cc: LayerNorm, SkipLayerNorm
void RegisterCpuSoftmaxKernels(KernelRegistry& registry);        // softmax.cc: Softmax, LogSoftmax

}  // namespace tob
