// Elementwise kernels. The per-element arithmetic is ApplyUnary / ApplyBinary of
// kernels/elementwise_ops.h over the scalar functors the CPU kernels use, so both providers
// compute the same values; what lives here is only the memory access: 128-bit vector loads for
// contiguous data, a scalar operand held in a register, and strided broadcast indexing with
// 32-bit index math whenever the output fits in it.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/elementwise/elementwise.h"
#include "kernels/elementwise/elementwise_ops.h"
#include "kernels/launch_config.h"

namespace tob::cuda {
namespace {

// a (or b) is a single element when a_scalar (b_scalar); otherwise both have n elements.
template <typename T, typename Op, int N>
__global__ void BinaryContiguousKernel(Op op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                       int64_t n, bool a_scalar, bool b_scalar) {
  const T a0 = a_scalar ? a[0] : T();
  const T b0 = b_scalar ? b[0] : T();
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v * N < n; v += step) {
    const int64_t base = v * N;
    if (base + N <= n) {
      Pack<T, N> pa, pb, po;
      if (!a_scalar) pa = *reinterpret_cast<const Pack<T, N>*>(a + base);
      if (!b_scalar) pb = *reinterpret_cast<const Pack<T, N>*>(b + base);
#pragma unroll
      for (int k = 0; k < N; ++k) po.v[k] = ApplyBinary(op, a_scalar ? a0 : pa.v[k], b_scalar ? b0 : pb.v[k]);
      *reinterpret_cast<Pack<T, N>*>(out + base) = po;
    } else {
      for (int64_t i = base; i < n; ++i) out[i] = ApplyBinary(op, a_scalar ? a0 : a[i], b_scalar ? b0 : b[i]);
    }
  }
}

// Offsets of output element i into two broadcast inputs.
template <typename Index>
__device__ __forceinline__ void BroadcastOffsets(const BroadcastIndexing& idx, Index i, Index* a_off, Index* b_off) {
  Index rem = i, ao = 0, bo = 0;
#pragma unroll
  for (int d = kMaxBroadcastRank - 1; d >= 0; --d) {
    if (d >= idx.rank) continue;
    const Index dim = static_cast<Index>(idx.out_dims[d]);
    const Index coord = rem % dim;
    rem /= dim;
    ao += coord * static_cast<Index>(idx.a_strides[d]);
    bo += coord * static_cast<Index>(idx.b_strides[d]);
  }
  *a_off = ao;
  *b_off = bo;
}

// Index is uint32_t when n < 2^31 (so i + step cannot wrap), int64_t otherwise: 64-bit division
// is many times slower on the GPU.
template <typename T, typename Op, typename Index>
__global__ void BinaryBroadcastKernel(Op op, const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                      Index n, BroadcastIndexing idx) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    Index ao, bo;
    BroadcastOffsets(idx, i, &ao, &bo);
    out[i] = ApplyBinary(op, a[ao], b[bo]);
  }
}

template <typename T, typename Op, int N>
__global__ void UnaryKernel(Op op, const T* __restrict__ x, T* __restrict__ y, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v * N < n; v += step) {
    const int64_t base = v * N;
    if (base + N <= n) {
      Pack<T, N> px = *reinterpret_cast<const Pack<T, N>*>(x + base);
      Pack<T, N> py;
#pragma unroll
      for (int k = 0; k < N; ++k) py.v[k] = ApplyUnary(op, px.v[k]);
      *reinterpret_cast<Pack<T, N>*>(y + base) = py;
    } else {
      for (int64_t i = base; i < n; ++i) y[i] = ApplyUnary(op, x[i]);
    }
  }
}

template <typename T, typename Index>
__global__ void BroadcastCopyKernel(const T* __restrict__ src, T* __restrict__ dst, Index n, BroadcastIndexing idx) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    Index so, unused;
    BroadcastOffsets(idx, i, &so, &unused);
    dst[i] = src[so];
  }
}

constexpr int64_t kMaxIndex32 = std::numeric_limits<int32_t>::max();

template <typename T, typename Op>
void LaunchBinary(Op op, const T* a, int64_t a_numel, const T* b, int64_t b_numel, T* out, int64_t n,
                  const BroadcastIndexing* idx, cudaStream_t stream) {
  if (idx != nullptr) {
    if (n <= kMaxIndex32)
      BinaryBroadcastKernel<T, Op, uint32_t>
          <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(op, a, b, out, static_cast<uint32_t>(n), *idx);
    else BinaryBroadcastKernel<T, Op, int64_t><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(op, a, b, out, n, *idx);
    return;
  }
  const bool a_scalar = a_numel == 1 && n != 1;
  const bool b_scalar = b_numel == 1 && n != 1;
  constexpr int kWidth = kPackWidth<T>;
  const bool aligned = VectorAligned(out) && (a_scalar || VectorAligned(a)) && (b_scalar || VectorAligned(b));
  if (aligned && kWidth > 1)
    BinaryContiguousKernel<T, Op, kWidth>
        <<<BlocksFor((n + kWidth - 1) / kWidth), kThreadsPerBlock, 0, stream>>>(op, a, b, out, n, a_scalar, b_scalar);
  else
    BinaryContiguousKernel<T, Op, 1>
        <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(op, a, b, out, n, a_scalar, b_scalar);
}

template <typename T, typename Op>
void LaunchUnary(Op op, const T* x, T* y, int64_t n, cudaStream_t stream) {
  constexpr int kWidth = kPackWidth<T>;
  if (kWidth > 1 && VectorAligned(x) && VectorAligned(y))
    UnaryKernel<T, Op, kWidth><<<BlocksFor((n + kWidth - 1) / kWidth), kThreadsPerBlock, 0, stream>>>(op, x, y, n);
  else UnaryKernel<T, Op, 1><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(op, x, y, n);
}

template <typename T>
void LaunchBroadcastCopy(const void* src, void* dst, int64_t n, const BroadcastIndexing& idx, cudaStream_t stream) {
  const T* s = static_cast<const T*>(src);
  T* d = static_cast<T*>(dst);
  if (n <= kMaxIndex32)
    BroadcastCopyKernel<T, uint32_t>
        <<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(s, d, static_cast<uint32_t>(n), idx);
  else BroadcastCopyKernel<T, int64_t><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(s, d, n, idx);
}

}  // namespace

cudaError_t launch_binary_elementwise(BinaryOp op, ElementType type, const void* a, int64_t a_numel, const void* b,
                                      int64_t b_numel, void* out, int64_t n, const BroadcastIndexing* indexing,
                                      cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool ok = DispatchElementType<float, double, Float16, BFloat16, int32_t, int64_t>(type, [&]<typename T>() {
    const T* ta = static_cast<const T*>(a);
    const T* tb = static_cast<const T*>(b);
    T* to = static_cast<T*>(out);
    switch (op) {
#define TOB_CUDA_BINARY_OP(op, functor, onnx_name)                                  \
  case BinaryOp::op:                                                                \
    LaunchBinary(ew::functor{}, ta, a_numel, tb, b_numel, to, n, indexing, stream); \
    break;
#define TOB_CUDA_UNARY_OP(op, functor, onnx_name)
#include "kernels/elementwise/elementwise_ops.inc"
#undef TOB_CUDA_BINARY_OP
#undef TOB_CUDA_UNARY_OP
    }
  });
  if (!ok) return cudaErrorNotSupported;
  return cudaGetLastError();
}

cudaError_t launch_unary_elementwise(UnaryOp op, ElementType type, const void* x, void* y, int64_t n,
                                     cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const bool ok = DispatchElementType<float, double, Float16, BFloat16>(type, [&]<typename T>() {
    const T* tx = static_cast<const T*>(x);
    T* ty = static_cast<T*>(y);
    switch (op) {
#define TOB_CUDA_BINARY_OP(op, functor, onnx_name)
#define TOB_CUDA_UNARY_OP(op, functor, onnx_name)  \
  case UnaryOp::op:                                \
    LaunchUnary(ew::functor{}, tx, ty, n, stream); \
    break;
#include "kernels/elementwise/elementwise_ops.inc"
#undef TOB_CUDA_BINARY_OP
#undef TOB_CUDA_UNARY_OP
    }
  });
  if (!ok) return cudaErrorNotSupported;
  return cudaGetLastError();
}

cudaError_t launch_broadcast_copy(int element_size, const void* src, void* dst, int64_t n,
                                  const BroadcastIndexing& indexing, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (element_size) {
    case 1: LaunchBroadcastCopy<uint8_t>(src, dst, n, indexing, stream); break;
    case 2: LaunchBroadcastCopy<uint16_t>(src, dst, n, indexing, stream); break;
    case 4: LaunchBroadcastCopy<uint32_t>(src, dst, n, indexing, stream); break;
    case 8: LaunchBroadcastCopy<uint64_t>(src, dst, n, indexing, stream); break;
    default: return cudaErrorNotSupported;
  }
  return cudaGetLastError();
}

}  // namespace tob::cuda
