// MatMul/Gemm + Transpose fusion: BLAS reads either operand transposed for free, so a 2-D
// Transpose feeding a matrix product becomes a trans flag, and a 2-D Transpose of a bias-free Gemm
// output becomes a Gemm with swapped operands ((op(A) op(B))^T = op(B)^T op(A)^T). Training graphs
// are full of these: every Linear's backward reads its weight and its input transposed. The
// 16-bit types too (autocast's graphs): the bfloat16 GEMM packs a transposed A and reads a
// transposed B as it packs its panels, float16 is widened to float32 either way; each product is
// the same sum of the same products, so only a Transpose node's pass over memory goes.
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

bool IsRank2(const Value* v) { return v != nullptr && v->type().shape && v->type().shape->size() == 2; }

// The types a Gemm takes at the graph's opset: float16/32/64, bfloat16 from opset 13.
bool IsGemmType(const Graph& g, const Value* v) {
  const DType t = v->type().dtype;
  if (t == DType::kBFloat16) return g.Opset("") >= 13;
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16;
}

// The input of a 2-D transpose (perm [1, 0], or no perm on a rank-2 tensor) producing v.
Value* TransposeSource(const Value* v) {
  if (v == nullptr || v->producer() == nullptr) return nullptr;
  const Node& t = *v->producer();
  if (t.op_type() != "Transpose" || !t.domain().empty() || !IsRank2(t.input(0))) return nullptr;
  std::vector<int64_t> perm;
  if (!t.GetAttr("perm", &perm, std::vector<int64_t>{1, 0}).ok() || perm != std::vector<int64_t>{1, 0}) return nullptr;
  return t.input(0);
}

struct GemmSpec {
  Value* a = nullptr;
  Value* b = nullptr;
  Value* c = nullptr;
  int64_t trans_a = 0, trans_b = 0;
  float alpha = 1.f, beta = 1.f;
};

StatusOr<GemmSpec> ReadProduct(const Node& n) {
  GemmSpec s;
  s.a = n.input(0);
  s.b = n.input(1);
  if (n.op_type() == "Gemm") {
    s.c = n.input(2);
    TOB_RETURN_IF_ERROR(n.GetAttr("transA", &s.trans_a, 0));
    TOB_RETURN_IF_ERROR(n.GetAttr("transB", &s.trans_b, 0));
    TOB_RETURN_IF_ERROR(n.GetAttr("alpha", &s.alpha, 1.f));
    TOB_RETURN_IF_ERROR(n.GetAttr("beta", &s.beta, 1.f));
  }
  return s;
}

// A 2-D float product (MatMul of two matrices, or Gemm) whose operands are written by Transposes.
bool IsCandidateProduct(const Graph& g, const Node& n) {
  if (!n.domain().empty() || n.outputs().size() != 1) return false;
  if (n.op_type() == "Gemm") return true;
  return n.op_type() == "MatMul" && IsRank2(n.input(0)) && IsRank2(n.input(1)) && IsGemmType(g, n.input(0));
}

class MatMulTransposeFusion final : public GraphPass {
 public:
  const char* name() const override { return "MatMulTransposeFusion"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    int operands = 0, outputs = 0;
    std::vector<Node*> dead;
    for (Node* n : order) {
      if (!IsCandidateProduct(graph, *n)) continue;
      TOB_ASSIGN_OR_RETURN(GemmSpec s, ReadProduct(*n));
      bool fused = false;
      if (Value* src = TransposeSource(s.a)) {
        s.a = src;
        s.trans_a ^= 1;
        fused = true;
        ++operands;
      }
      if (Value* src = TransposeSource(s.b)) {
        s.b = src;
        s.trans_b ^= 1;
        fused = true;
        ++operands;
      }
      Value* result = n->output(0);
      // The product's only reader transposes it back: produce the transposed result directly.
      if (s.c == nullptr && result->uses().size() == 1 && !kept.Contains(result)) {
        Node* reader = result->uses()[0].node;
        if (TransposeSource(reader->output(0)) == result) {
          std::swap(s.a, s.b);
          const int64_t ta = s.trans_a;
          s.trans_a = s.trans_b ^ 1;
          s.trans_b = ta ^ 1;
          dead.push_back(n);
          n = reader;
          fused = true;
          ++outputs;
        }
      }
      if (!fused) continue;
      TOB_RETURN_IF_ERROR(Replace(graph, n, s));
      dead.push_back(n);
    }
    // Readers before the products they read.
    for (auto it = dead.rbegin(); it != dead.rend(); ++it) TOB_RETURN_IF_ERROR(graph.RemoveNode(*it));
    if (operands + outputs == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat("folded ", operands, " operand transpose(s) and ", outputs, " result transpose(s) into Gemm");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  // A Gemm computing what `n` (the product, or the Transpose of it) produced; n's output is re-pointed.
  static Status Replace(Graph& graph, Node* n, const GemmSpec& s) {
    AttributeMap attrs;
    attrs["transA"] = Attribute::Int(s.trans_a);
    attrs["transB"] = Attribute::Int(s.trans_b);
    if (s.alpha != 1.f) attrs["alpha"] = Attribute::Float(s.alpha);
    if (s.beta != 1.f) attrs["beta"] = Attribute::Float(s.beta);
    std::vector<std::string> inputs = {s.a->name(), s.b->name()};
    if (s.c != nullptr) inputs.push_back(s.c->name());
    Value* old = n->output(0);
    TOB_ASSIGN_OR_RETURN(Node * gemm, graph.AddNode("Gemm", "", inputs, {graph.UniqueName(old->name() + "_gemm")},
                                                    std::move(attrs), graph.UniqueName(n->name() + "_gemm")));
    gemm->output(0)->set_type(old->type());
    graph.PlaceLike(gemm, n);
    return graph.ReplaceAllUses(old, gemm->output(0));
  }

  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateMatMulTransposeFusionPass() { return std::make_unique<MatMulTransposeFusion>(); }

}  // namespace tob
