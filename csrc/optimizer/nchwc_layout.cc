// NCHWc layout: convolutions with constant float32 weights run on activations blocked by 16
// channels ([N, ceil(C / 16), H, W, 16], spare lanes zero), as onnxruntime's NCHWc transformer
// does. Each Conv, or com.microsoft FusedConv whose activation is Relu or none (ConvActivationFusion
// ran first, so the residual Add + Relu of a ResNet block is its Z and activation), of group 1 and
// static shapes becomes an ai.tob NchwcConv (at least kMinChannels input channels) or, with fewer
// input channels, at least kMinChannels outputs and no Z (a network's stem on its RGB image), an
// ai.tob NchwcConvNchwInput that reads the NCHW image as it is and writes blocked output; a
// MaxPool (no Indices) reading a converted node's output becomes an ai.tob NchwcMaxPool:
//   X -> [ReorderToNchwc, once per value] -> NchwcConv(W, B, Z blocked) -> Yb
//   X -> NchwcConvNchwInput(W, B) -> Yb;   Yb -> NchwcMaxPool -> Pb
//   Yb -> ReorderFromNchwc -> Y, for the readers of Y that are no converted node (a pool it cannot
//   take, a graph output, a conv left alone)
// so that a chain of convs and pools keeps its activations blocked, and reorders stand only where
// a value enters or leaves the chain. A node reading a converted node's output (as X or as Z) reads
// the blocked value directly; a ReorderFromNchwc nobody reads is removed. Only where the CPU runs
// the blocked tile on AVX-512 (providers/cpu/nn/conv_nchwc.h) and the session is CPU-only
// (PassContext::elementwise_fusion); level kAll unless TOB_NCHWC=0. TOB_NCHWC=convs converts only
// the convs of at least kMinChannels input channels (the stem and pools stay NCHW, as before the
// stem ops: A/B runs).
#include <string>
#include <unordered_map>
#include <vector>

#include "core/domain.h"
#include "core/env_switch.h"
#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"
#include "providers/cpu/nn/conv_nchwc.h"
#include "providers/cpu/nn/pool_nchwc.h"
#include "providers/cpu/nn/window_geometry.h"

namespace tob {

namespace {

// Convs with fewer input channels (a network's stem, 3 channels) read their NCHW input as it is
// (NchwcConvNchwInput): padding them to a block of 16 would multiply their work.
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

enum class ConvKind { kNone, kBlocked, kNchwInput };

// Whether `conv` can run as an NchwcConv (kBlocked) or an NchwcConvNchwInput (kNchwInput: fewer
// than kMinChannels input channels, at least kMinChannels output channels, no Z); *relu says
// whether its activation is Relu.
ConvKind Convertible(const Node& conv, const KeptValues& kept, bool* relu) {
  const bool plain = conv.op_type() == "Conv" && conv.domain().empty();
  const bool fused = conv.op_type() == "FusedConv" && conv.domain() == kMicrosoftDomain;
  if ((!plain && !fused) || conv.outputs().size() != 1 || conv.inputs().size() < 2) return ConvKind::kNone;
  const Value* y = conv.output(0);
  // A value kept by name (not a graph output, whose external name survives) stays as is.
  if (kept.ContainsName(y->name()) && !y->is_graph_output()) return ConvKind::kNone;
  if (!StaticFloat32(conv.input(0), 4) || !StaticFloat32(y, 4)) return ConvKind::kNone;
  if (!ConstantFloat32(conv.input(1), 4)) return ConvKind::kNone;
  if (conv.inputs().size() > 2 && conv.input(2) != nullptr && !ConstantFloat32(conv.input(2), 1))
    return ConvKind::kNone;
  const bool has_z = conv.inputs().size() > 3 && conv.input(3) != nullptr;
  if (has_z) {
    const Value* z = conv.input(3);
    if (!StaticFloat32(z, 4) || z->type().shape != y->type().shape) return ConvKind::kNone;
  }
  int64_t group = 1;
  if (!conv.GetAttr("group", &group, int64_t{1}).ok() || group != 1) return ConvKind::kNone;
  std::string activation;
  if (!conv.GetAttr("activation", &activation, std::string()).ok()) return ConvKind::kNone;
  if (!activation.empty() && activation != "Relu") return ConvKind::kNone;
  *relu = activation == "Relu";
  const Tensor& w = *conv.input(1)->initializer();
  const Dims& x = *conv.input(0)->type().shape;
  if (w.dim(1) != x[1].value) return ConvKind::kNone;
  if (x[1].value >= kMinChannels) return ConvKind::kBlocked;
  // A stem whose output fills less than a block feeds convs that stay NCHW (fewer than
  // kMinChannels inputs): blocking it would only add a reorder back.
  if (has_z || w.dim(0) < kMinChannels) return ConvKind::kNone;
  return ConvKind::kNchwInput;
}

// Whether `pool` is a 2-D MaxPool without Indices whose every window touches its input (a window
// wholly in the padding would have no maximum for the spare lanes), on a static float32 value.
bool PoolConvertible(const Node& pool, const KeptValues& kept) {
  if (pool.op_type() != "MaxPool" || !pool.domain().empty() || pool.inputs().size() != 1) return false;
  if (pool.outputs().empty() || pool.outputs().size() > 2) return false;
  if (pool.outputs().size() == 2 && pool.output(1) != nullptr) return false;
  const Value* y = pool.output(0);
  if (kept.ContainsName(y->name()) && !y->is_graph_output()) return false;
  if (!StaticFloat32(pool.input(0), 4) || !StaticFloat32(y, 4)) return false;
  auto attrs = WindowAttributes::Read(pool);
  if (!attrs.ok() || attrs.value().kernel_shape.size() != 2) return false;
  Shape x;
  for (const Dim& d : *pool.input(0)->type().shape) x.push_back(d.value);
  auto g = WindowGeometry::Compute(pool, attrs.value(), x, {}, false);
  if (!g.ok()) return false;
  const WindowGeometry& w = g.value();
  return conv_nchwc::WindowsAllTouchInput({w.in[0], w.in[1], w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.strides[0],
                                           w.strides[1], w.dilations[0], w.dilations[1], w.pad_begin[0],
                                           w.pad_begin[1]});
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
    const bool convs_only = EnvSwitchValue(EnvSwitch::kNchwc) == "convs";
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    // An NCHW value -> its blocked twin (a ReorderToNchwc's output, or a converted conv's Yb for
    // the ReorderFromNchwc output that stands in for the conv's Y).
    std::unordered_map<const Value*, Value*> blocked;
    std::vector<Node*> from_reorders;
    int converted = 0, stems = 0, pools = 0, to_reorders = 0;
    // Replaces `node` by `op` (blocked output, `inputs`, `attrs`), with a ReorderFromNchwc of its
    // output standing in for node's output Y; readers that convert later read the blocked value.
    auto replace = [&](Node* node, const std::string& op, const std::vector<std::string>& inputs,
                       AttributeMap attrs) -> Status {
      Value* y = node->output(0);
      TOB_ASSIGN_OR_RETURN(Node * nchwc, graph.AddNode(op, kTobDomain, inputs, {graph.UniqueName(y->name() + "_nchwc")},
                                                       std::move(attrs), graph.UniqueName(node->name() + "_nchwc")));
      nchwc->output(0)->set_type(BlockedType(y->type()));
      graph.PlaceLike(nchwc, node);
      AttributeMap reorder_attrs;
      reorder_attrs["channels"] = Attribute::Int((*y->type().shape)[1].value);
      TOB_ASSIGN_OR_RETURN(Node * back, graph.AddNode("ReorderFromNchwc", kTobDomain, {nchwc->output(0)->name()},
                                                      {graph.UniqueName(y->name() + "_nchw")}, std::move(reorder_attrs),
                                                      graph.UniqueName(node->name() + "_from_nchwc")));
      back->output(0)->set_type(y->type());
      graph.PlaceLike(back, node);
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(y, back->output(0)));
      TOB_RETURN_IF_ERROR(graph.RemoveNode(node));
      blocked[back->output(0)] = nchwc->output(0);
      from_reorders.push_back(back);
      return Status::OK();
    };
    for (Node* node : order) {
      if (!convs_only && PoolConvertible(*node, kept)) {
        auto it = blocked.find(node->input(0));
        if (it == blocked.end()) continue;  // an NCHW input: a reorder in would cost more than it saves
        AttributeMap attrs = node->attributes();
        attrs.erase("storage_order");
        TOB_RETURN_IF_ERROR(replace(node, "NchwcMaxPool", {it->second->name()}, std::move(attrs)));
        ++pools;
        continue;
      }
      bool relu = false;
      ConvKind kind = Convertible(*node, kept, &relu);
      if (kind == ConvKind::kNone || (convs_only && kind == ConvKind::kNchwInput)) continue;
      // A few channels already blocked (a converted node's output) stay blocked: a partial block
      // costs less than the reorder out.
      if (kind == ConvKind::kNchwInput && blocked.count(node->input(0)) > 0) kind = ConvKind::kBlocked;
      Node* conv = node;
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
      const std::string bias =
          conv->inputs().size() > 2 && conv->input(2) != nullptr ? conv->input(2)->name() : std::string();
      AttributeMap attrs = conv->attributes();
      attrs.erase("activation");
      attrs.erase("activation_params");
      if (relu) attrs["activation"] = Attribute::String("Relu");
      if (kind == ConvKind::kNchwInput) {
        TOB_RETURN_IF_ERROR(replace(conv, "NchwcConvNchwInput", {conv->input(0)->name(), conv->input(1)->name(), bias},
                                    std::move(attrs)));
        ++stems;
        continue;
      }
      TOB_ASSIGN_OR_RETURN(Value * xb, blocked_of(conv->input(0)));
      std::vector<std::string> inputs{xb->name(), conv->input(1)->name(), bias};
      if (conv->inputs().size() > 3 && conv->input(3) != nullptr) {
        TOB_ASSIGN_OR_RETURN(Value * zb, blocked_of(conv->input(3)));
        inputs.push_back(zb->name());
      }
      TOB_RETURN_IF_ERROR(replace(conv, "NchwcConv", inputs, std::move(attrs)));
      ++converted;
    }
    if (converted + stems + pools == 0) return Status::OK();
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
    summary_ = StrCat("converted ", converted, " Conv node", converted == 1 ? "" : "s", " to NchwcConv, ", stems,
                      " to NchwcConvNchwInput and ", pools, " MaxPool to NchwcMaxPool with ", to_reorders,
                      " ReorderToNchwc and ", kept_reorders, " ReorderFromNchwc");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateNchwcLayoutPass() { return std::make_unique<NchwcLayout>(); }

}  // namespace tob
