#include "framework/execution_provider.h"

namespace tob {

std::vector<DType> InputDTypes(const Node& node) {
  std::vector<DType> r;
  r.reserve(node.inputs().size());
  for (Value* v : node.inputs()) r.push_back(v ? v->type().dtype : DType::kUndefined);
  return r;
}

bool TakesOrMakesNonTensors(const Node& node) {
  for (const Value* v : node.inputs())
    if (v != nullptr && !v->type().is_tensor()) return true;
  for (const Value* v : node.outputs())
    if (!v->type().is_tensor()) return true;
  return false;
}

bool ExecutionProvider::CanRun(const Node& node, int opset, const KernelRegistry& registry,
                               std::string* why_not) const {
  return registry.Find(name(), node.domain(), node.op_type(), opset, InputDTypes(node), why_not,
                       TakesOrMakesNonTensors(node)) != nullptr;
}

StatusOr<std::unique_ptr<OpKernel>> ExecutionProvider::CreateKernel(const KernelDef& def, const Node& node,
                                                                    const KernelPermissions&) const {
  return def.factory(node);
}

}  // namespace tob
