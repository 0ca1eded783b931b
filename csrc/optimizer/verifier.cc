// The graph verifier: the structural invariants every pass must preserve, checked after each
// pass in debug mode and before a graph is executed. Each error names the node or value at fault.
// Subgraphs are checked the same way, recursively (their errors name the subgraph), together with
// the links between a subgraph's outer-scope values and its node's implicit inputs.
#include <algorithm>
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
    for (const Value* in : n->implicit_inputs())
      if (members.count(in->producer())) ++count;
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
    std::vector<const Value*> reads(n->inputs().begin(), n->inputs().end());
    reads.insert(reads.end(), n->implicit_inputs().begin(), n->implicit_inputs().end());
    for (const Value* in : reads)
      if (in && members.count(in->producer()) && pending[in->producer()] > 0) {
        next = in->producer();
        break;
      }
    if (next == nullptr) break;  // cannot happen: an unsorted node waits on an unsorted producer
    n = next;
  }
  return InvalidModel(graph.is_subgraph() ? graph.Describe() + " has" : "the graph has", " a cycle through ",
                      n->Describe());
}

bool Defined(const Graph& graph, const Value* v, const std::unordered_set<const Node*>& members) {
  if (graph.FindValue(v->name()) != v) return false;  // a value of another graph
  return v->is_graph_input() || v->initializer() != nullptr || v->is_outer_scope() ||
         (v->producer() != nullptr && members.count(v->producer()) > 0);
}

Status CheckNodeEdges(const Graph& graph, const Node& node, const std::unordered_set<const Node*>& members,
                      std::unordered_map<const Value*, const Node*>& producers) {
  for (const Value* in : node.implicit_inputs()) {
    if (!Defined(graph, in, members))
      return InvalidModel(node.Describe(), ": implicit input '", in->name(),
                          "' (read by its subgraphs) is not a value of ", graph.Describe());
    bool listed = false;
    for (const Use& use : in->uses()) listed = listed || (use.node == &node && use.implicit());
    if (!listed)
      return InvalidModel(node.Describe(), ": implicit input '", in->name(), "' does not list the node among its uses");
  }
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const Value* in = node.inputs()[i];
    if (in == nullptr) continue;
    if (!Defined(graph, in, members))
      return InvalidModel(node.Describe(), ": input ", i, " '", in->name(),
                          "' is not produced by any node, graph input or initializer");
    bool listed = false;
    for (const Use& use : in->uses()) listed = listed || (use.node == &node && use.input_index == static_cast<int>(i));
    if (!listed)
      return InvalidModel(node.Describe(), ": input ", i, " '", in->name(), "' does not list the node among its uses");
  }
  for (const Value* out : node.outputs()) {
    auto [it, inserted] = producers.emplace(out, &node);
    if (!inserted || out->is_graph_input() || out->initializer() != nullptr || out->is_outer_scope() ||
        out->producer() != &node) {
      std::string other = !inserted                                     ? it->second->Describe()
                          : out->producer() != &node && out->producer() ? out->producer()->Describe()
                          : out->is_graph_input()                       ? std::string("a graph input")
                          : out->is_outer_scope()                       ? std::string("an enclosing graph")
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

// A node's subgraphs: owned by it, each outer-scope value linked to one of the node's implicit
// inputs and every implicit input read by some subgraph.
Status CheckSubgraphLinks(const Graph& graph, const Node& node) {
  std::unordered_set<const Value*> read;
  for (const Graph* sub : node.subgraphs()) {
    if (sub->owner() != &node || sub->parent() != &graph)
      return InvalidModel(node.Describe(), ": subgraph '", sub->name(), "' is not linked to the node that holds it");
    for (const Value* v : sub->outer_scope_values()) {
      const Value* outer = v->outer();
      if (outer == nullptr || graph.FindValue(outer->name()) != outer)
        return InvalidModel(sub->Describe(), " reads '", v->name(), "', which is not a value of ", graph.Describe());
      if (std::find(node.implicit_inputs().begin(), node.implicit_inputs().end(), outer) ==
          node.implicit_inputs().end())
        return InvalidModel(sub->Describe(), " reads '", outer->name(), "' but ", node.Describe(),
                            " does not list it among its implicit inputs");
      read.insert(outer);
    }
  }
  for (const Value* in : node.implicit_inputs())
    if (!read.count(in))
      return InvalidModel(node.Describe(), ": implicit input '", in->name(), "' is read by none of its subgraphs");
  return Status::OK();
}

Status VerifyGraphAt(const Graph& graph, const OpSchemaRegistry& schemas, int depth) {
  if (depth > Graph::kMaxNestingDepth)
    return InvalidModel(graph.Describe(), " is nested more than ", Graph::kMaxNestingDepth, " subgraphs deep");
  const std::vector<Node*> nodes = graph.nodes();
  std::unordered_set<const Node*> members(nodes.begin(), nodes.end());
  std::unordered_map<const Value*, const Node*> producers;
  for (const Node* node : nodes) TOB_RETURN_IF_ERROR(CheckNodeEdges(graph, *node, members, producers));
  TOB_RETURN_IF_ERROR(CheckAcyclic(graph, members));
  for (const Node* node : nodes) TOB_RETURN_IF_ERROR(CheckSchema(graph, *node, schemas));
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Value* out = graph.outputs()[i];
    if (out == nullptr || !Defined(graph, out, members))
      return InvalidModel(graph.is_subgraph() ? graph.Describe() + ": output '" : "graph output '",
                          graph.output_names()[i], "' is not produced by any node, graph input or initializer");
  }
  for (const Node* node : nodes) {
    if (!node->has_subgraphs()) continue;
    TOB_RETURN_IF_ERROR(CheckSubgraphLinks(graph, *node));
    for (const Graph* sub : node->subgraphs()) {
      Status st = VerifyGraphAt(*sub, schemas, depth + 1);
      if (!st.ok())
        return st.message().find(sub->Describe()) == std::string::npos ? st.WithContext("in " + sub->Describe()) : st;
    }
  }
  return Status::OK();
}

}  // namespace

Status VerifyGraph(const Graph& graph, const OpSchemaRegistry& schemas) { return VerifyGraphAt(graph, schemas, 0); }

}  // namespace tob
