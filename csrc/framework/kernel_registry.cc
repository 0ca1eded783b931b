#include "framework/kernel_registry.h"

#include <algorithm>

namespace tob {

namespace {

std::string TypeList(const std::vector<DType>& types) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + std::string(DTypeName(types[i]));
  return s;
}

}  // namespace

bool KernelDef::Accepts(const std::vector<DType>& input_types, std::string* why_not) const {
  // A string tensor's elements are objects, never bytes to copy: only a kernel that names strings
  // in a constraint on that input takes one (a kernel without constraints takes any other type).
  std::vector<bool> takes_string(input_types.size(), false);
  for (const TypeConstraint& c : constraints) {
    if (std::find(c.allowed.begin(), c.allowed.end(), DType::kString) == c.allowed.end()) continue;
    for (int idx : c.input_indices) {
      if (idx == TypeConstraint::kAllInputs) takes_string.assign(input_types.size(), true);
      const int i = idx < 0 ? static_cast<int>(input_types.size()) + idx : idx;
      if (i >= 0 && i < static_cast<int>(input_types.size())) takes_string[i] = true;
    }
  }
  for (size_t i = 0; i < input_types.size(); ++i) {
    if (input_types[i] == DType::kString && !takes_string[i]) {
      if (why_not) *why_not = StrCat("input ", i, " is a string tensor, which this kernel does not take");
      return false;
    }
  }
  for (const TypeConstraint& c : constraints) {
    std::vector<int> indices;
    for (int idx : c.input_indices) {
      if (idx == TypeConstraint::kAllInputs) {
        for (size_t i = 0; i < input_types.size(); ++i) indices.push_back(static_cast<int>(i));
      } else {
        int i = idx < 0 ? static_cast<int>(input_types.size()) + idx : idx;
        if (i >= 0 && i < static_cast<int>(input_types.size())) indices.push_back(i);
      }
    }
    for (int i : indices) {
      DType t = input_types[i];
      if (t == DType::kUndefined) continue;  // omitted optional input
      if (std::find(c.allowed.begin(), c.allowed.end(), t) == c.allowed.end()) {
        if (why_not)
          *why_not = StrCat("input ", i, " has dtype ", DTypeName(t), "; type constraint ", c.name, " allows {",
                            TypeList(c.allowed), "}");
        return false;
      }
    }
  }
  return true;
}

std::string KernelDef::Describe() const {
  return StrCat(domain.empty() ? "ai.onnx" : domain, "::", op_type, " [opset ", since_version, "..",
                end_version == kMaxOpset ? std::string("") : std::to_string(end_version), "] on ", provider);
}

KernelRegistry& KernelRegistry::Global() {
  static KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    RegisterCpuKernels(*r);
#ifdef TOB_WITH_CUDA
    RegisterCudaKernels(*r);
#endif
    return r;
  }();
  return *registry;
}

void KernelRegistry::Register(KernelDef def) {
  def.domain = Graph::NormalizeDomain(def.domain);
  TOB_ENFORCE(def.factory != nullptr, "kernel registered without a factory: ", def.Describe());
  if (def.family.empty()) def.family = family_;
  defs_.push_back(std::move(def));
}

const KernelDef* KernelRegistry::Find(const std::string& provider, const std::string& domain,
                                      const std::string& op_type, int opset, const std::vector<DType>& input_types,
                                      std::string* why_not, bool non_tensor_values) const {
  std::string d = Graph::NormalizeDomain(domain);
  bool op_known = false, version_known = false;
  std::string type_reason;
  const KernelDef* value_fallback = nullptr;  // a value kernel for a node of plain tensors
  for (const KernelDef& def : defs_) {
    if (def.provider != provider || def.domain != d || def.op_type != op_type) continue;
    op_known = true;
    if (opset < def.since_version || opset > def.end_version) continue;
    version_known = true;
    std::string reason;
    if (non_tensor_values && !def.value_kernel) {
      type_reason = "the kernel takes and makes tensors only, not sequences or optionals";
      continue;
    }
    if (!def.Accepts(input_types, &reason)) {
      type_reason = reason;
      continue;
    }
    // A node of plain tensors prefers a tensor kernel (Identity has both); a value kernel runs it
    // only where the op has no other (OptionalGetElement of a tensor, opset 18).
    if (!non_tensor_values && def.value_kernel) {
      if (value_fallback == nullptr) value_fallback = &def;
      continue;
    }
    return &def;
  }
  if (value_fallback != nullptr) return value_fallback;
  if (why_not) {
    std::string op = StrCat(d.empty() ? "ai.onnx" : d, "::", op_type);
    if (!op_known) *why_not = StrCat(provider, " has no kernel for ", op);
    else if (!version_known) *why_not = StrCat(provider, " has no kernel for ", op, " at opset ", opset);
    else *why_not = StrCat(provider, " kernel for ", op, " does not accept these inputs: ", type_reason);
  }
  return nullptr;
}

}  // namespace tob
