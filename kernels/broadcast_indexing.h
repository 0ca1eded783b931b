// How a broadcasting kernel walks its inputs: output dims and per-input strides. Plain data with
// no CUDA types, so host code computes it without CUDA headers (providers/cuda/cuda_broadcast.h).
#pragma once

#include <cstdint>

namespace tob::cuda {

inline constexpr int kMaxBroadcastRank = 8;

// Output dims and, per input, the element stride of each output dim (0 where that input is
// broadcast). Dims are expected already collapsed (adjacent dims merged where both inputs allow)
// so the index arithmetic per element stays small.
struct BroadcastIndexing {
  int rank = 0;
  int64_t out_dims[kMaxBroadcastRank] = {};
  int64_t a_strides[kMaxBroadcastRank] = {};
  int64_t b_strides[kMaxBroadcastRank] = {};
};

}  // namespace tob::cuda
