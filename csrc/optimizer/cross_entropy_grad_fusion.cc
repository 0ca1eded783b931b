// Cross-entropy backward fusion: the gradient of log_softmax + nll_loss, as AOTAutograd writes it
// (nll_loss_backward, then _log_softmax_backward_data on the forward's saved log-probabilities),
//   dL  = NegativeLogLikelihoodLossGrad(dY, log_prob, target, weight?)     -w[t] g at the target, 0 elsewhere
//   dX  = LogSoftmaxGrad_13(dL, log_prob, axis = class axis)              dL - exp(log_prob) sum(dL)
// becomes one com.microsoft SoftmaxCrossEntropyLossGrad(dY, log_prob, target, weight?) with the same
// reduction and ignore_index: dX = (exp(log_prob) - [c == t]) w[t] g, the same function in one pass
// over log_prob, without the dense [N, C] dL between the two nodes (GPT-2's and BERT's language-model
// heads: [tokens, vocab]). Not bit for bit the chain (the target class's (p - 1) w g is one rounding
// where the chain's -w g + p w g is two), within float32's rounding of it. The loss's own forward
// stays (LogSoftmax's output is what the backward reads). Level kExtended; TOB_LOSS_GRAD_FUSION=0
// turns it off (A/B runs).
#include "core/domain.h"
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

bool IsMs(const Node& n, const char* op) { return n.domain() == kMicrosoftDomain && n.op_type() == op; }

// The NegativeLogLikelihoodLossGrad whose gradient `n` (a LogSoftmaxGrad_13) back-propagates through
// the log-softmax over the class axis of the same log-probabilities, with no other reader of dL.
Node* FusableNllGrad(const Node& n, const KeptValues& kept) {
  if (!IsMs(n, "LogSoftmaxGrad_13") || n.inputs().size() != 2 || n.outputs().size() != 1) return nullptr;
  Value* dl = n.input(0);
  Value* log_prob = n.input(1);
  if (dl == nullptr || log_prob == nullptr || dl->producer() == nullptr) return nullptr;
  Node* nll = dl->producer();
  if (!IsMs(*nll, "NegativeLogLikelihoodLossGrad") || nll->input(1) != log_prob) return nullptr;
  if (dl->uses().size() != 1 || kept.Contains(dl)) return nullptr;
  // The class axis is 1 ([N, C, d1, ...]); LogSoftmaxGrad_13's axis defaults to -1.
  const auto& shape = log_prob->type().shape;
  if (!shape) return nullptr;
  const int64_t rank = static_cast<int64_t>(shape->size());
  int64_t axis = -1;
  if (rank < 2 || !n.GetAttr("axis", &axis, int64_t{-1}).ok()) return nullptr;
  if ((axis < 0 ? axis + rank : axis) != 1) return nullptr;
  return nll;
}

class CrossEntropyGradFusion final : public GraphPass {
 public:
  const char* name() const override { return "CrossEntropyGradFusion"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    std::vector<Node*> dead;
    int fused = 0;
    for (Node* n : order) {
      Node* nll = FusableNllGrad(*n, kept);
      if (nll == nullptr) continue;
      std::vector<std::string> inputs;
      for (Value* v : nll->inputs()) inputs.push_back(v != nullptr ? v->name() : std::string());
      while (!inputs.empty() && inputs.back().empty()) inputs.pop_back();
      AttributeMap attrs;
      for (const char* a : {"reduction", "ignore_index"})
        if (const Attribute* attr = nll->FindAttribute(a)) attrs[a] = *attr;
      Value* old = n->output(0);
      TOB_ASSIGN_OR_RETURN(Node * fused_node,
                           graph.AddNode("SoftmaxCrossEntropyLossGrad", kMicrosoftDomain, inputs,
                                         {graph.UniqueName(old->name() + "_sce_grad")}, std::move(attrs),
                                         graph.UniqueName(n->name() + "_sce_grad")));
      fused_node->output(0)->set_type(old->type());
      graph.PlaceLike(fused_node, n);
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(old, fused_node->output(0)));
      dead.push_back(n);
      dead.push_back(nll);
      ++fused;
    }
    for (Node* d : dead) TOB_RETURN_IF_ERROR(graph.RemoveNode(d));
    if (fused == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("fused ", fused, " NegativeLogLikelihoodLossGrad + LogSoftmaxGrad pair(s)");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateCrossEntropyGradFusionPass() { return std::make_unique<CrossEntropyGradFusion>(); }

}  // namespace tob
