// Gemm's and FusedMatMul's attributes, read and validated once for the shape function and every provider's kernel.
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

// com.microsoft FusedMatMul's attributes: Y = alpha * op(A) @ op(B) over numpy-broadcast batch axes.
struct FusedMatMulAttributes {
  float alpha = 1.f;
  bool trans_a = false;  // swap A's last two axes (ignored for a 1-D A, as onnxruntime does)
  bool trans_b = false;
};

// InvalidModel naming the node when transA/transB is not 0/1, or transBatchA/transBatchB is set
// (onnxruntime's batch-axis transposes, which no kernel here implements).
StatusOr<FusedMatMulAttributes> ParseFusedMatMulAttributes(const Node& node);

}  // namespace tob
