// FusedAdam on the GPU: one multi-tensor launch sequence over all parameters of a param group.
// The per-element update is training/adam_math.h's AdamUpdate, the same function the CPU loop
// runs, so both devices produce the same bits.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "training/adam_math.h"

namespace tob::cuda {

// dtype: ONNX code of the parameters and gradients (1 float32, 10 float16, 16 bfloat16); the
// moments are float32. The pointer arrays live in host memory and hold device pointers to
// contiguous buffers of numels[i] elements. Returns cudaErrorInvalidValue for another dtype or a
// negative numel, else the launch status.
cudaError_t launch_fused_adam(int32_t dtype, void* const* params, const void* const* grads, float* const* exp_avgs,
                              float* const* exp_avg_sqs, const int64_t* numels, int num_tensors,
                              const tob::training::AdamScalars& scalars, cudaStream_t stream);

}  // namespace tob::cuda
