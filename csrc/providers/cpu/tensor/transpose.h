// Transpose of a contiguous tensor by a permutation, shared by Transpose, DepthToSpace and
// SpaceToDepth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "framework/thread_pool.h"

namespace tob::tensor_ops {

// dst = transpose(src, perm): dst dim i is src dim perm[i]. `perm` must be a permutation of
// 0..rank-1 (callers validate it). Three strategies, after dropping size-1 dims and merging dims
// that stay adjacent:
//  - nothing left to permute (perm only moves size-1 dims): one copy;
//  - the innermost output dim is contiguous in src: one memcpy per row;
//  - otherwise a cache-blocked 2-D transpose between the src's innermost dim and the output's
//    innermost dim (the [.., M, N] -> [.., N, M] of attention), in-register 8x8 tiles with AVX2.
void TransposeBytes(ThreadPool* pool, const void* src, void* dst, size_t elem_size, const Shape& in_shape,
                    const std::vector<int64_t>& perm);

}  // namespace tob::tensor_ops
