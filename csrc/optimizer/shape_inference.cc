// Static shape inference: every node's schema shape function, in topological order, with the
// types of its inputs (symbolic dims allowed) and the values of its constant inputs. Declared
// types (graph outputs from the model) fill in whatever inference leaves unknown.
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

Status InferShapesImpl(Graph& graph, const OpSchemaRegistry& schemas, bool* changed) {
  TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  for (Node* node : order) {
    std::vector<const ValueType*> types;
    std::vector<const Tensor*> values;
    for (const Value* v : node->inputs()) {
      types.push_back(v ? &v->type() : nullptr);
      values.push_back(v ? v->initializer() : nullptr);
    }
    InferenceContext ctx(*node, NodeOpset(graph, *node), std::move(types), std::move(values));
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

class ShapeInference final : public GraphPass {
 public:
  const char* name() const override { return "ShapeInference"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    return InferShapesImpl(graph, *ctx.schemas, changed);
  }

  std::string summary() const override { return "refined value types"; }
};

}  // namespace

Status InferShapes(Graph& graph, const OpSchemaRegistry& schemas) {
  bool changed = false;
  return InferShapesImpl(graph, schemas, &changed);
}

std::unique_ptr<GraphPass> CreateShapeInferencePass() { return std::make_unique<ShapeInference>(); }

}  // namespace tob
