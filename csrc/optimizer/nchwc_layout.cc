// NCHWc layout: convolutions with constant float32 weights run on activations blocked by 16
// channels ([N, ceil(C / 16), H, W, 16], spare lanes zero), as onnxruntime's NCHWc transformer
// does. Each Conv, or com.microsoft FusedConv whose activation is Relu or none (ConvActivationFusion
// ran first, so the residual Add + Relu of a ResNet block is its Z and activation), of group 1,
// static shapes and at least kMinChannels input channels becomes an ai.tob NchwcConv:
//   X -> [ReorderToNchwc, once per value] -> NchwcConv(W, B, Z blocked) -> Yb
//   Yb -> ReorderFromNchwc -> Y, for the readers of Y that are no converted conv (a pool, a graph
//   output, a conv left alone)
// so that a chain of convs keeps its activations blocked, and reorders stand only where a value
// enters or leaves the chain. A conv reading a converted conv's output (as X or as Z) reads the
// blocked value directly; a ReorderFromNchwc nobody reads is removed. Only where the CPU runs the
// blocked tile on AVX-512 (providers/cpu/nn/conv_nchwc.h) and the session is CPU-only
// (PassContext::elementwise_fusion); level kAll unless TOB_NCHWC=0.
#include <string>
#include <unordered_map>
#include <vector>

#include "core/domain.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"
#include "providers/cpu/nn/conv_nchwc.h"

namespace tob {

namespace {

// Convs with fewer input channels (a network's stem, 3 channels) stay NCHW: padding them to a
// block of 16 would multiply their work.
constexpr int64_t kMinChannels = 16;

bool StaticFloat32(const Value* v, int64_t rank) {
  if (v == nullptr) return false;
  const ValueType& t = v->type();
  if (t.dtype != DType::kFloat32 || !t.has_rank() || t.rank() != rank) return false;
  for (const Dim& d : *t.shape)
    if (!d.is_known()) return false;
  return true;
}

bool ConstantFloat32(const Value* v, int64_t rank) {
  return v != nullptr && v->initializer() != nullptr && v->initializer()->dtype() == DType::kFloat32 &&
         v->initializer()->rank() == rank;
}

// Whether `conv` can run as an NchwcConv; *relu says whether its activation is Relu.
bool Convertible(const Node& conv, const KeptValues& kept, bool* relu) {
  const bool plain = conv.op_type() == "Conv" && conv.domain().empty();
  const bool fused = conv.op_type() == "FusedConv" && conv.domain() == kMicrosoftDomain;
  if ((!plain && !fused) || conv.outputs().size() != 1 || conv.inputs().size() < 2) return false;
  const Value* y = conv.output(0);
  // A value kept by name (not a graph output, whose external name survives) stays as is.
  if (kept.ContainsName(y->name()) && !y->is_graph_output()) return false;
  if (!StaticFloat32(conv.input(0), 4) || !StaticFloat32(y, 4)) return false;
  if (!ConstantFloat32(conv.input(1), 4)) return false;
  if (conv.inputs().size() > 2 && conv.input(2) != nullptr && !ConstantFloat32(conv.input(2), 1)) return false;
  if (conv.inputs().size() > 3 && conv.input(3) != nullptr) {
    const Value* z = conv.input(3);
    if (!StaticFloat32(z, 4) || z->type().shape != y->type().shape) return false;
  }
  int64_t group = 1;
  if (!conv.GetAttr("group", &group, int64_t{1}).ok() || group != 1) return false;
  std::string activation;
  if (!conv.GetAttr("activation", &activation, std::string()).ok()) return false;
  if (!activation.empty() && activation != "Relu") return false;
  *relu = activation == "Relu";
  const Tensor& w = *conv.input(1)->initializer();
  const Dims& x = *conv.input(0)->type().shape;
  return x[1].value >= kMinChannels && w.dim(1) == x[1].value;
}

ValueType BlockedType(const ValueType& nchw) {
  const Dims& d = *nchw.shape;
  return ValueType(DType::kFloat32,
                   Dims{d[0], Dim(conv_nchwc::Blocks(d[1].value)), d[2], d[3], Dim(conv_nchwc::kBlock)});
}

class NchwcLayout final : public GraphPass {
 public:
  const char* name() const override { return "NchwcLayout"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    if (!ctx.elementwise_fusion || !conv_nchwc::Avx512Available()) return Status::OK();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    // An NCHW value -> its blocked twin (a ReorderToNchwc's output, or a converted conv's Yb for
    // the ReorderFromNchwc output that stands in for the conv's Y).
    std::unordered_map<const Value*, Value*> blocked;
    std::vector<Node*> from_reorders;
    int converted = 0, to_reorders = 0;
    for (Node* conv : order) {
      bool relu = false;
      if (!Convertible(*conv, kept, &relu)) continue;
      auto blocked_of = [&](Value* v) -> StatusOr<Value*> {
        auto it = blocked.find(v);
        if (it != blocked.end()) return it->second;
        TOB_ASSIGN_OR_RETURN(Node * reorder, graph.AddNode("ReorderToNchwc", kTobDomain, {v->name()},
                                                           {graph.UniqueName(v->name() + "_nchwc")}, {},
                                                           graph.UniqueName(v->name() + "_to_nchwc")));
        reorder->output(0)->set_type(BlockedType(v->type()));
        graph.PlaceLike(reorder, conv);
        ++to_reorders;
        blocked[v] = reorder->output(0);
        return reorder->output(0);
      };
      TOB_ASSIGN_OR_RETURN(Value * xb, blocked_of(conv->input(0)));
      std::vector<std::string> inputs{
          xb->name(), conv->input(1)->name(),
          conv->inputs().size() > 2 && conv->input(2) != nullptr ? conv->input(2)->name() : std::string()};
      if (conv->inputs().size() > 3 && conv->input(3) != nullptr) {
        TOB_ASSIGN_OR_RETURN(Value * zb, blocked_of(conv->input(3)));
        inputs.push_back(zb->name());
      }
      AttributeMap attrs = conv->attributes();
      attrs.erase("activation");
      attrs.erase("activation_params");
      if (relu) attrs["activation"] = Attribute::String("Relu");
      Value* y = conv->output(0);
      TOB_ASSIGN_OR_RETURN(Node * nchwc,
                           graph.AddNode("NchwcConv", kTobDomain, inputs, {graph.UniqueName(y->name() + "_nchwc")},
                                         std::move(attrs), graph.UniqueName(conv->name() + "_nchwc")));
      nchwc->output(0)->set_type(BlockedType(y->type()));
      graph.PlaceLike(nchwc, conv);
      AttributeMap reorder_attrs;
      reorder_attrs["channels"] = Attribute::Int((*y->type().shape)[1].value);
      TOB_ASSIGN_OR_RETURN(Node * back, graph.AddNode("ReorderFromNchwc", kTobDomain, {nchwc->output(0)->name()},
                                                      {graph.UniqueName(y->name() + "_nchw")}, std::move(reorder_attrs),
                                                      graph.UniqueName(conv->name() + "_from_nchwc")));
      back->output(0)->set_type(y->type());
      graph.PlaceLike(back, conv);
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(y, back->output(0)));
      TOB_RETURN_IF_ERROR(graph.RemoveNode(conv));
      blocked[back->output(0)] = nchwc->output(0);
      from_reorders.push_back(back);
      ++converted;
    }
    if (converted == 0) return Status::OK();
    int kept_reorders = 0;
    for (Node* back : from_reorders) {
      const Value* out = back->output(0);
      if (out->uses().empty() && !out->is_graph_output()) {
        TOB_RETURN_IF_ERROR(graph.RemoveNode(back));
      } else {
        ++kept_reorders;
      }
    }
    Graph* root = &graph;
    while (root->parent() != nullptr) root = root->parent();
    if (root->Opset(kTobDomain) < 1) root->SetOpset(kTobDomain, 1);
    *changed = true;
    summary_ = StrCat("converted ", converted, " Conv node", converted == 1 ? "" : "s", " to NchwcConv with ",
                      to_reorders, " ReorderToNchwc and ", kept_reorders, " ReorderFromNchwc");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateNchwcLayoutPass() { return std::make_unique<NchwcLayout>(); }

}  // namespace tob
