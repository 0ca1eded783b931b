// FusedAdam's update over all parameters of a param group in one call (the CPU side of
// torch_ort_backend.optim.FusedAdam; kernels/training/fused_adam.cu is the CUDA side). Parameters and
// gradients share one storage type (float32, float16 or bfloat16); the moments are float32; the
// arithmetic is float32 (training/adam_math.h).
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/status.h"
#include "framework/thread_pool.h"
#include "training/adam_math.h"

namespace tob::training {

// Parallel lists, one entry per parameter; every buffer is contiguous with numels[i] elements.
struct AdamTensorLists {
  std::span<void* const> params;
  std::span<const void* const> grads;
  std::span<float* const> exp_avgs;
  std::span<float* const> exp_avg_sqs;
  std::span<const int64_t> numels;
};

// One Adam step (`step` counts from 1) over every tensor of `lists`. Errors: lists of different
// lengths, a negative numel, a null buffer, an unsupported dtype, bad hyper-parameters.
Status MultiTensorAdam(DType dtype, const AdamTensorLists& lists, const AdamHyperParams& hyper, int64_t step,
                       ThreadPool* pool);

// The hyper-parameter checks of MultiTensorAdam, for callers that launch elsewhere (CUDA).
Status CheckAdamHyperParams(const AdamHyperParams& hyper, int64_t step);

// The contiguous float32 loop (AVX2 when built with it), exposed for tests and benchmarks.
void AdamFloat32(const AdamScalars& s, float* p, const float* g, float* m, float* v, int64_t n);

}  // namespace tob::training
