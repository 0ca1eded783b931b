// RMSNorm fusion: the root-mean-square normalisation that HuggingFace's LLaMA, Mistral, Qwen2 (and
// most decoder-only models since) write out by hand,
//
//   xf = Cast(X, to = float32)                 (only when X is float16 / bfloat16; else xf = X)
//   ms = ReduceMean(Mul(xf, xf) | Pow(xf, 2), axes = [last], keepdims = 1)
//   r  = Reciprocal(Sqrt(ms + eps)) | Div(1, Sqrt(ms + eps))        n = Mul(xf, r)
//   Y  = Mul(Cast(n, to = V)?, W)              (W: the [D] weight, of Y's type V)
//
// becomes one ai.tob::RMSNormalization(X, W, axis = -1, epsilon = eps): one pass over each row
// instead of three fused loops and a reduction (onnxruntime does the same in
// SimplifiedLayerNormFusion). ai.tob's op is ai.onnx's (opset 23) at any opset, with an optional
// second output InvStdDev ([..., 1], float32) that takes over r's other readers: the training
// forward's case, where AOTAutograd saves r for the backward. Its kernel repeats the chain's float32
// arithmetic step by step (squares rounded, summed in ReduceMean's order, ...), so fusing changes
// no bit: a backward that recomputes r from the decomposed chain (the memory optimizer's plans)
// gets the value the forward saved, and fused and unfused sessions agree exactly.
//
// Exact matching, every guard checked (a chain that fails one stays as it is): the reduction is
// over the last axis only, with keepdims; the statistic is computed in float32 (a float16 chain
// would round its squares to float16, which the fused kernel would not); eps is a float32 scalar
// constant and 2 the exponent; W has rank 1 and the last dim of X; Y has W's type; every
// intermediate except r is read only inside the chain and is neither a graph output nor kept; all
// nodes carry the same recompute mark.
//
// Only for sessions whose nodes all run on the CPU provider (PassContext::elementwise_fusion), which
// is the only one with the ai.tob kernel; TOB_RMS_NORM_FUSION=0 takes the pass out of the pipeline.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

bool IsOnnx(const Node* n, const char* op) { return n != nullptr && n->domain().empty() && n->op_type() == op; }

// The only reader of `v`; nullptr when it has none or several, or must stay visible.
Node* SoleReader(const Value* v, const KeptValues& kept) {
  if (v == nullptr || kept.Contains(v) || v->uses().size() != 1) return nullptr;
  return v->uses()[0].node;
}

// A float32 constant with one element, its rank at most `max_rank` (so adding it broadcasts nothing).
bool ScalarConstant(const Value* v, size_t max_rank, float* out) {
  const Tensor* t = v != nullptr ? v->initializer() : nullptr;
  if (t == nullptr || t->numel() != 1 || t->dtype() != DType::kFloat32 || t->shape().size() > max_rank) return false;
  *out = t->data<float>()[0];
  return true;
}

// The other input of a two-input node that reads `v` (nullptr when it does not, or reads it twice).
Value* OtherInput(const Node* n, const Value* v) {
  if (n->inputs().size() != 2) return nullptr;
  if (n->input(0) == v && n->input(1) != v) return n->input(1);
  if (n->input(1) == v && n->input(0) != v) return n->input(0);
  return nullptr;
}

// ReduceMean over exactly the last axis of a rank-`rank` input, keepdims = 1.
bool ReducesLastAxis(const Graph& graph, const Node& mean, size_t rank) {
  int64_t keepdims = 1;
  if (!mean.GetAttr("keepdims", &keepdims, int64_t{1}).ok() || keepdims != 1) return false;
  std::vector<int64_t> axes;
  if (NodeOpset(graph, mean) >= 18) {
    if (mean.FindAttribute("axes") != nullptr || mean.inputs().size() != 2) return false;
    const Tensor* t = mean.input(1) != nullptr ? mean.input(1)->initializer() : nullptr;
    if (t == nullptr || t->dtype() != DType::kInt64 || t->numel() != 1) return false;
    axes.push_back(t->data<int64_t>()[0]);
  } else if (mean.inputs().size() != 1 || !mean.GetAttr("axes", &axes).ok()) {
    return false;
  }
  const auto r = static_cast<int64_t>(rank);
  return axes.size() == 1 && (axes[0] == r - 1 || axes[0] == -1);
}

struct Chain {
  Value* x = nullptr;       // what the fused node reads: X (16-bit, widened exactly) or xf
  Value* weight = nullptr;  // W
  Value* inv = nullptr;     // r
  Value* y = nullptr;       // the chain's result
  float epsilon = 0;
  std::vector<Node*> nodes;  // every node the fused node replaces, from the last one back
};

// The chain whose statistic `mean` computes, or false.
bool Match(const Graph& graph, Node* mean, const KeptValues& kept, Chain* c) {
  if (!IsOnnx(mean, "ReduceMean") || mean->outputs().size() != 1) return false;
  Node* square = mean->input(0) != nullptr ? mean->input(0)->producer() : nullptr;
  if (square == nullptr || SoleReader(square->output(0), kept) != mean) return false;
  Value* xf = square->input(0);
  float exponent = 0;
  if (IsOnnx(square, "Mul")) {
    if (square->inputs().size() != 2 || square->input(1) != xf) return false;
  } else if (!IsOnnx(square, "Pow") || !ScalarConstant(square->input(1), 0, &exponent) || exponent != 2.f) {
    return false;
  }
  const ValueType& xt = xf->type();
  if (xt.dtype != DType::kFloat32 || !xt.shape || xt.shape->empty()) return false;
  const Dims& dims = *xt.shape;
  if (!ReducesLastAxis(graph, *mean, dims.size())) return false;

  Node* add = SoleReader(mean->output(0), kept);
  if (!IsOnnx(add, "Add")) return false;
  Value* eps = OtherInput(add, mean->output(0));
  if (!ScalarConstant(eps, dims.size(), &c->epsilon) || !(c->epsilon >= 0)) return false;
  Node* sqrt = SoleReader(add->output(0), kept);
  if (!IsOnnx(sqrt, "Sqrt")) return false;

  // n = xf * r with r = 1 / sqrt.
  Node* normalize = nullptr;
  Node* reciprocal = nullptr;
  const Value* s = sqrt->output(0);
  if (kept.Contains(s) && !s->is_graph_output()) return false;
  if (s->uses().size() != 1 || s->is_graph_output()) return false;
  Node* after = s->uses()[0].node;
  float one = 0;
  // (n = Div(xf, Sqrt(...)) is not taken: the fused kernel multiplies by the reciprocal, which
  // rounds differently.)
  if (IsOnnx(after, "Reciprocal") || (IsOnnx(after, "Div") && after->input(1) == s &&
                                      ScalarConstant(after->input(0), dims.size(), &one) && one == 1.f)) {
    reciprocal = after;
    c->inv = after->output(0);
    // r may have readers outside the chain (the backward's saved value): the fused node's InvStdDev
    // output takes them over. A value kept by name (not a graph output) keeps its producer.
    if (kept.ContainsName(c->inv->name()) && !c->inv->is_graph_output()) return false;
    for (const Use& u : c->inv->uses()) {
      if (!IsOnnx(u.node, "Mul") || OtherInput(u.node, c->inv) != xf) continue;
      if (normalize != nullptr) return false;  // two products of xf and r: not one chain
      normalize = u.node;
    }
    if (normalize == nullptr) return false;
  } else {
    return false;
  }

  // Y = Mul(Cast(n)?, W).
  Value* n = normalize->output(0);
  Node* next = SoleReader(n, kept);
  Node* cast = nullptr;
  if (IsOnnx(next, "Cast")) {
    cast = next;
    const DType to = cast->output(0)->type().dtype;
    if (to != DType::kFloat16 && to != DType::kBFloat16) return false;
    next = SoleReader(cast->output(0), kept);
  }
  if (!IsOnnx(next, "Mul")) return false;
  Value* before_weight = cast != nullptr ? cast->output(0) : n;
  c->weight = OtherInput(next, before_weight);
  c->y = next->output(0);
  if (c->weight == nullptr || (kept.ContainsName(c->y->name()) && !c->y->is_graph_output())) return false;
  // Dim's == holds for equal sizes or the same symbol, never for unknown dims.
  const ValueType& wt = c->weight->type();
  if (!wt.shape || wt.shape->size() != 1 || (*wt.shape)[0] != dims.back()) return false;
  if (wt.dtype != before_weight->type().dtype || c->y->type().dtype != wt.dtype) return false;

  // X itself when xf widens a 16-bit X exactly (the Cast may have other readers: it stays for them).
  c->x = xf;
  if (Node* widen = xf->producer(); IsOnnx(widen, "Cast") && widen->input(0) != nullptr) {
    const DType from = widen->input(0)->type().dtype;
    if (from == DType::kFloat16 || from == DType::kBFloat16) c->x = widen->input(0);
  }
  c->nodes = {next};
  if (cast != nullptr) c->nodes.push_back(cast);
  c->nodes.push_back(normalize);
  if (reciprocal != nullptr) c->nodes.push_back(reciprocal);
  for (Node* node : {sqrt, add, mean, square}) c->nodes.push_back(node);
  for (const Node* node : c->nodes)
    if (node->recompute() != mean->recompute()) return false;
  return true;
}

class RmsNormFusion final : public GraphPass {
 public:
  const char* name() const override { return "RmsNormFusion"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    if (!ctx.elementwise_fusion) return Status::OK();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int fused = 0, with_inv = 0;
    std::vector<Node*> removed;
    for (Node* mean : order) {
      if (std::find(removed.begin(), removed.end(), mean) != removed.end()) continue;
      Chain chain;
      if (!Match(graph, mean, kept, &chain)) continue;
      TOB_ASSIGN_OR_RETURN(bool inv_out, Fuse(graph, chain));
      removed.insert(removed.end(), chain.nodes.begin(), chain.nodes.end());
      ++fused;
      with_inv += inv_out;
    }
    if (fused == 0) return Status::OK();
    *changed = true;
    summary_ =
        StrCat("fused ", fused, " RMSNorm chains into RMSNormalization (", with_inv, " with their saved inverse RMS)");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  // Returns whether the fused node has the InvStdDev output.
  static StatusOr<bool> Fuse(Graph& graph, const Chain& c) {
    // r's readers other than the chain's product.
    bool inv_read = false;
    if (c.inv != nullptr) {
      inv_read = c.inv->is_graph_output();
      for (const Use& u : c.inv->uses()) inv_read |= std::find(c.nodes.begin(), c.nodes.end(), u.node) == c.nodes.end();
    }
    Graph* root = &graph;
    while (root->parent() != nullptr) root = root->parent();
    std::vector<std::string> outputs{graph.UniqueName(c.y->name() + "_rms_norm")};
    if (inv_read) outputs.push_back(graph.UniqueName(c.inv->name() + "_inv_rms"));
    AttributeMap attrs{{"axis", Attribute::Int(-1)}, {"epsilon", Attribute::Float(c.epsilon)}};
    Node* mean = c.nodes[c.nodes.size() - 2];
    TOB_ASSIGN_OR_RETURN(Node * fused,
                         graph.AddNode("RMSNormalization", kTobDomain, {c.x->name(), c.weight->name()}, outputs,
                                       std::move(attrs), graph.UniqueName(mean->name() + "_RMSNormalization")));
    if (root->Opset(kTobDomain) < 1) root->SetOpset(kTobDomain, 1);
    graph.PlaceLike(fused, mean);
    fused->output(0)->set_type(c.y->type());
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(c.y, fused->output(0)));
    if (inv_read) {
      // r's outside readers (the backward's saved value) read InvStdDev; the chain's own product of
      // xf and r goes with the chain below.
      fused->output(1)->set_type(c.inv->type());
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(c.inv, fused->output(1)));
    }
    for (Node* node : c.nodes) TOB_RETURN_IF_ERROR(graph.RemoveNode(node));
    return inv_read;
  }

  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateRmsNormFusionPass() { return std::make_unique<RmsNormFusion>(); }

}  // namespace tob
