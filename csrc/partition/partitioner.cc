// The partitioner: every node goes to the first provider, in priority order, whose CanRun accepts
// it; then, wherever an edge joins two devices, a copy node is inserted (MemcpyFromHost run by
// the device provider for host -> device, MemcpyToHost run by it for device -> host; device to
// device goes through the host). Graph inputs, graph outputs and initializers live on the host;
// a MemcpyFromHost fed by an initializer is a constant upload the session may do once.
// Subgraphs are partitioned the same way, over the same providers, after the graph that holds
// them; a subgraph's inputs, outer-scope values and outputs live on the host (the control-flow
// kernels run on the CPU provider), so a value an enclosing graph computed on a device reaches a
// subgraph through a MemcpyToHost in the enclosing graph, as an implicit input of the node.
#include "partition/partitioner.h"

#include <map>
#include <unordered_map>

#include "optimizer/node_traits.h"

namespace tob {

namespace {

bool IsCopy(const Node& node, const char* op) { return node.domain() == kMicrosoftDomain && node.op_type() == op; }

std::string OpLabel(const Node& node) {
  return node.domain().empty() ? node.op_type() : node.domain() + "::" + node.op_type();
}

class CopyInserter {
 public:
  CopyInserter(Graph& graph, const std::vector<const ExecutionProvider*>& providers, PartitionReport* report)
      : graph_(graph), report_(report) {
    for (const ExecutionProvider* ep : providers) by_name_.emplace(ep->name(), ep);
  }

  // The provider whose device holds `v`; nullptr for the host (inputs, initializers, the
  // result of MemcpyToHost, which a device provider runs but which lands on the host).
  const ExecutionProvider* Owner(const Value* v) const {
    if (v->producer() == nullptr || IsCopy(*v->producer(), "MemcpyToHost")) return nullptr;
    auto it = by_name_.find(v->producer()->provider());
    return it == by_name_.end() ? nullptr : it->second;
  }

  static Device DeviceOf(const ExecutionProvider* ep) { return ep ? ep->device() : Device{}; }

  // `v` as seen on `target`'s device (nullptr = host), inserting copies at most once per device.
  StatusOr<Value*> On(Value* v, const ExecutionProvider* target) {
    const ExecutionProvider* owner = Owner(v);
    const Device from = DeviceOf(owner), to = DeviceOf(target);
    if (from == to) return v;
    auto key = std::make_pair(v, std::make_pair(static_cast<int>(to.type), to.index));
    if (auto it = copies_.find(key); it != copies_.end()) return it->second;
    Value* copy = nullptr;
    if (from != Device{} && to != Device{}) {  // device to another device: through the host
      TOB_ASSIGN_OR_RETURN(Value * on_host, On(v, nullptr));
      TOB_ASSIGN_OR_RETURN(copy, On(on_host, target));
    } else if (to == Device{}) {
      TOB_ASSIGN_OR_RETURN(copy, AddCopy("MemcpyToHost", v, owner, from, to));
    } else {
      TOB_ASSIGN_OR_RETURN(copy, AddCopy("MemcpyFromHost", v, target, from, to));
    }
    copies_[key] = copy;
    return copy;
  }

 private:
  StatusOr<Value*> AddCopy(const char* op, Value* v, const ExecutionProvider* runner, Device from, Device to) {
    std::string tag = to.type == DeviceType::kCPU ? "host" : StrCat("cuda", to.index);
    std::string out_name = graph_.UniqueName(StrCat(v->name(), "_", tag));
    TOB_ASSIGN_OR_RETURN(Node * node, graph_.AddNode(op, kMicrosoftDomain, {v->name()}, {out_name}, {},
                                                     graph_.UniqueName(StrCat(op, "_", v->name()))));
    node->set_provider(runner->name());
    node->output(0)->set_type(v->type());
    if (report_) {
      report_->nodes.push_back({node->name(), OpLabel(*node), runner->name(),
                                StrCat("copies '", v->name(), "' ", from.ToString(), " -> ", to.ToString())});
      ++report_->copies_inserted;
    }
    return node->output(0);
  }

  Graph& graph_;
  PartitionReport* report_;
  std::unordered_map<std::string, const ExecutionProvider*> by_name_;
  std::map<std::pair<Value*, std::pair<int, int>>, Value*> copies_;
};

// Re-points graph output entries that are `from` at `to`, leaving node inputs alone (the graph
// only offers ReplaceAllUses, so the node uses are put back afterwards).
Status RedirectGraphOutput(Graph& graph, Value* from, Value* to) {
  std::vector<Use> uses = from->uses();
  TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(from, to));
  for (const Use& u : uses) {
    if (u.implicit()) graph.ReplaceImplicitInput(u.node, to, from);
    else graph.SetNodeInput(u.node, u.input_index, from);
  }
  return Status::OK();
}

// "If_3/then_branch/": where a subgraph's nodes are in the partition report.
std::string SubgraphPrefix(const std::string& prefix, const Node& owner, const Graph& sub) {
  for (const auto& [attr, a] : owner.attributes()) {
    if (a.type == AttrType::kGraph && a.g.get() == &sub) return StrCat(prefix, owner.name(), "/", attr, "/");
    for (size_t i = 0; a.type == AttrType::kGraphs && i < a.graphs.size(); ++i)
      if (a.graphs[i].get() == &sub) return StrCat(prefix, owner.name(), "/", attr, "[", i, "]/");
  }
  return StrCat(prefix, owner.name(), "/");
}

Status PartitionOne(Graph& graph, const std::vector<const ExecutionProvider*>& providers,
                    const KernelRegistry& registry, PartitionReport* report, const std::string& prefix);

}  // namespace

Status PartitionGraph(Graph& graph, const std::vector<const ExecutionProvider*>& providers,
                      const KernelRegistry& registry, PartitionReport* report) {
  if (providers.empty()) return InvalidArgument("PartitionGraph: no execution provider given");
  if (report) *report = PartitionReport();
  return PartitionOne(graph, providers, registry, report, "");
}

namespace {

Status PartitionOne(Graph& graph, const std::vector<const ExecutionProvider*>& providers,
                    const KernelRegistry& registry, PartitionReport* report, const std::string& prefix) {
  TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());

  for (Node* node : order) {
    const int opset = NodeOpset(graph, *node);
    std::string reasons;
    const ExecutionProvider* chosen = nullptr;
    for (const ExecutionProvider* ep : providers) {
      // A node placed before partitioning (a copy from an earlier run, a pinned node) stays.
      if (!node->provider().empty() && node->provider() == ep->name()) {
        chosen = ep;
        break;
      }
    }
    for (size_t i = 0; chosen == nullptr && i < providers.size(); ++i) {
      const ExecutionProvider* ep = providers[i];
      std::string why;
      if (ep->CanRun(*node, opset, registry, &why)) {
        chosen = ep;
        break;
      }
      if (why.empty()) why = "declined";
      if (why.rfind(ep->name(), 0) != 0) why = ep->name() + ": " + why;
      reasons += (reasons.empty() ? "" : "; ") + why;
    }
    if (chosen == nullptr)
      return NotImplemented(node->Describe(), ": no execution provider can run ",
                            node->domain().empty() ? "ai.onnx" : node->domain(), "::", node->op_type(), " at opset ",
                            opset, " (", reasons, ")");
    node->set_provider(chosen->name());
    if (report) report->nodes.push_back({prefix + node->name(), OpLabel(*node), chosen->name(), reasons});
  }

  CopyInserter copies(graph, providers, report);
  const int nodes_before = static_cast<int>(graph.num_nodes());
  for (Node* node : order) {
    const ExecutionProvider* ep = nullptr;
    for (const ExecutionProvider* p : providers)
      if (p->name() == node->provider()) ep = p;
    // A copy node already in the graph (partitioned before) reads from the host.
    const ExecutionProvider* reads_on = IsCopy(*node, "MemcpyFromHost") ? nullptr : ep;
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      Value* in = node->input(i);
      if (in == nullptr) continue;
      TOB_ASSIGN_OR_RETURN(Value * local, copies.On(in, reads_on));
      if (local != in) graph.SetNodeInput(node, static_cast<int>(i), local);
    }
    // What its subgraphs read, on the device of the node that runs them.
    for (Value* in : std::vector<Value*>(node->implicit_inputs())) {
      TOB_ASSIGN_OR_RETURN(Value * local, copies.On(in, reads_on));
      if (local != in) graph.ReplaceImplicitInput(node, in, local);
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    Value* out = graph.outputs()[i];
    TOB_ASSIGN_OR_RETURN(Value * on_host, copies.On(out, nullptr));
    if (on_host != out) TOB_RETURN_IF_ERROR(RedirectGraphOutput(graph, out, on_host));
  }
  if (static_cast<int>(graph.num_nodes()) > nodes_before && graph.Opset(kMicrosoftDomain) < 0) {
    Graph* root = &graph;  // opsets are the model's (Graph::Opset reads Root()'s), copies in a subgraph too
    while (root->parent() != nullptr) root = root->parent();
    root->SetOpset(kMicrosoftDomain, 1);
  }
  for (Node* node : order)
    for (Graph* sub : node->subgraphs())
      TOB_RETURN_IF_ERROR(PartitionOne(*sub, providers, registry, report, SubgraphPrefix(prefix, *node, *sub)));
  return Status::OK();
}

}  // namespace

}  // namespace tob
