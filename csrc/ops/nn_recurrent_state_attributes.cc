#include "ops/nn_recurrent_state_attributes.h"

#include <string>

namespace tob {

StatusOr<LinearAttentionAttributes> LinearAttentionAttributes::Read(const Node& node) {
  LinearAttentionAttributes a;
  if (node.FindAttribute("q_num_heads") == nullptr || node.FindAttribute("kv_num_heads") == nullptr)
    return InvalidModel(node.Describe(), ": the attributes q_num_heads and kv_num_heads are required");
  TOB_RETURN_IF_ERROR(node.GetAttr("q_num_heads", &a.q_num_heads));
  TOB_RETURN_IF_ERROR(node.GetAttr("kv_num_heads", &a.kv_num_heads));
  if (a.q_num_heads <= 0 || a.kv_num_heads <= 0 || a.q_num_heads % a.kv_num_heads != 0)
    return InvalidModel(node.Describe(), ": q_num_heads (", a.q_num_heads,
                        ") must be a positive multiple of kv_num_heads (", a.kv_num_heads, ")");
  TOB_RETURN_IF_ERROR(node.GetAttr("scale", &a.scale, 0.0f));
  int64_t chunk_size = 64;
  TOB_RETURN_IF_ERROR(node.GetAttr("chunk_size", &chunk_size, int64_t{64}));
  if (chunk_size <= 0) return InvalidModel(node.Describe(), ": chunk_size must be positive, got ", chunk_size);
  std::string rule;
  TOB_RETURN_IF_ERROR(node.GetAttr("update_rule", &rule, std::string("gated_delta")));
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    return InvalidModel(node.Describe(), ": update_rule must be 'linear', 'gated', 'delta' or 'gated_delta', got '",
                        rule, "'");
  a.gated = rule == "gated" || rule == "gated_delta";
  a.delta = rule == "delta" || rule == "gated_delta";
  return a;
}

StatusOr<bool> ReadCausalConvSilu(const Node& node) {
  std::string activation;
  TOB_RETURN_IF_ERROR(node.GetAttr("activation", &activation, std::string("none")));
  if (activation != "none" && activation != "silu" && activation != "swish")
    return InvalidModel(node.Describe(), ": activation must be 'none', 'silu' or 'swish', got '", activation, "'");
  return activation != "none";
}

}  // namespace tob
