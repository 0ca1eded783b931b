// The attributes of the in-graph optimizer ops, read and validated once per node (kernel
// construction) for every provider. Errors name the node and the attribute.
#pragma once

#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "training/optimizer_math.h"

namespace tob::training {

// AdamOptimizer: alpha, beta in [0, 1); lambda, epsilon >= 0; max_norm_clip > 0;
// weight_decay_mode 0 or 1.
StatusOr<AdamOpAttributes> ReadAdamAttributes(const Node& node);

// LambOptimizer: one value per weight group of alpha, beta, lambda, epsilon, max_norm_clip (the
// lists may be longer than the node's group count, as onnxruntime-training's 1024-entry
// defaults are); ratio_min <= ratio_max; do_bias_correction.
struct LambAttributes {
  std::vector<float> alpha, beta, lambda, epsilon, max_norm_clip;
  float ratio_min = 0.0f, ratio_max = 0.0f;
  bool do_bias_correction = true;
};
StatusOr<LambAttributes> ReadLambAttributes(const Node& node, int groups);

// The number of weight groups of a LambOptimizer node: 5 + 5 k inputs (the last group's
// mixed-precision input may be left off).
inline int LambGroupCount(int num_inputs) { return (num_inputs - 5 + 4) / 5; }

}  // namespace tob::training
