// Inlining an If whose condition is a constant: it always runs the same branch, so that branch's
// nodes move into the enclosing graph in the If's place (its constants with them, the values it
// read from outside becoming what they stood for) and the If goes, with the branch that never
// runs. That saves a nested run per call, exposes the branch to the enclosing graph's passes, and
// drops a dead branch that may not even be well-typed (onnx's AffineGrid function body has a
// branch for the other rank that its constant condition never takes). A branch holding subgraphs
// of its own stays as it is: their outer-scope values would need re-linking.
#include <unordered_map>

#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

// The branch a constant condition selects; nullptr when the node is not such an If.
Graph* TakenBranch(const Node& node) {
  if (node.op_type() != "If" || !node.domain().empty()) return nullptr;
  const Value* cond = node.input(0);
  if (cond == nullptr || cond->initializer() == nullptr || cond->initializer()->numel() != 1) return nullptr;
  Graph* branch = node.subgraph(cond->initializer()->ElementAsInt64(0) != 0 ? "then_branch" : "else_branch");
  if (branch == nullptr || !branch->inputs().empty() || branch->outputs().size() != node.outputs().size())
    return nullptr;  // malformed: shape inference names it
  for (const Node* n : branch->nodes())
    if (n->has_subgraphs()) return nullptr;
  return branch;
}

// A name of `graph` for a value called `name` in the branch: the same when it is free.
std::string FreeName(Graph& graph, const std::string& name) {
  return graph.FindValue(name) == nullptr ? name : graph.UniqueName(name);
}

Status Inline(Graph& graph, Node* node, Graph& branch) {
  std::unordered_map<const Value*, Value*> in_parent;
  for (Value* v : branch.outer_scope_values()) in_parent[v] = v->outer();
  for (Value* c : branch.initializers()) {
    TOB_ASSIGN_OR_RETURN(Value * moved, graph.AddInitializer(FreeName(graph, c->name()), *c->initializer()));
    in_parent[c] = moved;
  }
  TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, branch.TopologicalOrder());
  for (const Node* n : order) {
    std::vector<std::string> inputs, outputs;
    for (const Value* in : n->inputs()) inputs.push_back(in ? in_parent.at(in)->name() : std::string());
    for (const Value* out : n->outputs()) outputs.push_back(FreeName(graph, out->name()));
    TOB_ASSIGN_OR_RETURN(Node * copy, graph.AddNode(n->op_type(), n->domain(), inputs, outputs, n->attributes(),
                                                    StrCat(node->name(), "/", n->name())));
    graph.PlaceLike(copy, node);
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      const Value* out = n->output(i);
      if (out->declared_type().dtype != DType::kUndefined) copy->output(i)->Declare(out->declared_type());
      copy->output(i)->set_type(out->type());
      in_parent[out] = copy->output(i);
    }
  }
  for (size_t i = 0; i < node->outputs().size(); ++i) {
    Value* result = in_parent.at(branch.outputs()[i]);
    Value* out = node->output(i);
    // A graph output must not become a graph input, a constant or another output (the executor
    // would hand out one buffer twice): such a result keeps a copy.
    if (out->is_graph_output() && (result->producer() == nullptr || result->is_graph_output())) {
      TOB_ASSIGN_OR_RETURN(Node * copy, graph.AddNode("Identity", "", {result->name()}, {graph.UniqueName(out->name())},
                                                      {}, node->name() + "/copy"));
      graph.PlaceLike(copy, node);
      copy->output(0)->set_type(result->type());
      result = copy->output(0);
    }
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(out, result));
  }
  return graph.RemoveNode(node);
}

class InlineConstantIf final : public GraphPass {
 public:
  const char* name() const override { return "InlineConstantIf"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int inlined = 0;
    for (Node* node : order) {
      Graph* branch = TakenBranch(*node);
      if (branch == nullptr) continue;
      bool keeps_name = false;
      for (const Value* out : node->outputs()) keeps_name = keeps_name || kept.ContainsName(out->name());
      if (keeps_name) continue;
      TOB_RETURN_IF_ERROR(Inline(graph, node, *branch));
      ++inlined;
    }
    if (inlined == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("inlined the taken branch of ", inlined, " If node", inlined == 1 ? "" : "s",
                      " with a constant condition");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateInlineConstantIfPass() { return std::make_unique<InlineConstantIf>(); }

}  // namespace tob
