// MatMul/Gemm + Transpose fusion: BLAS reads either operand transposed for free, so a 2-D
// Transpose feeding a matrix product becomes a trans flag, and a 2-D Transpose of a bias-free Gemm
// output becomes a Gemm with swapped operands ((op(A) op(B))^T = op(B)^T op(A)^T). Training graphs
// are full of these: every Linear's backward reads its weight and its input transposed. The
// 16-bit types too (autocast's graphs): the bfloat16 GEMM packs a transposed A and reads a
// transposed B as it packs its panels, float16 is widened to float32 either way; each product is
// the same sum of the same products, so only a Transpose node's pass over memory goes.
//
// Batched products the same way: a Transpose swapping only the last two axes of an operand of a
// MatMul with an operand of rank >= 3 (attention's backward reads Q, K, V and the probabilities
// so: dV = P^T dO, dP = dO V^T, ...) becomes com.microsoft FusedMatMul's transA / transB (onnxruntime's
// contrib op, whose CPU kernel reads each batch's matrix transposed in place), and such a Transpose
// of the product's only reader swaps the operands: four Transpose copies per attention layer in a
// training backward (16 + 3 x 4 MiB per GPT-2 layer at the memory benchmark's size). Only in
// sessions whose nodes all run on the CPU (PassContext::elementwise_fusion: no other provider has a
// FusedMatMul kernel); TOB_BATCHED_MATMUL_TRANSPOSE=0 keeps batched Transposes (A/B runs).
#include "core/domain.h"
#include "core/env_switch.h"
#include "ops/gemm_attributes.h"
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

// Read at each run (each session's pipeline), so one process can compile both ways (A/B runs).
bool BatchedFoldEnabled() { return EnvSwitchOn(EnvSwitch::kBatchedMatMulTranspose); }

int64_t RankOf(const Value* v) {
  return v != nullptr && v->type().shape ? static_cast<int64_t>(v->type().shape->size()) : -1;
}

// The input of a Transpose producing v that swaps only its last two axes (perm [0, .., r-3, r-1,
// r-2], rank r >= 2; no perm reverses every axis, which is that swap at rank 2 only).
Value* LastAxesTransposeSource(const Value* v) {
  if (v == nullptr || v->producer() == nullptr) return nullptr;
  const Node& t = *v->producer();
  const int64_t r = RankOf(t.input(0));
  if (t.op_type() != "Transpose" || !t.domain().empty() || r < 2) return nullptr;
  std::vector<int64_t> swap(r), perm, reversed(r);
  for (int64_t i = 0; i < r; ++i) {
    swap[i] = i;
    reversed[i] = r - 1 - i;
  }
  std::swap(swap[r - 2], swap[r - 1]);
  if (!t.GetAttr("perm", &perm, reversed).ok() || perm != swap) return nullptr;
  return t.input(0);
}

// A batched float product: MatMul with both operands of rank >= 2 and one of rank >= 3 (two
// matrices are Gemm's case above), or FusedMatMul of operands of rank >= 2.
bool IsBatchedProduct(const Node& n) {
  if (n.outputs().size() != 1 || n.input(0) == nullptr || n.input(1) == nullptr) return false;
  const bool matmul = n.op_type() == "MatMul" && n.domain().empty();
  const bool fused = n.op_type() == "FusedMatMul" && n.domain() == kMicrosoftDomain;
  if (!matmul && !fused) return false;
  const int64_t ra = RankOf(n.input(0)), rb = RankOf(n.input(1));
  if (ra < 2 || rb < 2 || (matmul && std::max(ra, rb) < 3)) return false;
  const DType t = n.input(0)->type().dtype;
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
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
    const bool batched = ctx.elementwise_fusion && BatchedFoldEnabled();
    for (Node* n : order) {
      if (batched && IsBatchedProduct(*n)) {
        TOB_RETURN_IF_ERROR(FoldBatched(graph, kept, n, &dead, &operands, &outputs));
        continue;
      }
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
    summary_ = StrCat("folded ", operands, " operand transpose(s) and ", outputs,
                      " result transpose(s) into Gemm / FusedMatMul");
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

  // A batched product reading last-two-axes Transposes (or read by one) becomes a FusedMatMul
  // with the matching trans flags, in place of the product (or of the Transpose of it).
  static Status FoldBatched(Graph& graph, const KeptValues& kept, Node* n, std::vector<Node*>* dead, int* operands,
                            int* outputs) {
    Value* a = n->input(0);
    Value* b = n->input(1);
    FusedMatMulAttributes attrs;
    if (n->op_type() == "FusedMatMul") {
      TOB_ASSIGN_OR_RETURN(attrs, ParseFusedMatMulAttributes(*n));
    }
    bool fused = false;
    if (Value* src = LastAxesTransposeSource(a)) {
      a = src;
      attrs.trans_a = !attrs.trans_a;
      fused = true;
      ++*operands;
    }
    if (Value* src = LastAxesTransposeSource(b)) {
      b = src;
      attrs.trans_b = !attrs.trans_b;
      fused = true;
      ++*operands;
    }
    Value* result = n->output(0);
    // (op(A) op(B))^T = op(B)^T op(A)^T, batch by batch.
    if (result->uses().size() == 1 && !kept.Contains(result)) {
      Node* reader = result->uses()[0].node;
      if (LastAxesTransposeSource(reader->output(0)) == result) {
        std::swap(a, b);
        const bool ta = attrs.trans_a;
        attrs.trans_a = !attrs.trans_b;
        attrs.trans_b = !ta;
        dead->push_back(n);
        n = reader;
        fused = true;
        ++*outputs;
      }
    }
    if (!fused) return Status::OK();
    Graph* root = &graph;  // opsets are the model's (Graph::Opset reads the main graph's)
    while (root->parent() != nullptr) root = root->parent();
    if (root->Opset(kMicrosoftDomain) < 1) root->SetOpset(kMicrosoftDomain, 1);
    AttributeMap map;
    if (attrs.trans_a) map["transA"] = Attribute::Int(1);
    if (attrs.trans_b) map["transB"] = Attribute::Int(1);
    if (attrs.alpha != 1.f) map["alpha"] = Attribute::Float(attrs.alpha);
    Value* old = n->output(0);
    TOB_ASSIGN_OR_RETURN(Node * product, graph.AddNode("FusedMatMul", kMicrosoftDomain, {a->name(), b->name()},
                                                       {graph.UniqueName(old->name() + "_fused")}, std::move(map),
                                                       graph.UniqueName(n->name() + "_fused")));
    product->output(0)->set_type(old->type());
    graph.PlaceLike(product, n);
    TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(old, product->output(0)));
    dead->push_back(n);
    return Status::OK();
  }

  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateMatMulTransposeFusionPass() { return std::make_unique<MatMulTransposeFusion>(); }

}  // namespace tob
