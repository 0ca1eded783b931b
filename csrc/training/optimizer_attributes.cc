#include "training/optimizer_attributes.h"

#include <limits>

namespace tob::training {

namespace {

Status CheckCoefficient(const Node& node, const char* name, float v) {
  if (!(v >= 0.0f && v < 1.0f)) return InvalidModel(node.Describe(), ": ", name, " must be in [0, 1), got ", v);
  return Status::OK();
}

Status CheckNonNegative(const Node& node, const char* name, float v) {
  if (!(v >= 0.0f)) return InvalidModel(node.Describe(), ": ", name, " must be >= 0, got ", v);
  return Status::OK();
}

Status CheckClip(const Node& node, float v) {
  if (!(v > 0.0f)) return InvalidModel(node.Describe(), ": max_norm_clip must be > 0, got ", v);
  return Status::OK();
}

// A per-group FLOATS attribute: absent -> `groups` copies of dflt; present -> at least `groups`
// values, each checked.
StatusOr<std::vector<float>> PerGroup(const Node& node, const char* name, float dflt, int groups,
                                      Status (*check)(const Node&, const char*, float)) {
  std::vector<float> v;
  TOB_RETURN_IF_ERROR(node.GetAttr(name, &v, std::vector<float>(static_cast<size_t>(groups), dflt)));
  if (static_cast<int>(v.size()) < groups)
    return InvalidModel(node.Describe(), ": attribute '", name, "' has ", v.size(), " values for ", groups,
                        " weight groups (one per group)");
  v.resize(static_cast<size_t>(groups));
  for (float x : v) TOB_RETURN_IF_ERROR(check(node, name, x));
  return v;
}

}  // namespace

StatusOr<AdamOpAttributes> ReadAdamAttributes(const Node& node) {
  AdamOpAttributes a;
  int64_t bias = 1;
  TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &a.alpha, 0.9f));
  TOB_RETURN_IF_ERROR(node.GetAttr("beta", &a.beta, 0.999f));
  TOB_RETURN_IF_ERROR(node.GetAttr("lambda", &a.lambda, 0.0f));
  TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &a.epsilon, 1e-8f));
  TOB_RETURN_IF_ERROR(node.GetAttr("max_norm_clip", &a.max_norm_clip, 1.0f));
  TOB_RETURN_IF_ERROR(node.GetAttr("do_bias_correction", &bias, int64_t{1}));
  TOB_RETURN_IF_ERROR(node.GetAttr("weight_decay_mode", &a.weight_decay_mode, int64_t{0}));
  a.do_bias_correction = bias != 0;
  TOB_RETURN_IF_ERROR(CheckCoefficient(node, "alpha", a.alpha));
  TOB_RETURN_IF_ERROR(CheckCoefficient(node, "beta", a.beta));
  TOB_RETURN_IF_ERROR(CheckNonNegative(node, "lambda", a.lambda));
  TOB_RETURN_IF_ERROR(CheckNonNegative(node, "epsilon", a.epsilon));
  TOB_RETURN_IF_ERROR(CheckClip(node, a.max_norm_clip));
  if (a.weight_decay_mode != 0 && a.weight_decay_mode != 1)
    return InvalidModel(node.Describe(),
                        ": weight_decay_mode must be 0 (decay before the weight update, as "
                        "torch.optim.AdamW) or 1 (after it, as transformers' AdamW), got ",
                        a.weight_decay_mode);
  return a;
}

StatusOr<LambAttributes> ReadLambAttributes(const Node& node, int groups) {
  LambAttributes a;
  auto clip = [](const Node& n, const char*, float v) { return CheckClip(n, v); };
  TOB_ASSIGN_OR_RETURN(a.alpha, PerGroup(node, "alpha", 0.9f, groups, CheckCoefficient));
  TOB_ASSIGN_OR_RETURN(a.beta, PerGroup(node, "beta", 0.999f, groups, CheckCoefficient));
  TOB_ASSIGN_OR_RETURN(a.lambda, PerGroup(node, "lambda", 0.0f, groups, CheckNonNegative));
  TOB_ASSIGN_OR_RETURN(a.epsilon, PerGroup(node, "epsilon", 1e-6f, groups, CheckNonNegative));
  TOB_ASSIGN_OR_RETURN(a.max_norm_clip, PerGroup(node, "max_norm_clip", 1.0f, groups, clip));
  TOB_RETURN_IF_ERROR(node.GetAttr("ratio_min", &a.ratio_min, -std::numeric_limits<float>::infinity()));
  TOB_RETURN_IF_ERROR(node.GetAttr("ratio_max", &a.ratio_max, std::numeric_limits<float>::infinity()));
  if (!(a.ratio_min <= a.ratio_max))
    return InvalidModel(node.Describe(), ": ratio_min (", a.ratio_min, ") must be <= ratio_max (", a.ratio_max, ")");
  int64_t bias = 1;
  TOB_RETURN_IF_ERROR(node.GetAttr("do_bias_correction", &bias, int64_t{1}));
  a.do_bias_correction = bias != 0;
  return a;
}

}  // namespace tob::training
