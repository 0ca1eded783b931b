// Einsum's equation, parsed once for the shape function and the CPU kernel (providers/cpu/nn/
// einsum.cc): numpy's grammar, which ONNX's Einsum follows. Terms of letters (a-z, A-Z) and at most
// one ellipsis "...", separated by commas, optionally "->" and the output term; spaces ignored.
// Without "->" the output is the ellipsis dims followed by the letters that occur once, in ASCII
// order (upper case first).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

struct EinsumEquation {
  // Label ids: 'A'-'Z' -> 0..25, 'a'-'z' -> 26..51 (ASCII order), the ellipsis dims 52 + k, where
  // k counts the broadcast ellipsis dims right-aligned over all inputs (numpy broadcasting).
  static constexpr int kLetters = 52;
  std::vector<std::vector<int>> inputs;  // one label per dim of each input (repeats: diagonals)
  std::vector<int> output;               // distinct labels
  int num_labels = kLetters;             // kLetters + the broadcast ellipsis rank

  // Parses `equation` for inputs of the given ranks. InvalidModel naming the node for a malformed
  // equation, a term count other than the input count, a term whose labels do not match its
  // input's rank, an output label no input has, a repeated output label, or ellipsis dims in the
  // inputs that an explicit output leaves out (numpy refuses those too).
  static StatusOr<EinsumEquation> Parse(const Node& node, const std::string& equation,
                                        const std::vector<int64_t>& input_ranks);

  // The size of every label from the inputs' shapes (-1: unknown, for the shape function's
  // symbolic dims): a label's dims must agree or be 1 (numpy broadcasts those). InvalidModel
  // naming the label otherwise.
  StatusOr<std::vector<int64_t>> LabelSizes(const Node& node, const std::vector<std::vector<int64_t>>& shapes) const;
};

}  // namespace tob
