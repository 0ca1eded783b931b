// Byte-moving building blocks of the Tensor (data movement) kernels. These ops never look at
// values, so they dispatch on the element size only: one instantiation per size instead of one
// per dtype keeps the code small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "framework/thread_pool.h"

namespace tob::tensor_ops {

// Each parallel task moves at least this much: waking a worker costs about as much as copying a
// few tens of kilobytes.
inline constexpr size_t kMinTaskBytes = 64 * 1024;

// Items per parallel task so that a task moves at least kMinTaskBytes.
inline int64_t CopyGrain(size_t bytes_per_item) {
  size_t b = bytes_per_item == 0 ? 1 : bytes_per_item;
  return static_cast<int64_t>((kMinTaskBytes + b - 1) / b);
}

// The types these kernels accept: every type of AllTypesAndString() plus the one-byte float8 kinds
// (float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz from opset 19, float8e8m0 from 24),
// which move like uint8. The packed 4- and 2-bit types are not here: two or four elements share a
// byte, which a byte mover cannot split.
const std::vector<DType>& DataMovementTypes();

// An unsigned integer type of the element's size, or false for sizes that no dtype has.
template <typename Fn>
bool DispatchElementSize(size_t size, Fn&& fn) {
  switch (size) {
    case 1: fn.template operator()<uint8_t>(); return true;
    case 2: fn.template operator()<uint16_t>(); return true;
    case 4: fn.template operator()<uint32_t>(); return true;
    case 8: fn.template operator()<uint64_t>(); return true;
    default: return false;
  }
}

// memcpy split over the pool when it is big enough to pay for the threads. No-op when dst == src.
void ParallelCopy(ThreadPool* pool, void* dst, const void* src, size_t bytes);

// dst (contiguous, `shape`) = the view of src with element strides `src_strides` (any sign,
// 0 for broadcast). Dims that stay adjacent are merged first, so a view whose rows are contiguous
// becomes one memcpy per row and a contiguous view becomes one ParallelCopy.
void StridedCopy(ThreadPool* pool, const void* src, void* dst, size_t elem_size, const Shape& shape,
                 const std::vector<int64_t>& src_strides);

// The copy an aliasing op (Reshape, Identity, ...) does when the executor did not hand it an
// output that already shares the input's bytes.
void CopyUnlessAliased(ThreadPool* pool, const Tensor& in, Tensor* out);

}  // namespace tob::tensor_ops
