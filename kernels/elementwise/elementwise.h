// Elementwise CUDA kernels: binary arithmetic with broadcasting, unary activations, and a
// broadcasting copy (Expand, Gemm's C). Raw pointers, sizes and a stream in; the host side
// (providers/cuda/) checks dtypes and shapes before calling.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/broadcast_indexing.h"
#include "kernels/element_type.h"

namespace tob::cuda {

// The ops, from elementwise_ops.inc.
enum class BinaryOp {
#define TOB_CUDA_BINARY_OP(op, functor, onnx_name) op,
#define TOB_CUDA_UNARY_OP(op, functor, onnx_name)
#include "kernels/elementwise/elementwise_ops.inc"
#undef TOB_CUDA_BINARY_OP
#undef TOB_CUDA_UNARY_OP
};
enum class UnaryOp {
#define TOB_CUDA_BINARY_OP(op, functor, onnx_name)
#define TOB_CUDA_UNARY_OP(op, functor, onnx_name) op,
#include "kernels/elementwise/elementwise_ops.inc"
#undef TOB_CUDA_BINARY_OP
#undef TOB_CUDA_UNARY_OP
};

// out[i] = a[i] op b[i] over n output elements. `indexing` null: a and b both have n elements,
// or one of them has exactly 1 (a scalar), given by a_numel / b_numel. Otherwise the general
// strided broadcast. Returns the launch error (cudaErrorNotSupported for an unsupported type).
// Types: float32, float64, float16, bfloat16, int32, int64.
cudaError_t launch_binary_elementwise(BinaryOp op, ElementType type, const void* a, int64_t a_numel, const void* b,
                                      int64_t b_numel, void* out, int64_t n, const BroadcastIndexing* indexing,
                                      cudaStream_t stream);

// y[i] = op(x[i]). Types: float32, float64, float16, bfloat16.
cudaError_t launch_unary_elementwise(UnaryOp op, ElementType type, const void* x, void* y, int64_t n,
                                     cudaStream_t stream);

// dst (n elements, dims indexing.out_dims) = src read through indexing.a_strides. Any type of
// 1, 2, 4 or 8 bytes.
cudaError_t launch_broadcast_copy(int element_size, const void* src, void* dst, int64_t n,
                                  const BroadcastIndexing& indexing, cudaStream_t stream);

}  // namespace tob::cuda
