#include "ops/gemm_attributes.h"

namespace tob {

StatusOr<GemmAttributes> ParseGemmAttributes(const Node& node) {
  GemmAttributes a;
  int64_t trans_a = 0, trans_b = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &a.alpha, 1.f));
  TOB_RETURN_IF_ERROR(node.GetAttr("beta", &a.beta, 1.f));
  TOB_RETURN_IF_ERROR(node.GetAttr("transA", &trans_a, int64_t{0}));
  TOB_RETURN_IF_ERROR(node.GetAttr("transB", &trans_b, int64_t{0}));
  for (int64_t t : {trans_a, trans_b})
    if (t != 0 && t != 1) return InvalidModel(node.Describe(), ": transA/transB must be 0 or 1, got ", t);
  a.trans_a = trans_a != 0;
  a.trans_b = trans_b != 0;
  return a;
}

StatusOr<FusedMatMulAttributes> ParseFusedMatMulAttributes(const Node& node) {
  FusedMatMulAttributes a;
  int64_t trans_a = 0, trans_b = 0, batch_a = 0, batch_b = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &a.alpha, 1.f));
  TOB_RETURN_IF_ERROR(node.GetAttr("transA", &trans_a, int64_t{0}));
  TOB_RETURN_IF_ERROR(node.GetAttr("transB", &trans_b, int64_t{0}));
  TOB_RETURN_IF_ERROR(node.GetAttr("transBatchA", &batch_a, int64_t{0}));
  TOB_RETURN_IF_ERROR(node.GetAttr("transBatchB", &batch_b, int64_t{0}));
  for (int64_t t : {trans_a, trans_b})
    if (t != 0 && t != 1) return InvalidModel(node.Describe(), ": transA/transB must be 0 or 1, got ", t);
  if (batch_a != 0 || batch_b != 0)
    return InvalidModel(node.Describe(), ": transBatchA/transBatchB must be 0 (got ", batch_a, ", ", batch_b,
                        "): batch-axis transposes are not implemented");
  a.trans_a = trans_a != 0;
  a.trans_b = trans_b != 0;
  return a;
}

}  // namespace tob
