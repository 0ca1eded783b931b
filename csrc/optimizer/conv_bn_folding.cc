// Conv + BatchNormalization folding: an inference-mode BatchNormalization whose input is the
// only use of a Conv output, with every parameter constant, becomes part of the Conv:
//   s = scale / sqrt(var + eps);  W'[o] = W[o] * s[o];  b'[o] = (b[o] - mean[o]) * s[o] + beta[o]
// One GEMM-shaped op instead of a GEMM plus a full pass over the activations.
#include <cmath>

#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

const Tensor* Constant(const Node& node, size_t i) {
  const Value* v = node.input(i);
  return v == nullptr ? nullptr : v->initializer();
}

// The BatchNormalization that can be folded into `conv`, or nullptr.
Node* FoldableBatchNorm(const Node& conv, const KeptValues& kept) {
  if (conv.op_type() != "Conv" || !conv.domain().empty() || conv.outputs().size() != 1) return nullptr;
  const Value* y = conv.output(0);
  if (y->uses().size() != 1 || kept.Contains(y)) return nullptr;
  Node* bn = y->uses()[0].node;
  if (bn->op_type() != "BatchNormalization" || !bn->domain().empty() || y->uses()[0].input_index != 0) return nullptr;
  int64_t training = 0;
  if (!bn->GetAttr("training_mode", &training, 0).ok() || training != 0) return nullptr;
  for (size_t i = 1; i < bn->outputs().size(); ++i)  // running statistics must be unused
    if (!bn->output(i)->uses().empty() || bn->output(i)->is_graph_output()) return nullptr;
  const Tensor* w = Constant(conv, 1);
  if (w == nullptr || w->dtype() != DType::kFloat32 || w->rank() < 3) return nullptr;
  if (conv.input(2) != nullptr && Constant(conv, 2) == nullptr) return nullptr;
  const int64_t out_channels = w->dim(0);
  for (size_t i = 1; i <= 4; ++i) {
    const Tensor* p = Constant(*bn, i);
    if (p == nullptr || p->dtype() != DType::kFloat32 || p->numel() != out_channels) return nullptr;
  }
  return bn;
}

class ConvBatchNormFolding final : public GraphPass {
 public:
  const char* name() const override { return "ConvBatchNormFolding"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int folded = 0;
    for (Node* conv : order) {
      Node* bn = FoldableBatchNorm(*conv, kept);
      if (bn == nullptr) continue;
      TOB_RETURN_IF_ERROR(Fold(graph, conv, bn));
      ++folded;
    }
    if (folded == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("folded ", folded, " BatchNormalization node", folded == 1 ? "" : "s", " into Conv");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  static Status Fold(Graph& graph, Node* conv, Node* bn) {
    float eps = 1e-5f;
    TOB_RETURN_IF_ERROR(bn->GetAttr("epsilon", &eps, 1e-5f));
    const Tensor& w = *Constant(*conv, 1);
    const Tensor* b = Constant(*conv, 2);
    const float* scale = Constant(*bn, 1)->data<float>();
    const float* beta = Constant(*bn, 2)->data<float>();
    const float* mean = Constant(*bn, 3)->data<float>();
    const float* var = Constant(*bn, 4)->data<float>();
    const int64_t oc = w.dim(0), per_channel = w.numel() / oc;

    TOB_ASSIGN_OR_RETURN(Tensor new_w, Tensor::Allocate(DType::kFloat32, w.shape(), CpuAllocator::Default()));
    TOB_ASSIGN_OR_RETURN(Tensor new_b, Tensor::Allocate(DType::kFloat32, {oc}, CpuAllocator::Default()));
    for (int64_t o = 0; o < oc; ++o) {
      // double for the per-channel factor: the folded weights must match Conv-then-BN closely.
      const double s = static_cast<double>(scale[o]) / std::sqrt(static_cast<double>(var[o]) + eps);
      const float* src = w.data<float>() + o * per_channel;
      float* dst = new_w.data<float>() + o * per_channel;
      for (int64_t k = 0; k < per_channel; ++k) dst[k] = static_cast<float>(src[k] * s);
      const double bias = b ? b->data<float>()[o] : 0.0;
      new_b.data<float>()[o] = static_cast<float>((bias - mean[o]) * s + beta[o]);
    }
    const std::string base = conv->name();
    TOB_ASSIGN_OR_RETURN(Value * w_value, graph.AddInitializer(graph.UniqueName(base + "_W_bn"), new_w));
    TOB_ASSIGN_OR_RETURN(Value * b_value, graph.AddInitializer(graph.UniqueName(base + "_B_bn"), new_b));
    Value* bn_out = bn->output(0);
    TOB_ASSIGN_OR_RETURN(Node * fused,
                         graph.AddNode("Conv", "", {conv->input(0)->name(), w_value->name(), b_value->name()},
                                       {graph.UniqueName(bn_out->name() + "_conv_bn")}, conv->attributes(),
                                       graph.UniqueName(base + "_bn")));
    fused->output(0)->set_type(bn_out->type());
    graph.PlaceLike(fused, conv);
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(bn_out, fused->output(0)));
    TOB_RETURN_IF_ERROR(graph.RemoveNode(bn));
    return graph.RemoveNode(conv);
  }

  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateConvBatchNormFoldingPass() { return std::make_unique<ConvBatchNormFolding>(); }

}  // namespace tob
