// The in-graph optimizer ops on the GPU (SGDOptimizer, AdamOptimizer, LambOptimizer,
// InPlaceAccumulator, ReduceAllL2's sum of squares). The per-element arithmetic is
// training/optimizer_math.h's (Adam: adam_math.h's AdamUpdate), the same functions the CPU
// kernels run; the host side (providers/cuda/cuda_optimizer_kernels.cc) computes the per-call
// scalars. Weights, moments, sums and Lamb's direction are float32; gradients, their outputs and
// mixed-precision weights are of the given ElementType (float32, float16, bfloat16). An output
// pointer may be null (not computed) or equal to the matching input (in place).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/element_type.h"
#include "training/optimizer_math.h"

namespace tob::cuda {

// nw = w - eta g, ng = -eta g.
cudaError_t launch_sgd_optimizer(float eta, const float* w, const float* g, float* nw, float* ng, int64_t n,
                                 cudaStream_t stream);

// One AdamUpdate per element; ng = new w - w; nmixed = new w cast to mixed_type (float16/bfloat16).
cudaError_t launch_adam_optimizer(const training::AdamScalars& s, ElementType grad_type, const float* w, const void* g,
                                  const float* m1, const float* m2, float* nw, void* ng, float* nm1, float* nm2,
                                  ElementType mixed_type, void* nmixed, int64_t n, cudaStream_t stream);

// Lamb stage 1: d = LambDirection(...) into `direction`, the moments into nm1 / nm2.
cudaError_t launch_lamb_direction(const training::LambScalars& s, ElementType grad_type, const float* w, const void* g,
                                  const float* m1, const float* m2, float* direction, float* nm1, float* nm2, int64_t n,
                                  cudaStream_t stream);

// Lamb stage 3: nw = LambApply(ratio, w, d), ng = the applied delta (grad_type), nmixed = nw cast.
cudaError_t launch_lamb_apply(float ratio, const float* w, const float* direction, float* nw, ElementType grad_type,
                              void* ng, ElementType mixed_type, void* nmixed, int64_t n, cudaStream_t stream);

// out = sum + value.
cudaError_t launch_accumulate(const float* sum, ElementType value_type, const void* value, float* out, int64_t n,
                              cudaStream_t stream);

// Sums of squares in float64, one per chunk of kSquareSumChunk elements of x (the host adds
// them in order: the same result whatever the launch geometry).
inline constexpr int64_t kSquareSumChunk = int64_t{1} << 15;
inline int64_t SquareSumPartialCount(int64_t n) { return (n + kSquareSumChunk - 1) / kSquareSumChunk; }
cudaError_t launch_square_sum_partials(ElementType type, const void* x, int64_t n, double* partials,
                                       cudaStream_t stream);

}  // namespace tob::cuda
