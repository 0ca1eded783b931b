// The ATen allow-list (aten_op_policy.h): a rule read from torch's own operator tags, and the
// explicit lists of aten_op_policy.inc.
#include "providers/torch/aten_op_policy.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/enum_tag.h>

#include <unordered_map>

namespace tob {

namespace {

// Torch's tags for computations whose outputs are functions of their inputs (and, for
// nondeterministic_seeded, of torch's default generator). Every core ATen op is a pure tensor
// computation by definition of the Core ATen opset; pointwise and reduction ops compute
// element-by-element or along dimensions; view_copy ops are the copying forms of views.
constexpr at::Tag kComputationTags[] = {at::Tag::core, at::Tag::pointwise, at::Tag::reduction, at::Tag::view_copy,
                                        at::Tag::nondeterministic_seeded};

constexpr const char* kTagNames = "core, pointwise, reduction, view_copy or nondeterministic_seeded";

const std::unordered_map<std::string, const AtenPolicyEntry*>& EntriesByName() {
  static const auto* by_name = [] {
    auto* m = new std::unordered_map<std::string, const AtenPolicyEntry*>();
    for (const AtenPolicyEntry& e : AtenPolicyEntries()) (*m)[e.name] = &e;
    return m;
  }();
  return *by_name;
}

}  // namespace

const std::vector<AtenPolicyEntry>& AtenPolicyEntries() {
  static const auto* entries = new std::vector<AtenPolicyEntry>{
#define TOB_ATEN_REFUSE(name, why) AtenPolicyEntry{std::string("aten::") + name, false, why},
#define TOB_ATEN_ALLOW(name, what) AtenPolicyEntry{std::string("aten::") + name, true, what},
#include "providers/torch/aten_op_policy.inc"
#undef TOB_ATEN_REFUSE
#undef TOB_ATEN_ALLOW
  };
  return *entries;
}

std::string AtenOpRefusal(const std::string& name, const std::string& overload) {
  const size_t sep = name.find("::");
  const std::string ns = sep == std::string::npos ? "aten" : name.substr(0, sep);
  const std::string qualified_name = sep == std::string::npos ? "aten::" + name : name;
  if (ns != "aten")
    return "it is in the '" + ns +
           "' namespace, not 'aten': an operator a library registered runs whatever code "
           "that library holds";
  const auto& by_name = EntriesByName();
  const auto it = by_name.find(qualified_name);
  if (it != by_name.end()) {
    if (!it->second->allowed) return it->second->reason;
    return "";
  }
  std::optional<c10::OperatorHandle> op;
  try {
    op = c10::Dispatcher::singleton().findSchema({qualified_name, overload});
  } catch (const std::exception&) {}
  if (!op) return "torch has no such operator";
  for (at::Tag tag : kComputationTags)
    if (op->hasTag(tag)) return "";
  return std::string("torch does not tag it as a tensor computation (") + kTagNames +
         ") and it is not on the explicit allow list (csrc/providers/torch/aten_op_policy.inc)";
}

}  // namespace tob
