// Rotary embedding fusion: HuggingFace's apply_rotary_pos_emb (LLaMA, Mistral, Qwen2 and the models
// that copy it),
//
//   rotate_half(q) = Concat(Neg(Slice(q, h:, axis -1)), Slice(q, :h, axis -1), axis -1)   h = D / 2
//   out = Add(Mul(q, Unsqueeze(cos, 1)), Mul(rotate_half(q), Unsqueeze(sin, 1)))
//
// with q [B, H, S, D] and cos / sin [B or 1, S, D], becomes one RotaryEmbedding(q, cos_cache,
// sin_cache) whose caches are the first halves of cos and sin ([B, S, h], an Expand of a batch of 1
// to B). That is only the same function when the two halves of cos and sin are equal: the pass
// proves it from how they were made (HF writes emb = cat(freqs, freqs); cos = emb.cos() * scaling),
// following elementwise unary ops, Casts and products with a scalar constant back to a Concat of
// one value with itself on the last axis, and leaves the chain alone when it cannot.
//
// Guards: q 4-D of a float type with a known even last dim; the slices split the last axis exactly
// at h (step 1); the Unsqueeze inserts axis 1; cos and sin of q's type and of [B or 1, S, D]; the
// slices, the negation, the concatenation and both products read only inside the chain and are
// neither graph outputs nor kept; one recompute mark.
//
// The fused node is ai.tob::RotaryEmbedding, ai.onnx's op (opset 23) at any opset, whose kernel
// repeats the chain's arithmetic bit for bit (each product rounded to a 16-bit type as the chain's
// Mul nodes store it), so fusing changes no result. Level kAll, CPU-only sessions
// (PassContext::elementwise_fusion), TOB_ROTARY_FUSION=0 takes it out of the pipeline.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

bool IsOnnx(const Node* n, const char* op) { return n != nullptr && n->domain().empty() && n->op_type() == op; }

Node* Producer(const Value* v) { return v != nullptr ? v->producer() : nullptr; }

// Read only by one node, not a graph output, not kept.
bool OnlyReadBy(const Value* v, const Node* reader, const KeptValues& kept) {
  return v != nullptr && !kept.Contains(v) && v->uses().size() == 1 && v->uses()[0].node == reader;
}

// The int64 values of a constant input, or false.
bool Ints(const Value* v, std::vector<int64_t>* out) {
  const Tensor* t = v != nullptr ? v->initializer() : nullptr;
  if (t == nullptr || t->dtype() != DType::kInt64) return false;
  out->assign(t->data<int64_t>(), t->data<int64_t>() + t->numel());
  return true;
}

bool IsLastAxis(int64_t axis, int64_t rank) { return axis == -1 || axis == rank - 1; }

// A Slice of `q`'s last axis (rank 4) from `start` to `end` (or past the end when end_open), step 1.
bool SlicesLastAxis(const Node* s, const Value* q, int64_t start, int64_t end, bool end_open) {
  if (!IsOnnx(s, "Slice") || s->input(0) != q || s->inputs().size() < 4) return false;
  std::vector<int64_t> starts, ends, axes, steps{1};
  if (!Ints(s->input(1), &starts) || !Ints(s->input(2), &ends) || !Ints(s->input(3), &axes)) return false;
  if (s->inputs().size() > 4 && s->input(4) != nullptr && !Ints(s->input(4), &steps)) return false;
  if (starts.size() != 1 || ends.size() != 1 || axes.size() != 1 || steps.size() != 1) return false;
  return IsLastAxis(axes[0], 4) && steps[0] == 1 && starts[0] == start && (end_open ? ends[0] >= end : ends[0] == end);
}

// Whether the two halves of v's last axis are provably equal: v is Concat(a, a) on the last axis, or
// an elementwise function of such a value alone (or with a scalar constant).
bool HalvesEqual(const Value* v, int depth = 0) {
  const Node* p = Producer(v);
  if (p == nullptr || depth > 8 || !v->type().shape) return false;
  const auto rank = static_cast<int64_t>(v->type().shape->size());
  if (IsOnnx(p, "Concat")) {
    int64_t axis = 0;
    return p->inputs().size() == 2 && p->input(0) == p->input(1) && p->GetAttr("axis", &axis).ok() &&
           IsLastAxis(axis, rank);
  }
  static const char* const kUnary[] = {"Cos", "Sin", "Cast", "Neg", "Identity", "Exp", "Reciprocal", "Sqrt"};
  for (const char* op : kUnary)
    if (IsOnnx(p, op)) return p->inputs().size() == 1 && HalvesEqual(p->input(0), depth + 1);
  if (IsOnnx(p, "Mul") || IsOnnx(p, "Div") || IsOnnx(p, "Add") || IsOnnx(p, "Sub")) {
    if (p->inputs().size() != 2) return false;
    for (int i : {0, 1}) {
      const Tensor* c = p->input(1 - i) != nullptr ? p->input(1 - i)->initializer() : nullptr;
      if (c != nullptr && c->numel() == 1 && HalvesEqual(p->input(i), depth + 1)) return true;
    }
  }
  return false;
}

// Unsqueeze(t, axes = [1]) of a rank-3 t: t, or nullptr.
Value* UnsqueezedAtOne(const Graph& graph, const Value* v) {
  const Node* u = Producer(v);
  if (!IsOnnx(u, "Unsqueeze")) return nullptr;
  std::vector<int64_t> axes;
  if (NodeOpset(graph, *u) >= 13) {
    if (u->inputs().size() != 2 || !Ints(u->input(1), &axes)) return nullptr;
  } else if (!u->GetAttr("axes", &axes).ok()) {
    return nullptr;
  }
  Value* t = u->input(0);
  if (axes != std::vector<int64_t>{1} || t == nullptr || !t->type().shape || t->type().shape->size() != 3)
    return nullptr;
  return t;
}

struct Chain {
  Value* q = nullptr;
  Value* cos = nullptr;  // [B or 1, S, D]
  Value* sin = nullptr;
  Value* out = nullptr;
  std::vector<Node*> nodes;  // from the Add back
};

// The two operands of a Mul: (the one that is `want`, or produced by `op`; the other).
bool SplitMul(const Node* mul, const Value* want, std::pair<Value*, Value*>* parts, const char* op = nullptr) {
  if (!IsOnnx(mul, "Mul") || mul->inputs().size() != 2) return false;
  for (int i : {0, 1}) {
    Value* a = mul->input(i);
    if (want != nullptr ? a == want : IsOnnx(Producer(a), op)) {
      *parts = {a, mul->input(1 - i)};
      return true;
    }
  }
  return false;
}

bool Match(const Graph& graph, Node* add, const KeptValues& kept, Chain* c) {
  if (!IsOnnx(add, "Add") || add->inputs().size() != 2 || add->outputs().size() != 1) return false;
  for (int i : {0, 1}) {
    Node* rot_mul = Producer(add->input(1 - i));
    Node* q_mul = Producer(add->input(i));
    std::pair<Value*, Value*> rot_sin;
    if (!SplitMul(rot_mul, nullptr, &rot_sin, "Concat")) continue;
    Node* cat = Producer(rot_sin.first);
    int64_t axis = 0;
    if (cat->inputs().size() != 2 || !cat->GetAttr("axis", &axis).ok() || !IsLastAxis(axis, 4)) continue;
    Node* neg = Producer(cat->input(0));
    if (!IsOnnx(neg, "Neg") || neg->inputs().size() != 1) continue;
    Node* upper = Producer(neg->input(0));
    Node* lower = Producer(cat->input(1));
    if (upper == nullptr || lower == nullptr) continue;
    Value* q = lower->input(0);
    const ValueType& qt = q->type();
    if (!qt.shape || qt.shape->size() != 4 ||
        (qt.dtype != DType::kFloat32 && qt.dtype != DType::kFloat16 && qt.dtype != DType::kBFloat16))
      continue;
    const Dims& qd = *qt.shape;
    const Dim& d = qd[3];
    if (!d.is_known() || d.value % 2 != 0 || d.value == 0) continue;
    const int64_t h = d.value / 2;
    if (!SlicesLastAxis(lower, q, 0, h, false) || !SlicesLastAxis(upper, q, h, d.value, true)) continue;
    std::pair<Value*, Value*> q_cos;
    if (!SplitMul(q_mul, q, &q_cos)) continue;
    // cos and sin: Unsqueeze(t, [1]) of [B or 1, S, D] tables of q's type with equal halves.
    Value* cos = UnsqueezedAtOne(graph, q_cos.second);
    Value* sin = UnsqueezedAtOne(graph, rot_sin.second);
    if (cos == nullptr || sin == nullptr) continue;
    bool tables_fit = true;
    for (const Value* t : {cos, sin}) {
      const Dims& td = *t->type().shape;
      // A batch of 1 is expanded to q's, which needs B and S known.
      const bool expand = !(td[0] == qd[0]);
      tables_fit &= t->type().dtype == qt.dtype && td[1] == qd[2] && td[2] == d &&
                    (!expand || (td[0].is_known() && td[0].value == 1 && qd[0].is_known() && td[1].is_known()));
    }
    if (!tables_fit || !HalvesEqual(cos) || !HalvesEqual(sin)) continue;
    // Everything between q and the Add is the chain's own.
    if (!OnlyReadBy(lower->output(0), cat, kept) || !OnlyReadBy(upper->output(0), neg, kept) ||
        !OnlyReadBy(neg->output(0), cat, kept) || !OnlyReadBy(cat->output(0), rot_mul, kept) ||
        !OnlyReadBy(rot_mul->output(0), add, kept) || !OnlyReadBy(q_mul->output(0), add, kept))
      continue;
    if (kept.ContainsName(add->output(0)->name()) && !add->output(0)->is_graph_output()) return false;
    c->q = q;
    c->cos = cos;
    c->sin = sin;
    c->out = add->output(0);
    c->nodes = {add, q_mul, rot_mul, cat, neg, upper, lower};
    for (const Node* n : c->nodes)
      if (n->recompute() != add->recompute()) return false;
    return true;
  }
  return false;
}

class RotaryEmbeddingFusion final : public GraphPass {
 public:
  const char* name() const override { return "RotaryEmbeddingFusion"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    summary_.clear();
    if (!ctx.elementwise_fusion || graph.Opset("") < 13) return Status::OK();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    std::map<std::pair<const Value*, std::string>, Value*> caches;  // (table, batch) -> its cache
    std::vector<Node*> removed;
    int fused = 0;
    for (Node* add : order) {
      if (std::find(removed.begin(), removed.end(), add) != removed.end()) continue;
      Chain c;
      if (!Match(graph, add, kept, &c)) continue;
      const Dims& qd = *c.q->type().shape;
      TOB_ASSIGN_OR_RETURN(Value * cos, Cache(graph, c.cos, qd, &caches));
      TOB_ASSIGN_OR_RETURN(Value * sin, Cache(graph, c.sin, qd, &caches));
      TOB_ASSIGN_OR_RETURN(Node * rope,
                           graph.AddNode("RotaryEmbedding", kTobDomain, {c.q->name(), cos->name(), sin->name()},
                                         {graph.UniqueName(c.out->name() + "_rotary")}, {},
                                         graph.UniqueName(add->name() + "_RotaryEmbedding")));
      Graph* root = &graph;
      while (root->parent() != nullptr) root = root->parent();
      if (root->Opset(kTobDomain) < 1) root->SetOpset(kTobDomain, 1);
      graph.PlaceLike(rope, add);
      rope->output(0)->set_type(c.out->type());
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(c.out, rope->output(0)));
      for (Node* n : c.nodes) TOB_RETURN_IF_ERROR(graph.RemoveNode(n));
      removed.insert(removed.end(), c.nodes.begin(), c.nodes.end());
      ++fused;
    }
    if (fused == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("fused ", fused, " rotary embeddings into RotaryEmbedding");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  // The first half of a [Bt, S, D] table, expanded to q's batch when Bt is 1: [B, S, D / 2].
  static StatusOr<Value*> Cache(Graph& graph, Value* table, const Dims& qd,
                                std::map<std::pair<const Value*, std::string>, Value*>* caches) {
    const auto key = std::make_pair(static_cast<const Value*>(table), qd[0].ToString());
    if (auto it = caches->find(key); it != caches->end()) return it->second;
    const Dims& td = *table->type().shape;
    const int64_t h = td[2].value / 2;
    const DType dtype = table->type().dtype;
    auto constant = [&](const std::string& base, std::vector<int64_t> values) -> StatusOr<std::string> {
      const std::string name = graph.UniqueName(table->name() + base);
      const auto n = static_cast<int64_t>(values.size());
      TOB_RETURN_IF_ERROR(graph.AddInitializer(name, Tensor::FromVector<int64_t>(values, {n})).status());
      return name;
    };
    TOB_ASSIGN_OR_RETURN(std::string starts, constant("_half_starts", {0}));
    TOB_ASSIGN_OR_RETURN(std::string ends, constant("_half_ends", {h}));
    TOB_ASSIGN_OR_RETURN(std::string axes, constant("_half_axes", {-1}));
    TOB_ASSIGN_OR_RETURN(Node * slice, graph.AddNode("Slice", "", {table->name(), starts, ends, axes},
                                                     {graph.UniqueName(table->name() + "_half")}, {},
                                                     graph.UniqueName(table->name() + "_half_slice")));
    PlaceAfter(graph, slice, table);
    Value* half = slice->output(0);
    half->set_type(ValueType(dtype, Dims{td[0], td[1], Dim(h)}));
    if (!(td[0] == qd[0])) {  // a batch of 1 for every sequence: expanded to B (known, checked by Match)
      TOB_ASSIGN_OR_RETURN(std::string shape, constant("_cache_shape", {qd[0].value, td[1].value, h}));
      TOB_ASSIGN_OR_RETURN(Node * expand, graph.AddNode("Expand", "", {half->name(), shape},
                                                        {graph.UniqueName(table->name() + "_cache")}, {},
                                                        graph.UniqueName(table->name() + "_cache_expand")));
      PlaceAfter(graph, expand, table);
      half = expand->output(0);
      half->set_type(ValueType(dtype, Dims{qd[0], td[1], Dim(h)}));
    }
    (*caches)[key] = half;
    return half;
  }

  // Where the table is made, so that the executor's order keeps it near its producer.
  static void PlaceAfter(Graph& graph, Node* node, const Value* table) {
    if (table->producer() != nullptr) graph.PlaceLike(node, table->producer());
  }

  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateRotaryEmbeddingFusionPass() { return std::make_unique<RotaryEmbeddingFusion>(); }

}  // namespace tob
