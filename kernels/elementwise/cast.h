// ONNX Cast on the GPU; per-element semantics in kernels/elementwise_ops.h (CastElement).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/element_type.h"

namespace tob::cuda {

// Whether launch_cast supports this pair (every pair of float32, float64, float16, bfloat16,
// int8, uint8, int16, int32, int64, bool).
bool CastSupported(ElementType from, ElementType to);

// dst[i] = Cast<to>(src[i]) for n elements; cudaErrorNotSupported for an unsupported pair.
cudaError_t launch_cast(ElementType from, ElementType to, const void* src, void* dst, int64_t n, cudaStream_t stream);

}  // namespace tob::cuda
