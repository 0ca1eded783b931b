// Dead code elimination: a node goes when none of its outputs is read by another node, is a graph
// output or is kept by the caller, and it has no side effects. Walking the topological order
// backwards removes a whole dead chain in one run; constants left without readers go with it.
#include <algorithm>

#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

class DeadCodeElimination final : public GraphPass {
 public:
  const char* name() const override { return "DeadCodeElimination"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    size_t constants_before = graph.initializers().size();
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int removed = 0;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* node = *it;
      if (HasSideEffects(*node, *ctx.schemas)) continue;
      bool live = std::any_of(node->outputs().begin(), node->outputs().end(),
                              [&](const Value* v) { return !v->uses().empty() || kept.Contains(v); });
      if (live) continue;
      TOB_RETURN_IF_ERROR(graph.RemoveNode(node));
      ++removed;
    }
    graph.RemoveUnusedValues();
    size_t constants_removed = constants_before - graph.initializers().size();
    if (removed == 0 && constants_removed == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("removed ", removed, " node", removed == 1 ? "" : "s");
    if (constants_removed > 0) summary_ += StrCat(" and ", constants_removed, " unused constant(s)");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateDeadCodeEliminationPass() { return std::make_unique<DeadCodeElimination>(); }

}  // namespace tob
