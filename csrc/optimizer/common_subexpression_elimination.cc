// Common subexpression elimination: two nodes with the same op, domain, provider, inputs (the same
// values) and attributes compute the same outputs, so the later one is replaced by the earlier.
// Visiting in topological order lets merges cascade: once two producers are merged, their
// consumers become identical and merge too. Random ops and ops with side effects never merge, and
// neither do recompute copies (Node::recompute): they repeat forward work on purpose, so that the
// forward's value is freed before the backward needs it.
#include <functional>
#include <unordered_map>

#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

void HashCombine(size_t& seed, size_t h) { seed ^= h + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2); }

// Cheap and consistent with Equivalent (attribute values that are costly to hash only
// contribute their name and type; Equivalent compares them fully).
size_t NodeHash(const Node& node) {
  size_t h = std::hash<std::string>()(node.op_type());
  HashCombine(h, std::hash<std::string>()(node.domain()));
  HashCombine(h, node.outputs().size());
  for (const Value* v : node.inputs()) HashCombine(h, std::hash<const Value*>()(v));
  for (const auto& [name, attr] : node.attributes()) {
    HashCombine(h, std::hash<std::string>()(name));
    HashCombine(h, static_cast<size_t>(attr.type));
    if (attr.type == AttrType::kInt) HashCombine(h, std::hash<int64_t>()(attr.i));
  }
  return h;
}

bool Equivalent(const Node& a, const Node& b) {
  return a.op_type() == b.op_type() && a.domain() == b.domain() && a.provider() == b.provider() &&
         a.inputs() == b.inputs() && a.outputs().size() == b.outputs().size() && a.attributes() == b.attributes();
}

class CommonSubexpressionElimination final : public GraphPass {
 public:
  const char* name() const override { return "CommonSubexpressionElimination"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    std::unordered_map<size_t, std::vector<Node*>> seen;
    int merged = 0;
    for (Node* node : order) {
      if (node->recompute() || IsNonDeterministic(graph, *node, *ctx.schemas) || HasSideEffects(*node, *ctx.schemas) ||
          HasSubgraph(*node))
        continue;
      std::vector<Node*>& bucket = seen[NodeHash(*node)];
      Node* original = nullptr;
      for (Node* candidate : bucket)
        if (Equivalent(*candidate, *node)) {
          original = candidate;
          break;
        }
      bool keeps_name = false;
      for (const Value* out : node->outputs()) keeps_name = keeps_name || kept.ContainsName(out->name());
      if (original == nullptr || keeps_name) {
        bucket.push_back(node);
        continue;
      }
      // Graph outputs keep their external names: ReplaceAllUses re-points them.
      for (size_t i = 0; i < node->outputs().size(); ++i)
        TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(node->output(i), original->output(i)));
      TOB_RETURN_IF_ERROR(graph.RemoveNode(node));
      ++merged;
    }
    if (merged == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("merged ", merged, " duplicate node", merged == 1 ? "" : "s");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateCommonSubexpressionEliminationPass() {
  return std::make_unique<CommonSubexpressionElimination>();
}

}  // namespace tob
