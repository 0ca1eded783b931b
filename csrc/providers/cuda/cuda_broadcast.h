// Numpy broadcasting turned into the collapsed strides the kernels in kernels/elementwise/elementwise.cu
// index with.
#pragma once

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/broadcast_indexing.h"

namespace tob {

// Strides of `a` and `b` (each right-aligned to `out`, 0 along broadcast dims) over `out`, with
// size-1 output dims dropped and adjacent dims merged wherever both inputs step through them
// contiguously (or both broadcast them). kNotImplemented when more than kMaxBroadcastRank dims
// remain; kInvalidArgument when an input does not broadcast to `out`.
StatusOr<cuda::BroadcastIndexing> MakeBroadcastIndexing(const Shape& out, const Shape& a, const Shape& b);

}  // namespace tob
