#include "optimizer/node_traits.h"

namespace tob {

int NodeOpset(const Graph& graph, const Node& node) {
  int v = graph.Opset(node.domain());
  return v < 0 && !node.domain().empty() ? 1 : v;
}

bool IsNonDeterministic(const Graph& graph, const Node& node, const OpSchemaRegistry& schemas) {
  const OpSchema* schema = schemas.Find(node.domain(), node.op_type());
  if (schema != nullptr && schema->nondeterministic && schema->nondeterministic(node, NodeOpset(graph, node)))
    return true;
  // A control-flow node is as random as what its subgraphs run.
  for (const Graph* sub : node.subgraphs())
    for (const Node* n : sub->nodes())
      if (IsNonDeterministic(*sub, *n, schemas)) return true;
  return false;
}

bool HasSideEffects(const Node& node, const OpSchemaRegistry& schemas) {
  const OpSchema* schema = schemas.Find(node.domain(), node.op_type());
  if (schema != nullptr && schema->side_effects) return true;
  for (const Graph* sub : node.subgraphs())
    for (const Node* n : sub->nodes())
      if (HasSideEffects(*n, schemas)) return true;
  return false;
}

bool HasSubgraph(const Node& node) { return node.has_subgraphs(); }

}  // namespace tob
