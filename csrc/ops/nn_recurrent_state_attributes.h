// The attributes of the recurrent-state ops of ai.onnx 27, LinearAttention and
// CausalConvWithState, read and checked once for the shape functions and the CPU kernels.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

struct LinearAttentionAttributes {
  int64_t q_num_heads = 0;
  int64_t kv_num_heads = 0;
  float scale = 0.0f;  // 0: 1 / sqrt(head size)
  bool gated = true;   // update_rule "gated" or "gated_delta": decays the state by exp(decay)
  bool delta = true;   // update_rule "delta" or "gated_delta": writes beta * (v - S^T k)

  // q_num_heads and kv_num_heads are required, positive, and kv_num_heads divides q_num_heads;
  // update_rule is one of linear, gated, delta, gated_delta (default gated_delta); chunk_size, a
  // tuning hint that does not change the result, must be positive when given.
  static StatusOr<LinearAttentionAttributes> Read(const Node& node);
};

// CausalConvWithState's activation: "none" (default), "silu" or its alias "swish".
StatusOr<bool> ReadCausalConvSilu(const Node& node);

}  // namespace tob
