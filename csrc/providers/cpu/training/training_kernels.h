// The CPU Training kernel family (gradients and losses), one registration function per file;
// RegisterCpuTrainingKernels (training_kernels.cc) calls them all.
#pragma once

#include "framework/kernel_registry.h"

namespace tob {

inline constexpr const char* kMicrosoftDomain = "com.microsoft";

void RegisterCpuActivationGradKernels(KernelRegistry& registry);  // activation_grad.cc
void RegisterCpuSoftmaxGradKernels(KernelRegistry& registry);     // softmax_grad.cc
void RegisterCpuLayerNormGradKernels(KernelRegistry& registry);   // layer_norm_grad.cc
void RegisterCpuNllLossKernels(KernelRegistry& registry);         // nll_loss.cc: forward and grad
void RegisterCpuGatherGradKernels(KernelRegistry& registry);      // gather_grad.cc
void RegisterCpuConvGradKernels(KernelRegistry& registry);        // conv_grad.cc
void RegisterCpuMaxPoolGradKernels(KernelRegistry& registry);     // max_pool_grad.cc
void RegisterCpuBatchNormTrainingKernels(KernelRegistry& registry);  // batch_norm_training.cc
void RegisterCpuOptimizerKernels(KernelRegistry& registry);        // optimizers.cc: SGD, Adam
void RegisterCpuLambOptimizerKernels(KernelRegistry& registry);    // lamb_optimizer.cc
void RegisterCpuGradientControlKernels(KernelRegistry& registry);  // gradient_control.cc

}  // namespace tob
