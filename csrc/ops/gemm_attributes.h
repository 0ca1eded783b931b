// Gemm's attributes, read and validated once for the shape function and every provider's kernel.
#pragma once

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

struct GemmAttributes {
  float alpha = 1.f;
  float beta = 1.f;
  bool trans_a = false;
  bool trans_b = false;
};

// InvalidModel naming the node when an attribute has the wrong type or transA/transB is not 0/1.
StatusOr<GemmAttributes> ParseGemmAttributes(const Node& node);

}  // namespace tob
