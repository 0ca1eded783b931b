// The attributes of RNN, GRU and LSTM, read and checked once: the shape function refuses a bad
// node with them at load time and the CPU kernel computes with them (providers/cpu/nn/recurrent.cc).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "math/recurrent_math.h"

namespace tob {

enum class RecurrentOp { kRnn, kGru, kLstm };

struct RecurrentAttributes {
  RecurrentOp op = RecurrentOp::kRnn;
  int64_t hidden_size = -1;  // -1: absent (taken from R's last dim)
  int64_t num_directions = 1;
  bool reverse = false;  // direction "reverse" (a bidirectional node's second direction always is)
  int64_t layout = 0;    // 0: [seq, batch, ...]; 1: [batch, seq, ...]
  float clip = std::numeric_limits<float>::infinity();
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM
  // Per direction, in order: f (RNN); f, g (GRU); f, g, h (LSTM). num_directions * per_direction.
  std::vector<rnn::Activation> activations;

  // Gates per direction: the multiplier of hidden_size in W's and R's second dim (1, 3, 4).
  int64_t gates() const { return op == RecurrentOp::kRnn ? 1 : op == RecurrentOp::kGru ? 3 : 4; }
  int64_t activations_per_direction() const { return op == RecurrentOp::kRnn ? 1 : op == RecurrentOp::kGru ? 2 : 3; }
  const rnn::Activation& activation(int64_t direction, int64_t k) const {
    return activations[static_cast<size_t>(direction * activations_per_direction() + k)];
  }

  // Reads `node` (op RNN, GRU or LSTM); InvalidModel naming the node and the attribute for an
  // unknown direction or activation, a non-positive hidden_size or clip, a layout other than 0/1,
  // or an activation list of the wrong length. A list of one direction's activations is used
  // for both directions of a bidirectional node; alpha/beta are consumed in order by the
  // activations that take them, defaults otherwise (LeakyRelu 0.01, ThresholdedRelu 1,
  // HardSigmoid 0.2/0.5, Elu 1, Affine 1/0, ScaledTanh 1/1).
  static StatusOr<RecurrentAttributes> Read(const Node& node);
};

}  // namespace tob
