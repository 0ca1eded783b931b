#include "framework/execution_provider.h"

namespace tob {

std::vector<DType> InputDTypes(const Node& node) {
  std::vector<DType> r;
  r.reserve(node.inputs().size());
  for (Value* v : node.inputs()) r.push_back(v ? v->type().dtype : DType::kUndefined);
  return r;
}

bool ExecutionProvider::CanRun(const Node& node, int opset, const KernelRegistry& registry,
                               std::string* why_not) const {
  return registry.Find(name(), node.domain(), node.op_type(), opset, InputDTypes(node), why_not) != nullptr;
}

StatusOr<std::unique_ptr<OpKernel>> ExecutionProvider::CreateKernel(const KernelDef& def, const Node& node,
                                                                    const KernelPermissions&) const {
  return def.factory(node);
}

}  // namespace tob
