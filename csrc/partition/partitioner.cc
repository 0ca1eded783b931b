#include <cstring>

#include "partition/execution_provider.h"

namespace tob {

std::vector<DType> InputDTypes(const Node& node) {
  std::vector<DType> r;
  for (Value* v : node.inputs()) r.push_back(v ? v->type().dtype : DType::kUndefined);
  return r;
}

bool ExecutionProvider::CanRun(const Node& node, int opset, const KernelRegistry& registry,
                               std::string* why_not) const {
  return registry.Find(name(), node.domain(), node.op_type(), opset, InputDTypes(node), why_not) != nullptr;
}

Status CpuExecutionProvider::CopyTensor(const Tensor& src, Tensor& dst) const {
  if (src.nbytes() != dst.nbytes()) return InvalidArgument("CopyTensor: size mismatch");
  std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
  return Status::OK();
}

std::string PartitionReport::ToString() const { return ""; }

Status PartitionGraph(Graph& graph, const std::vector<const ExecutionProvider*>& providers,
                      const KernelRegistry& registry, PartitionReport* report) {
  for (Node* node : graph.nodes()) {
    std::string reasons;
    bool placed = false;
    for (const ExecutionProvider* ep : providers) {
      std::string why;
      if (ep->CanRun(*node, graph.Opset(node->domain()), registry, &why)) {
        node->set_provider(ep->name());
        placed = true;
        break;
      }
      reasons += why + "; ";
    }
    if (!placed)
      return NotImplemented(node->Describe(), ": no execution provider can run it (opset ",
                            graph.Opset(node->domain()), "): ", reasons);
  }
  (void)report;
  return Status::OK();
}

}  // namespace tob
