// Cast propagation (onnxruntime-training's PropagateCastOps, written here as node-local rewrites):
// a mixed-precision graph computes its GEMMs in a low-precision float type L (float16 or bfloat16)
// and everything else in float32, with a Cast at each border. Ops that compute as well in L
// (data movement, Relu, and at level 2 Add, Gelu, LayerNormalization, ...) need not sit on the
// float32 side: moving the borders across them removes Cast pairs and halves those ops' memory
// traffic. Every strategy first reduces casts in ways that never change a value:
//   - a Cast to the type its input already has is removed;
//   - sibling Casts of one value to one type become one;
//   - Cast(L -> float32) followed by Cast(float32 -> L) is the identity and both go (the other
//     order, float32 -> L -> float32, rounds and is never removed).
// Strategies (CastPropagationOptions::Strategy, the reference's flag values):
//   kNone            the reductions only;
//   kInsertAndReduce every allowed op that computes in float32 gets Casts to L on its float32
//                    inputs and back to float32 on its outputs, then the reductions merge them;
//   kFloodFill       an allowed op whose float32 inputs all come from Cast(L -> float32) moves to
//                    L (the Cast moves below it), and one whose float32 outputs are all read by
//                    Cast(float32 -> L) moves to L (the Cast moves above it); repeated, the L
//                    regions grow across allowed ops. At level 2 one such input or reader is
//                    enough: the other inputs are rounded to L and the other readers get a Cast.
// Level (the reference's): -1 the pass is off; 0 only the `allow` ops; 1 adds ops whose result
// in L equals the float32 result rounded to L (Transpose, Reshape, Expand, Split, Squeeze,
// Unsqueeze, Relu) and Tanh (within one rounding of L); 2 adds ops that then compute in L
// (Add, Gelu, BiasGelu, FastGelu, Dropout, Gather, LayerNormalization, Where). An op moves only
// when a registered kernel runs it in L, so the graph stays runnable; graph outputs and kept
// values keep their types.
#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

using Strategy = CastPropagationOptions::Strategy;

const std::unordered_set<std::string>& Level1Ops() {
  static const auto* ops = new std::unordered_set<std::string>{"Expand", "Transpose", "Relu",    "Reshape",
                                                               "Split",  "Tanh",      "Squeeze", "Unsqueeze"};
  return *ops;
}

const std::unordered_set<std::string>& Level2Ops() {
  static const auto* ops = new std::unordered_set<std::string>{
      "Add", "BiasGelu", "Dropout", "FastGelu", "Gather", "Gelu", "LayerNormalization", "Where"};
  return *ops;
}

// Whether input i decides the precision the op computes in; the others (indices, shapes, ratios)
// keep their types. Ops not listed: every input.
bool IsRelevantInput(const Node& n, int i) {
  const std::string& op = n.op_type();
  if (op == "LayerNormalization") return i <= 2;
  if (op == "Gather" || op == "Reshape" || op == "Dropout" || op == "Expand" || op == "Squeeze" || op == "Unsqueeze")
    return i == 0;
  return true;
}

// Likewise for outputs: Dropout's mask and LayerNormalization's statistics keep their types.
bool IsRelevantOutput(const Node& n, int o) {
  const std::string& op = n.op_type();
  if (op == "LayerNormalization" || op == "Gather" || op == "Reshape" || op == "Dropout" || op == "Expand" ||
      op == "Squeeze" || op == "Unsqueeze")
    return o == 0;
  return true;
}

bool Has(Strategy strategy, Strategy flag) { return (static_cast<int>(strategy) & static_cast<int>(flag)) != 0; }

class CastRewriter {
 public:
  CastRewriter(Graph& graph, PassContext& ctx, const CastPropagationOptions& options)
      : graph_(graph), ctx_(ctx), kept_(ctx), options_(options), low_(options.low_precision) {
    for (const KernelDef& d : ctx.kernels->defs()) providers_.insert(d.provider);
  }

  int inserted() const { return inserted_; }
  int removed() const { return removed_count_; }
  int converted() const { return converted_; }

  // kInsertAndReduce: every allowed float32 op computes in L between Casts.
  Status InsertAroundAllowedOps() {
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph_.TopologicalOrder());
    for (Node* n : order)
      if (CanConvert(*n)) TOB_RETURN_IF_ERROR(ConvertNode(n));
    return Status::OK();
  }

  StatusOr<bool> RemoveRedundantCasts() {
    removed_.clear();
    bool changed = false;
    for (Node* n : graph_.nodes()) {
      if (removed_.count(n) || !IsFloatCast(*n)) continue;
      if (CastTarget(*n) == n->input(0)->type().dtype) {
        TOB_ASSIGN_OR_RETURN(bool bypassed, Bypass(n, n->input(0)));
        changed |= bypassed;
      }
    }
    return changed;
  }

  // Casts of one value to one type, none naming a graph output, become the first of them.
  StatusOr<bool> FuseSiblingCasts() {
    removed_.clear();
    bool changed = false;
    for (Value* v : graph_.inputs()) TOB_RETURN_IF_ERROR(FuseCastsOf(v, &changed));
    for (Value* v : graph_.initializers()) TOB_RETURN_IF_ERROR(FuseCastsOf(v, &changed));
    // Node outputs through their (live) producers: a fused Cast's output value is freed with it.
    for (Node* n : graph_.nodes()) {
      if (removed_.count(n)) continue;
      for (Value* out : n->outputs()) TOB_RETURN_IF_ERROR(FuseCastsOf(out, &changed));
    }
    return changed;
  }

  // Cast(L -> float32) read by Cast(float32 -> L): the reader is the identity of the L value.
  // A reader Cast(float32 -> float32) repeats its parent. The parent goes with its last reader.
  StatusOr<bool> RemoveBackToBackCasts() {
    removed_.clear();
    bool changed = false;
    for (Node* parent : graph_.nodes()) {
      if (removed_.count(parent) || !IsFloatCast(*parent) || CastTarget(*parent) != DType::kFloat32 ||
          parent->input(0)->type().dtype != low_)
        continue;
      Value* low_value = parent->input(0);
      Value* widened = parent->output(0);
      std::vector<Node*> readers;
      for (const Use& u : widened->uses()) readers.push_back(u.node);
      for (Node* child : readers) {
        if (removed_.count(child) || !IsFloatCast(*child)) continue;
        Value* same = CastTarget(*child) == low_ ? low_value : widened;
        TOB_ASSIGN_OR_RETURN(bool bypassed, Bypass(child, same));
        changed |= bypassed;
      }
      if (widened->uses().empty() && !widened->is_graph_output() && !kept_.ContainsName(widened->name())) {
        TOB_RETURN_IF_ERROR(Remove(parent));
        changed = true;
      }
    }
    return changed;
  }

  // kFloodFill: moves allowed ops next to Casts into L, one op at a time.
  StatusOr<bool> FloodFill() {
    removed_.clear();
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph_.TopologicalOrder());
    const bool aggressive = options_.level >= 2;
    bool changed = false;
    for (Node* n : order) {
      if (!CanConvert(*n)) continue;
      int widened_inputs = 0, other_inputs = 0, narrowing_readers = 0, other_readers = 0;
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        const Value* in = n->input(i);
        if (in == nullptr || !IsRelevantInput(*n, static_cast<int>(i)) || in->type().dtype != DType::kFloat32) continue;
        const Node* p = in->producer();
        const bool widened =
            p != nullptr && IsFloatCast(*p) && CastTarget(*p) == DType::kFloat32 && p->input(0)->type().dtype == low_;
        ++(widened ? widened_inputs : other_inputs);
      }
      for (size_t o = 0; o < n->outputs().size(); ++o) {
        const Value* out = n->output(o);
        if (!IsRelevantOutput(*n, static_cast<int>(o)) || out->type().dtype != DType::kFloat32) continue;
        if (out->is_graph_output()) ++other_readers;
        for (const Use& u : out->uses()) {
          const bool narrowing = IsFloatCast(*u.node) && CastTarget(*u.node) == low_;
          ++(narrowing ? narrowing_readers : other_readers);
        }
      }
      const bool down = widened_inputs > 0 && (aggressive || other_inputs == 0);
      const bool up = narrowing_readers > 0 && (aggressive || other_readers == 0);
      if (!down && !up) continue;
      TOB_RETURN_IF_ERROR(ConvertNode(n));
      changed = true;
    }
    return changed;
  }

 private:
  // A Cast between float32 and L (either direction, or to its own type).
  bool IsFloatCast(const Node& n) const {
    if (n.op_type() != "Cast" || !n.domain().empty() || n.input(0) == nullptr) return false;
    const DType in = n.input(0)->type().dtype;
    const DType to = CastTarget(n);
    return (in == DType::kFloat32 || in == low_) && (to == DType::kFloat32 || to == low_);
  }

  static DType CastTarget(const Node& n) {
    int64_t to = 0;
    if (!n.GetAttr("to", &to).ok()) return DType::kUndefined;
    return DTypeFromOnnx(static_cast<int32_t>(to));
  }

  bool IsAllowed(const Node& n) const {
    const std::string& op = n.op_type();
    if (std::find(options_.allow.begin(), options_.allow.end(), op) != options_.allow.end()) return true;
    return (options_.level >= 1 && Level1Ops().count(op)) || (options_.level >= 2 && Level2Ops().count(op));
  }

  // An allowed op with a relevant float32 input or output, whose L form some provider runs.
  bool CanConvert(const Node& n) const {
    if (n.op_type() == "Cast" || !IsAllowed(n) || HasSubgraph(n)) return false;
    bool any = false;
    std::vector<DType> input_types;
    for (size_t i = 0; i < n.inputs().size(); ++i) {
      const Value* in = n.input(i);
      DType t = in != nullptr ? in->type().dtype : DType::kUndefined;
      if (t == DType::kFloat32 && IsRelevantInput(n, static_cast<int>(i))) {
        t = low_;
        any = true;
      }
      input_types.push_back(t);
    }
    for (size_t o = 0; o < n.outputs().size(); ++o) {
      const Value* out = n.output(o);
      if (out->type().dtype != DType::kFloat32 || !IsRelevantOutput(n, static_cast<int>(o))) continue;
      if (kept_.ContainsName(out->name())) return false;  // its type must not change
      any = true;
    }
    if (!any) return false;
    const int opset = NodeOpset(graph_, n);
    for (const std::string& provider : providers_)
      if (ctx_.kernels->Find(provider, n.domain(), n.op_type(), opset, input_types) != nullptr) return true;
    return false;
  }

  StatusOr<Value*> AddCast(Value* v, DType to, const Node* place_like) {
    const std::string out = graph_.UniqueName(v->name() + (to == DType::kFloat32 ? "_float32" : "_low"));
    AttributeMap attrs;
    attrs["to"] = Attribute::Int(static_cast<int64_t>(to));
    TOB_ASSIGN_OR_RETURN(Node * cast,
                         graph_.AddNode("Cast", "", {v->name()}, {out}, std::move(attrs), graph_.UniqueName(out)));
    cast->output(0)->set_type(ValueType(to, v->type().shape));
    graph_.PlaceLike(cast, place_like);
    ++inserted_;
    return cast->output(0);
  }

  // The node computes in L: Casts to L on its relevant float32 inputs; its relevant float32
  // outputs become L, their readers (graph outputs included) read a Cast back to float32.
  Status ConvertNode(Node* n) {
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      Value* in = n->input(i);
      if (in == nullptr || in->type().dtype != DType::kFloat32 || !IsRelevantInput(*n, static_cast<int>(i))) continue;
      TOB_ASSIGN_OR_RETURN(Value * low, AddCast(in, low_, n));
      graph_.SetNodeInput(n, static_cast<int>(i), low);
    }
    for (size_t o = 0; o < n->outputs().size(); ++o) {
      Value* out = n->output(o);
      if (out->type().dtype != DType::kFloat32 || !IsRelevantOutput(*n, static_cast<int>(o))) continue;
      if (!out->uses().empty() || out->is_graph_output()) {
        TOB_ASSIGN_OR_RETURN(Value * widened, AddCast(out, DType::kFloat32, n));
        Node* cast = widened->producer();
        TOB_RETURN_IF_ERROR(graph_.ReplaceAllUses(out, widened));
        graph_.SetNodeInput(cast, 0, out);
      }
      out->set_type(ValueType(low_, out->type().shape));
    }
    ++converted_;
    return Status::OK();
  }

  Status FuseCastsOf(Value* v, bool* changed) {
    Node* first_to[2] = {nullptr, nullptr};  // [0]: to float32, [1]: to L
    std::vector<Node*> readers;
    for (const Use& u : v->uses()) readers.push_back(u.node);
    for (Node* c : readers) {
      if (removed_.count(c) || !IsFloatCast(*c) || c->output(0)->is_graph_output() ||
          kept_.ContainsName(c->output(0)->name()))
        continue;
      Node*& first = first_to[CastTarget(*c) == DType::kFloat32 ? 0 : 1];
      if (first == nullptr) {
        first = c;
        continue;
      }
      TOB_ASSIGN_OR_RETURN(bool bypassed, Bypass(c, first->output(0)));
      *changed |= bypassed;
    }
    return Status::OK();
  }

  // Readers of the cast's output read `replacement` (same dtype) instead, and the cast goes.
  StatusOr<bool> Bypass(Node* cast, Value* replacement) {
    Value* out = cast->output(0);
    if (kept_.ContainsName(out->name())) return false;
    // As IdentityElimination: a graph output re-pointed at a graph input, a constant or another
    // graph output would hand one buffer out under two names.
    if (out->is_graph_output() && (replacement->producer() == nullptr || replacement->is_graph_output())) return false;
    TOB_RETURN_IF_ERROR(graph_.ReplaceAllUses(out, replacement));
    TOB_RETURN_IF_ERROR(Remove(cast));
    return true;
  }

  Status Remove(Node* n) {
    TOB_RETURN_IF_ERROR(graph_.RemoveNode(n));
    removed_.insert(n);  // the pointer is only compared from now on
    ++removed_count_;
    return Status::OK();
  }

  Graph& graph_;
  PassContext& ctx_;
  KeptValues kept_;
  const CastPropagationOptions& options_;
  const DType low_;
  std::unordered_set<std::string> providers_;
  // Nodes removed during the current sweep (which walks a snapshot of the nodes); cleared before
  // each sweep, as a later allocation may reuse a removed node's address.
  std::unordered_set<const Node*> removed_;
  int inserted_ = 0, removed_count_ = 0, converted_ = 0;
};

class PropagateCastOps final : public GraphPass {
 public:
  explicit PropagateCastOps(CastPropagationOptions options) : options_(std::move(options)) {}

  const char* name() const override { return "PropagateCastOps"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    if (!options_.enabled()) return Status::OK();
    if (options_.low_precision != DType::kFloat16 && options_.low_precision != DType::kBFloat16)
      return InvalidArgument("PropagateCastOps: the low-precision type must be float16 or bfloat16, got ",
                             DTypeName(options_.low_precision));
    CastRewriter rewriter(graph, ctx, options_);
    if (Has(options_.strategy, Strategy::kInsertAndReduce)) TOB_RETURN_IF_ERROR(rewriter.InsertAroundAllowedOps());
    // Each round removes casts or moves one op per candidate into L for good: it ends.
    for (bool progress = true; progress;) {
      TOB_ASSIGN_OR_RETURN(bool redundant, rewriter.RemoveRedundantCasts());
      TOB_ASSIGN_OR_RETURN(bool siblings, rewriter.FuseSiblingCasts());
      TOB_ASSIGN_OR_RETURN(bool pairs, rewriter.RemoveBackToBackCasts());
      bool flooded = false;
      if (Has(options_.strategy, Strategy::kFloodFill)) {
        TOB_ASSIGN_OR_RETURN(flooded, rewriter.FloodFill());
      }
      progress = redundant || siblings || pairs || flooded;
    }
    if (rewriter.inserted() + rewriter.removed() + rewriter.converted() == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat(rewriter.converted(), " op(s) moved to ", DTypeName(options_.low_precision), ", ",
                      rewriter.inserted(), " Cast(s) inserted, ", rewriter.removed(), " Cast(s) removed");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  CastPropagationOptions options_;
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreatePropagateCastOpsPass(CastPropagationOptions options) {
  return std::make_unique<PropagateCastOps>(std::move(options));
}

}  // namespace tob
