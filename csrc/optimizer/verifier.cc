// The graph verifier: the structural invariants every pass must preserve, checked after each
// pass in debug mode and before a graph is executed. Each error names the node or value at fault.
#include <climits>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "optimizer/node_traits.h"
#include "optimizer/pass.h"

namespace tob {

namespace {

// Kahn's algorithm; on a cycle, walks producer edges among the unsorted nodes until one repeats,
// so the node named is on the cycle itself rather than merely downstream of it.
Status CheckAcyclic(const Graph& graph, const std::unordered_set<const Node*>& members) {
  std::unordered_map<const Node*, int> pending;
  std::deque<const Node*> ready;
  for (const Node* n : graph.nodes()) {
    int count = 0;
    for (const Value* in : n->inputs())
      if (in && members.count(in->producer())) ++count;
    pending[n] = count;
    if (count == 0) ready.push_back(n);
  }
  size_t sorted = 0;
  while (!ready.empty()) {
    const Node* n = ready.front();
    ready.pop_front();
    ++sorted;
    for (const Value* out : n->outputs())
      for (const Use& use : out->uses())
        if (--pending[use.node] == 0) ready.push_back(use.node);
  }
  if (sorted == graph.num_nodes()) return Status::OK();
  const Node* start = nullptr;
  for (const Node* n : graph.nodes())
    if (pending[n] > 0) {
      start = n;
      break;
    }
  std::unordered_set<const Node*> visited;
  const Node* n = start;
  while (visited.insert(n).second) {
    const Node* next = nullptr;
    for (const Value* in : n->inputs())
      if (in && members.count(in->producer()) && pending[in->producer()] > 0) {
        next = in->producer();
        break;
      }
    if (next == nullptr) break;  // cannot happen: an unsorted node waits on an unsorted producer
    n = next;
  }
  return InvalidModel("the graph has a cycle through ", n->Describe());
}

bool Defined(const Value* v, const std::unordered_set<const Node*>& members) {
  return v->is_graph_input() || v->initializer() != nullptr ||
         (v->producer() != nullptr && members.count(v->producer()) > 0);
}

Status CheckNodeEdges(const Node& node, const std::unordered_set<const Node*>& members,
                      std::unordered_map<const Value*, const Node*>& producers) {
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const Value* in = node.inputs()[i];
    if (in == nullptr) continue;
    if (!Defined(in, members))
      return InvalidModel(node.Describe(), ": input ", i, " '", in->name(),
                          "' is not produced by any node, graph input or initializer");
    bool listed = false;
    for (const Use& use : in->uses()) listed = listed || (use.node == &node && use.input_index == static_cast<int>(i));
    if (!listed)
      return InvalidModel(node.Describe(), ": input ", i, " '", in->name(), "' does not list the node among its uses");
  }
  for (const Value* out : node.outputs()) {
    auto [it, inserted] = producers.emplace(out, &node);
    if (!inserted || out->is_graph_input() || out->initializer() != nullptr || out->producer() != &node) {
      std::string other = !inserted                                     ? it->second->Describe()
                          : out->producer() != &node && out->producer() ? out->producer()->Describe()
                          : out->is_graph_input()                       ? std::string("a graph input")
                                                                        : std::string("an initializer");
      return InvalidModel("value '", out->name(), "' is produced twice: by ", node.Describe(), " and by ", other);
    }
  }
  return Status::OK();
}

Status CheckSchema(const Graph& graph, const Node& node, const OpSchemaRegistry& schemas) {
  const std::string domain = node.domain().empty() ? "ai.onnx" : node.domain();
  const OpSchema* schema = schemas.Find(node.domain(), node.op_type());
  if (schema == nullptr)
    return NotImplemented(node.Describe(), ": no schema for op '", node.op_type(), "' in domain '", domain, "' (opset ",
                          NodeOpset(graph, node), ")");
  int n_in = static_cast<int>(node.inputs().size());
  int n_out = static_cast<int>(node.outputs().size());
  auto bound = [](int max) { return max == INT_MAX ? std::string("n") : std::to_string(max); };
  if (n_in < schema->min_inputs || n_in > schema->max_inputs)
    return InvalidModel(node.Describe(), ": ", domain, "::", node.op_type(), " takes ", schema->min_inputs, "..",
                        bound(schema->max_inputs), " inputs, got ", n_in);
  if (n_out < schema->min_outputs || n_out > schema->max_outputs)
    return InvalidModel(node.Describe(), ": ", domain, "::", node.op_type(), " has ", schema->min_outputs, "..",
                        bound(schema->max_outputs), " outputs, got ", n_out);
  for (int i = 0; i < schema->min_inputs; ++i)
    if (node.input(i) == nullptr) return InvalidModel(node.Describe(), ": required input ", i, " is missing");
  return Status::OK();
}

}  // namespace

Status VerifyGraph(const Graph& graph, const OpSchemaRegistry& schemas) {
  const std::vector<Node*> nodes = graph.nodes();
  std::unordered_set<const Node*> members(nodes.begin(), nodes.end());
  std::unordered_map<const Value*, const Node*> producers;
  for (const Node* node : nodes) TOB_RETURN_IF_ERROR(CheckNodeEdges(*node, members, producers));
  TOB_RETURN_IF_ERROR(CheckAcyclic(graph, members));
  for (const Node* node : nodes) TOB_RETURN_IF_ERROR(CheckSchema(graph, *node, schemas));
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Value* out = graph.outputs()[i];
    if (out == nullptr || !Defined(out, members))
      return InvalidModel("graph output '", graph.output_names()[i],
                          "' is not produced by any node, graph input "
                          "or initializer");
  }
  return Status::OK();
}

}  // namespace tob
