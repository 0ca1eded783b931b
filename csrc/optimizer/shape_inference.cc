// Static shape inference: every node's schema shape function, in topological order, with the
// types of its inputs (symbolic dims allowed) and the values of its constant inputs. Declared
// types (graph outputs from the model) fill in whatever inference leaves unknown.
//
// Subgraphs are inferred by their node's shape function, through SubgraphInference: it gives the
// subgraph's formal inputs the types the op says (a Loop's loop-carried values, a Scan's slices),
// its outer-scope values their outer values' types, and infers it from its declared types again
// (each time: a Loop asks several times while it widens loop-carried shapes to a fixpoint).
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

bool SameDim(const Dim& a, const Dim& b) { return a.value == b.value && a.symbol == b.symbol; }

bool SameType(const ValueType& a, const ValueType& b) {
  if (a.dtype != b.dtype || a.kind != b.kind || a.optional != b.optional || a.shape.has_value() != b.shape.has_value())
    return false;
  if (!a.shape) return true;
  if (a.shape->size() != b.shape->size()) return false;
  for (size_t i = 0; i < a.shape->size(); ++i)
    if (!SameDim((*a.shape)[i], (*b.shape)[i])) return false;
  return true;
}

// Inference wins where it knows something; the previous (declared or earlier inferred) type
// fills the gaps: dtype, rank, and dims inference left unknown.
ValueType Merge(ValueType inferred, const ValueType& previous) {
  if (inferred.dtype == DType::kUndefined) inferred.dtype = previous.dtype;
  if (!inferred.shape) {
    inferred.shape = previous.shape;
  } else if (previous.shape && previous.shape->size() == inferred.shape->size()) {
    for (size_t i = 0; i < inferred.shape->size(); ++i) {
      Dim& d = (*inferred.shape)[i];
      if (!d.is_known() && !d.is_symbolic()) d = (*previous.shape)[i];
    }
  }
  return inferred;
}

Status InferShapesImpl(Graph& graph, const OpSchemaRegistry& schemas, bool* changed, int depth, bool defer);

class StaticSubgraphInference final : public SubgraphInference {
 public:
  StaticSubgraphInference(const OpSchemaRegistry& schemas, int depth, bool defer)
      : schemas_(schemas), depth_(depth), defer_(defer) {}

  Status Infer(Graph& subgraph, const std::vector<ValueType>& input_types,
               std::vector<ValueType>* output_types) override {
    if (depth_ >= Graph::kMaxNestingDepth)
      return InvalidModel(subgraph.Describe(), " is nested more than ", Graph::kMaxNestingDepth, " subgraphs deep");
    for (size_t i = 0; i < input_types.size() && i < subgraph.inputs().size(); ++i)
      subgraph.inputs()[i]->set_type(input_types[i]);
    for (Value* v : subgraph.outer_scope_values())
      if (v->outer() != nullptr) v->set_type(v->outer()->type());
    // From the declared types again: an earlier, narrower answer must not survive a wider question.
    for (Node* node : subgraph.nodes())
      for (Value* out : node->outputs()) out->set_type(out->declared_type());
    bool ignored = false;
    Status st = InferShapesImpl(subgraph, schemas_, &ignored, depth_ + 1, defer_);
    if (!st.ok() && !(defer_ && st.code() == StatusCode::kInvalidModel))
      return st.WithContext("inferring " + subgraph.Describe());
    output_types->clear();
    for (const Value* out : subgraph.outputs()) output_types->push_back(out->type());
    return Status::OK();
  }

 private:
  const OpSchemaRegistry& schemas_;
  int depth_;
  bool defer_;
};

// The static types of every value of every subgraph below `graph`, to tell whether inference
// changed any of them.
void SnapshotSubgraphTypes(const Graph& graph, std::vector<std::pair<const Value*, ValueType>>* out) {
  for (const Node* node : graph.nodes())
    for (const Graph* sub : node->subgraphs()) {
      for (const Value* v : sub->inputs()) out->emplace_back(v, v->type());
      for (const Value* v : sub->outer_scope_values()) out->emplace_back(v, v->type());
      for (const Node* n : sub->nodes())
        for (const Value* v : n->outputs()) out->emplace_back(v, v->type());
      SnapshotSubgraphTypes(*sub, out);
    }
}

Status InferShapesImpl(Graph& graph, const OpSchemaRegistry& schemas, bool* changed, int depth, bool defer) {
  TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  StaticSubgraphInference subgraphs(schemas, depth, defer);
  for (Node* node : order) {
    std::vector<const ValueType*> types;
    std::vector<const Tensor*> values;
    for (const Value* v : node->inputs()) {
      types.push_back(v ? &v->type() : nullptr);
      values.push_back(v ? v->initializer() : nullptr);
    }
    InferenceContext ctx(*node, NodeOpset(graph, *node), std::move(types), std::move(values));
    ctx.set_subgraph_inference(&subgraphs);
    TOB_RETURN_IF_ERROR(schemas.Infer(ctx));
    for (size_t i = 0; i < node->outputs().size(); ++i) {
      Value* out = node->output(i);
      ValueType merged = Merge(ctx.output_types()[i], out->type());
      if (SameType(merged, out->type())) continue;
      out->set_type(std::move(merged));
      *changed = true;
    }
  }
  return Status::OK();
}

// Infers `graph` and its subgraphs (errors inside subgraphs deferred); *changed when any type of
// either changed.
Status InferShapesTracked(Graph& graph, const OpSchemaRegistry& schemas, bool* changed) {
  std::vector<std::pair<const Value*, ValueType>> before;
  SnapshotSubgraphTypes(graph, &before);
  TOB_RETURN_IF_ERROR(InferShapesImpl(graph, schemas, changed, 0, /*defer=*/true));
  if (*changed || before.empty()) return Status::OK();
  std::vector<std::pair<const Value*, ValueType>> after;
  SnapshotSubgraphTypes(graph, &after);
  if (after.size() != before.size()) {
    *changed = true;
    return Status::OK();
  }
  for (size_t i = 0; i < after.size() && !*changed; ++i)
    *changed = after[i].first != before[i].first || !SameType(after[i].second, before[i].second);
  return Status::OK();
}

class ShapeInference final : public GraphPass {
 public:
  const char* name() const override { return "ShapeInference"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    return InferShapesTracked(graph, *ctx.schemas, changed);
  }

  std::string summary() const override { return "refined value types"; }
  // Subgraphs are inferred by their nodes' shape functions, with the types the op gives them.
  bool applies_to_subgraphs() const override { return false; }
};

}  // namespace

Status InferShapes(Graph& graph, const OpSchemaRegistry& schemas, bool defer_subgraph_errors) {
  bool changed = false;
  return InferShapesImpl(graph, schemas, &changed, 0, defer_subgraph_errors);
}

std::unique_ptr<GraphPass> CreateShapeInferencePass() { return std::make_unique<ShapeInference>(); }

}  // namespace tob
