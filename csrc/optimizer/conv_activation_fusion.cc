// Conv + activation fusion: a Conv whose output is read only by an activation (Relu, Tanh,
// Sigmoid, LeakyRelu, HardSigmoid, Clip with constant bounds, Gelu, FastGelu, or SiLU written as
// Mul(y, Sigmoid(y))) becomes one com.microsoft FusedConv, optionally with the residual Add/Sum
// of a same-shaped value (Z) that sits between the Conv and the activation:
//   Relu(Conv(X, W, B) + Z)  ->  FusedConv(X, W, B, Z, activation = "Relu")
// The kernel applies bias, Z and the activation to each output block right after its GEMM
// (providers/cpu/nn/conv_epilogue.h), which saves one or two full passes over the activations.
// It fires only where the Conv output (and the sum) has no other reader and is not kept, so
// nothing a backward or a user reads disappears.
#include <cfloat>
#include <string>
#include <vector>

#include "core/domain.h"
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

// The only reader of `v`, or nullptr when it has none, several, or must stay visible.
Node* SoleReader(const Value* v, const KeptValues& kept) {
  if (v == nullptr || kept.Contains(v) || v->uses().size() != 1) return nullptr;
  return v->uses()[0].node;
}

// A constant scalar float input, or `dflt` when the input is omitted; false when not constant.
bool ConstantScalar(const Node& node, size_t i, float dflt, float* out) {
  const Value* v = node.input(i);
  if (v == nullptr) {
    *out = dflt;
    return true;
  }
  const Tensor* t = v->initializer();
  if (t == nullptr || t->numel() != 1) return false;
  switch (t->dtype()) {
    case DType::kFloat32: *out = t->data<float>()[0]; return true;
    case DType::kFloat64: *out = static_cast<float>(t->data<double>()[0]); return true;
    default: return false;
  }
}

struct Activation {
  std::string name;  // FusedConv's `activation`
  std::vector<float> params;
  Node* last = nullptr;   // the node whose output the fused node takes over
  Node* extra = nullptr;  // SiLU's Sigmoid, removed with the Mul
};

// Reads `node` as an activation of `input` (its only data input); false when it is none.
bool ReadActivation(Node* node, const Value* input, const KeptValues& kept, Activation* act) {
  const std::string& op = node->op_type();
  const bool onnx = node->domain().empty(), ms = node->domain() == kMicrosoftDomain;
  if (node->outputs().size() != 1 || node->input(0) != input) return false;
  act->last = node;
  act->params.clear();
  if (onnx && (op == "Relu" || op == "Tanh" || op == "Sigmoid")) {
    if (op == "Sigmoid") {
      // SiLU: Mul(y, Sigmoid(y)) with the Sigmoid read only by that Mul.
      Node* mul = SoleReader(node->output(0), kept);
      if (mul != nullptr && mul->op_type() == "Mul" && mul->domain().empty() && mul->inputs().size() == 2) {
        const Value* other = mul->input(mul->input(0) == node->output(0) ? 1 : 0);
        if (other == input && input->uses().size() == 2) {
          act->name = "Silu";
          act->last = mul;
          act->extra = node;
          return true;
        }
      }
    }
    act->name = op;
    return node->inputs().size() == 1 && input->uses().size() == 1;
  }
  if (input->uses().size() != 1) return false;
  if (onnx && op == "LeakyRelu") {
    float alpha = 0.01f;
    if (!node->GetAttr("alpha", &alpha, 0.01f).ok()) return false;
    act->name = op;
    act->params = {alpha};
    return true;
  }
  if (onnx && op == "HardSigmoid") {
    float alpha = 0.2f, beta = 0.5f;
    if (!node->GetAttr("alpha", &alpha, 0.2f).ok() || !node->GetAttr("beta", &beta, 0.5f).ok()) return false;
    act->name = op;
    act->params = {alpha, beta};
    return true;
  }
  if (onnx && op == "Clip") {
    float lo = -FLT_MAX, hi = FLT_MAX;
    if (node->FindAttribute("min") != nullptr || node->FindAttribute("max") != nullptr) {  // opset < 11
      if (!node->GetAttr("min", &lo, -FLT_MAX).ok() || !node->GetAttr("max", &hi, FLT_MAX).ok()) return false;
    } else if (!ConstantScalar(*node, 1, -FLT_MAX, &lo) || !ConstantScalar(*node, 2, FLT_MAX, &hi)) {
      return false;
    }
    act->name = op;
    act->params = {lo, hi};
    return true;
  }
  if ((onnx || ms) && op == "Gelu" && node->inputs().size() == 1) {
    std::string approximate = "none";
    if (onnx && !node->GetAttr("approximate", &approximate, std::string("none")).ok()) return false;
    act->name = approximate == "tanh" ? "FastGelu" : "Gelu";
    return approximate == "tanh" || approximate == "none";
  }
  if (ms && op == "FastGelu" && (node->inputs().size() == 1 || node->input(1) == nullptr)) {
    act->name = "FastGelu";
    return true;
  }
  return false;
}

// An Add or two-input Sum of the Conv output `y` and another value of exactly y's static shape
// and dtype (no broadcast); that other value, or nullptr.
Value* ResidualOperand(const Node& add, const Value* y) {
  if (!add.domain().empty() || (add.op_type() != "Add" && add.op_type() != "Sum")) return nullptr;
  if (add.inputs().size() != 2 || add.outputs().size() != 1) return nullptr;
  Value* z = add.input(add.input(0) == y ? 1 : 0);
  if (z == nullptr || z == y || (add.input(0) != y && add.input(1) != y)) return nullptr;
  const ValueType &zt = z->type(), &yt = y->type();
  if (zt.dtype != yt.dtype || !zt.shape || !yt.shape || !ConcreteShape(*zt.shape) || *zt.shape != *yt.shape)
    return nullptr;
  return z;
}

class ConvActivationFusion final : public GraphPass {
 public:
  const char* name() const override { return "ConvActivationFusion"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int fused = 0, with_sum = 0;
    for (Node* conv : order) {
      if (conv->op_type() != "Conv" || !conv->domain().empty() || conv->outputs().size() != 1) continue;
      Value* y = conv->output(0);
      if (kept.Contains(y) || y->uses().empty()) continue;
      Node* reader = y->uses()[0].node;
      Value* z = nullptr;
      Node* add = nullptr;
      Activation act;
      if (y->uses().size() == 1 && (z = ResidualOperand(*reader, y)) != nullptr) {
        add = reader;
        Node* next = SoleReader(add->output(0), kept);
        if (next == nullptr || !ReadActivation(next, add->output(0), kept, &act)) continue;
      } else if (!ReadActivation(reader, y, kept, &act)) {
        continue;
      }
      // A value kept by name (not a graph output, whose external name survives) stays as is.
      const Value* out = act.last->output(0);
      if (kept.ContainsName(out->name()) && !out->is_graph_output()) continue;
      TOB_RETURN_IF_ERROR(Fuse(graph, conv, add, z, act));
      ++fused;
      with_sum += add != nullptr;
    }
    if (fused == 0) return Status::OK();
    // FusedConv is a com.microsoft op: a model that imported only ai.onnx gets the domain, on the
    // main graph even when the Conv is inside a subgraph (opsets are the model's: Graph::Opset).
    Graph* root = &graph;
    while (root->parent() != nullptr) root = root->parent();
    if (root->Opset(kMicrosoftDomain) < 1) root->SetOpset(kMicrosoftDomain, 1);
    *changed = true;
    summary_ = StrCat("fused ", fused, " Conv + activation into FusedConv (", with_sum, " with a residual sum)");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  static Status Fuse(Graph& graph, Node* conv, Node* add, Value* z, const Activation& act) {
    std::vector<std::string> inputs{conv->input(0)->name(), conv->input(1)->name(),
                                    conv->input(2) != nullptr ? conv->input(2)->name() : std::string()};
    if (z != nullptr) inputs.push_back(z->name());
    AttributeMap attrs = conv->attributes();
    attrs["activation"] = Attribute::String(act.name);
    if (!act.params.empty()) attrs["activation_params"] = Attribute::Floats(act.params);
    Value* out = act.last->output(0);
    TOB_ASSIGN_OR_RETURN(Node * fused, graph.AddNode("FusedConv", kMicrosoftDomain, inputs,
                                                     {graph.UniqueName(out->name() + "_fused_conv")}, std::move(attrs),
                                                     graph.UniqueName(conv->name() + "_" + act.name)));
    fused->output(0)->set_type(out->type());
    graph.PlaceLike(fused, conv);
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(out, fused->output(0)));
    TOB_RETURN_IF_ERROR(graph.RemoveNode(act.last));
    if (act.extra != nullptr) TOB_RETURN_IF_ERROR(graph.RemoveNode(act.extra));
    if (add != nullptr) TOB_RETURN_IF_ERROR(graph.RemoveNode(add));
    return graph.RemoveNode(conv);
  }

  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateConvActivationFusionPass() { return std::make_unique<ConvActivationFusion>(); }

}  // namespace tob
