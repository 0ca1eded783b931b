// Identity elimination: nodes that hand their input on unchanged are bypassed and removed:
// Identity, Cast to the dtype the input already has, Reshape whose static output shape equals
// its input's, and Dropout in inference mode whose mask nobody reads.
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

bool SameStaticShape(const ValueType& a, const ValueType& b) {
  if (!a.shape || !b.shape || a.shape->size() != b.shape->size()) return false;
  for (size_t i = 0; i < a.shape->size(); ++i)
    if (!(*a.shape)[i].is_known() && !(*a.shape)[i].is_symbolic()) return false;
  return *a.shape == *b.shape;
}

// The node's output 0 is its input 0, unchanged.
bool IsNoOp(const Graph& graph, const Node& node, const OpSchemaRegistry& schemas) {
  if (!node.domain().empty() || node.input(0) == nullptr || node.outputs().empty()) return false;
  const std::string& op = node.op_type();
  const ValueType& in = node.input(0)->type();
  if (op == "Identity") return true;
  if (op == "Cast") {
    int64_t to = 0;
    return in.dtype != DType::kUndefined && node.GetAttr("to", &to).ok() &&
           DTypeFromOnnx(static_cast<int32_t>(to)) == in.dtype;
  }
  if (op == "Reshape") {
    const ValueType& out = node.output(0)->type();
    return in.dtype == out.dtype && SameStaticShape(in, out);
  }
  if (op == "Dropout") {
    const Value* mask = node.output(1);
    return !IsNonDeterministic(graph, node, schemas) &&
           (mask == nullptr || (mask->uses().empty() && !mask->is_graph_output()));
  }
  return false;
}

class IdentityElimination final : public GraphPass {
 public:
  const char* name() const override { return "IdentityElimination"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int removed = 0;
    for (Node* node : order) {
      if (!IsNoOp(graph, *node, *ctx.schemas)) continue;
      Value* in = node->input(0);
      Value* out = node->output(0);
      if (kept.ContainsName(out->name())) continue;
      // A graph output re-pointed at a graph input, a constant or another graph output would
      // make the executor hand out one buffer under two names (or an input as an output): the
      // copy stays.
      if (out->is_graph_output() && (in->producer() == nullptr || in->is_graph_output())) continue;
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(out, in));
      TOB_RETURN_IF_ERROR(graph.RemoveNode(node));
      ++removed;
    }
    if (removed == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("removed ", removed, " no-op node", removed == 1 ? "" : "s");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateIdentityEliminationPass() { return std::make_unique<IdentityElimination>(); }

}  // namespace tob
