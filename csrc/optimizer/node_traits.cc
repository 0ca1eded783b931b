#include "optimizer/node_traits.h"

namespace tob {

int NodeOpset(const Graph& graph, const Node& node) {
  int v = graph.Opset(node.domain());
  return v < 0 && !node.domain().empty() ? 1 : v;
}

bool IsNonDeterministic(const Graph& graph, const Node& node, const OpSchemaRegistry& schemas) {
  const OpSchema* schema = schemas.Find(node.domain(), node.op_type());
  return schema != nullptr && schema->nondeterministic && schema->nondeterministic(node, NodeOpset(graph, node));
}

bool HasSideEffects(const Node& node, const OpSchemaRegistry& schemas) {
  const OpSchema* schema = schemas.Find(node.domain(), node.op_type());
  return schema != nullptr && schema->side_effects;
}

bool HasSubgraph(const Node& node) {
  for (const auto& [name, attr] : node.attributes())
    if (attr.type == AttrType::kGraph) return true;
  return false;
}

}  // namespace tob
