// What passes need to know about a node: whether evaluating it twice gives the same result,
// whether it must run even when nothing reads its outputs (both declared with the op's schema,
// OpSchema::nondeterministic and OpSchema::side_effects), whether it has subgraphs.
#pragma once

#include <string>
#include <unordered_set>

#include "ir/graph.h"
#include "ops/op_schema.h"
#include "optimizer/pass.h"

namespace tob {

// The opset of the node's domain in this graph. Contrib domains that the model does not import
// are at version 1 (as onnxruntime assumes); ai.onnx not imported stays -1.
int NodeOpset(const Graph& graph, const Node& node);

// Random generators, Dropout in training mode, ATen nodes: never folded, never merged. An op
// without a schema has no traits (nothing can run it: shape inference needs the schema). A node
// with subgraphs has the traits of every node in them.
bool IsNonDeterministic(const Graph& graph, const Node& node, const OpSchemaRegistry& schemas);

// Ops that talk to the outside world (Python callbacks, the training yield point): never folded,
// merged or removed, even when nothing reads their outputs.
bool HasSideEffects(const Node& node, const OpSchemaRegistry& schemas);

// Nodes with a graph attribute (If, Loop, Scan): passes never evaluate or merge them (they
// optimise inside their subgraphs instead).
bool HasSubgraph(const Node& node);

// The values a pass must not make disappear: graph outputs and PassContext::keep_values.
class KeptValues {
 public:
  explicit KeptValues(const PassContext& ctx) : names_(ctx.keep_values.begin(), ctx.keep_values.end()) {}
  bool Contains(const Value* v) const { return v->is_graph_output() || names_.count(v->name()) > 0; }
  bool ContainsName(const std::string& name) const { return names_.count(name) > 0; }

 private:
  std::unordered_set<std::string> names_;
};

}  // namespace tob
