// Elementwise fusion: connected groups of elementwise nodes of one output shape (float32, float16,
// bfloat16, and the Casts between them) become one ai.tob FusedElementwise node
// (ops/fused_elementwise_program.h), which the CPU kernel runs as one loop over memory
// (providers/cpu/elementwise/fused_elementwise.cc). RMSNorm's scaling, RoPE's rotations, SiLU/GELU
// and their gradients (GPT-2's GELU backward with com.microsoft's TanhGrad in it), bias + activation
// and residual adds otherwise read and write a full tensor per node; under autocast each also sits
// between Casts (a bfloat16 GEMM's output widened for a float32 residual add, GPT-2's tanh GELU
// written out in ten bfloat16 nodes). The kernel rounds
// every 16-bit result as the unfused kernel stores it, so fusing changes no value.
//
// Groups are grown greedily in topological order: a fusible node joins the group of a fusible
// producer, and the groups of its other producers are merged in, when
//  - its output has the group's shape (dims equal, or the same symbol): the kernel walks one
//    iteration space, so a [B, S, 1] statistic is never recomputed for every one of H elements;
//  - the group stays convex (no path leaves it and comes back through an unfused node), so the
//    fused node can run where the group's last node ran;
//  - every member has the same recompute mark (a recompute copy stays a copy, apart from the
//    forward nodes it repeats: CSE and the memory optimizer rely on that);
//  - it stays within kFusedMaxInputs inputs and kFusedGroupMaxInstructions instructions.
// A value read outside its group, or a graph output, becomes an output of the fused node (the
// backward's saved activations, for instance); values kept by name (PassContext::keep_values) keep
// their producer. Groups of one node are left alone.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/env_switch.h"
#include "ops/fused_elementwise_program.h"
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

// Dim::operator== equates known sizes, and symbols of one name.
bool SameDims(const Dims& a, const Dims& b) { return a == b; }

bool HasStaticOrSymbolicShape(const Value* v) {
  if (!v->type().shape) return false;
  for (const Dim& d : *v->type().shape)
    if (!d.is_known() && d.symbol.empty()) return false;
  return true;
}

// An elementwise node the kernel can compute: its output is then one register. Its operands have
// its output's type (the ONNX ops' single T; Where's condition is bool), except a Cast's, which may
// be any of float32, float16 and bfloat16.
bool IsFusible(const Node& n, const KeptValues& kept, bool tanh_grad) {
  const std::optional<FusedOpCode> code = FusedOpCodeOf(n);
  if (!code || n.outputs().size() != 1 || static_cast<int>(n.inputs().size()) != FusedOpArity(*code)) return false;
  if (*code == FusedOpCode::kTanhGrad && !tanh_grad) return false;
  const Value* y = n.output(0);
  const DType t = y->type().dtype;
  if (!IsFusedFloatType(t) || !HasStaticOrSymbolicShape(y)) return false;
  if (!y->is_graph_output() && kept.Contains(y)) return false;
  for (size_t j = 0; j < n.inputs().size(); ++j) {
    const Value* x = n.input(j);
    if (x == nullptr || !x->type().shape) return false;
    const DType xt = x->type().dtype;
    if (*code == FusedOpCode::kCast ? !IsFusedFloatType(xt)
                                    : xt != (*code == FusedOpCode::kWhere && j == 0 ? DType::kBool : t))
      return false;
    // TanhGrad's kernel takes dY and Y of one shape, no broadcasting (its shape function says so
    // too); fused, it must not get any where the dims are not known to be equal.
    if (*code == FusedOpCode::kTanhGrad && !(y->type().shape && SameDims(*x->type().shape, *y->type().shape)))
      return false;
  }
  return true;
}

class ElementwiseFusion final : public GraphPass {
 public:
  const char* name() const override { return "ElementwiseFusion"; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    if (!ctx.elementwise_fusion) return Status::OK();
    KeptValues kept(ctx);
    TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
    pos_.clear();
    group_of_.clear();
    groups_.clear();
    for (size_t i = 0; i < order.size(); ++i) pos_[order[i]] = static_cast<int64_t>(i);

    // TanhGrad as an instruction: on unless TOB_TANHGRAD_FUSION=0 (A/B runs,
    // benchmarks/bench_elementwise_fusion.py --switch; read each time the pass runs).
    const bool tanh_grad = EnvSwitchOn(EnvSwitch::kTanhGradFusion);
    for (Node* n : order) {
      if (!IsFusible(*n, kept, tanh_grad)) continue;
      int target = -1;
      for (const Value* x : n->inputs()) {
        const Node* p = x->producer();
        auto it = p == nullptr ? group_of_.end() : group_of_.find(p);
        if (it == group_of_.end() || it->second == target) continue;
        const int g = it->second;
        if (!Compatible(groups_[g], *n)) continue;
        if (target < 0) {
          std::vector<Node*> merged = groups_[g];
          merged.push_back(n);
          if (!CanFuse(merged)) continue;
          groups_[g] = std::move(merged);
          group_of_[n] = target = g;
        } else {
          std::vector<Node*> merged = groups_[target];
          merged.insert(merged.end(), groups_[g].begin(), groups_[g].end());
          if (!CanFuse(merged)) continue;
          for (Node* m : groups_[g]) group_of_[m] = target;
          groups_[target] = std::move(merged);
          groups_[g].clear();
        }
      }
      if (target < 0) {
        group_of_[n] = static_cast<int>(groups_.size());
        groups_.push_back({n});
      }
    }

    // Each group is convex on its own, but two groups can still form a cycle once both are
    // contracted (a1 -> b2 and b1 -> a2): every group is checked again on the graph with the groups
    // before it fused, in a fresh topological order, and left unfused when it would close a cycle.
    int fused_groups = 0, fused_nodes = 0;
    for (std::vector<Node*>& group : groups_) {
      if (group.size() < 2) continue;
      if (fused_groups > 0) {
        TOB_ASSIGN_OR_RETURN(order, graph.TopologicalOrder());
        pos_.clear();
        for (size_t i = 0; i < order.size(); ++i) pos_[order[i]] = static_cast<int64_t>(i);
        if (!CanFuse(group)) continue;
      }
      std::sort(group.begin(), group.end(), [&](const Node* a, const Node* b) { return pos_[a] < pos_[b]; });
      TOB_ASSIGN_OR_RETURN(bool fused, Fuse(graph, group, kept));
      if (!fused) continue;
      ++fused_groups;
      fused_nodes += static_cast<int>(group.size());
    }
    if (fused_groups == 0) return Status::OK();
    // Opsets are the model's: a body fused inside a Loop or If imports the domain on the main graph,
    // where its kernel lookup reads it (Graph::Opset reads Root()'s).
    Graph* root = &graph;
    while (root->parent() != nullptr) root = root->parent();
    if (root->Opset(kTobDomain) < 1) root->SetOpset(kTobDomain, 1);
    *changed = true;
    summary_ = StrCat("fused ", fused_nodes, " elementwise nodes into ", fused_groups, " FusedElementwise nodes");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  static bool Compatible(const std::vector<Node*>& group, const Node& n) {
    const Node& first = *group.front();
    return first.recompute() == n.recompute() && SameDims(*first.output(0)->type().shape, *n.output(0)->type().shape);
  }

  bool Contains(const std::unordered_set<const Node*>& set, const Node* n) const { return set.count(n) > 0; }

  // Within the size bounds, and convex: nothing reachable from the members (through unfused
  // nodes, which all run before the last member) feeds a member.
  bool CanFuse(const std::vector<Node*>& members) const {
    if (static_cast<int>(members.size()) > kFusedGroupMaxInstructions) return false;
    std::unordered_set<const Node*> in(members.begin(), members.end());
    std::unordered_set<const Value*> inputs;
    int64_t last = 0;
    for (const Node* m : members) {
      last = std::max(last, pos_.at(m));
      for (const Value* x : m->inputs())
        if (x->producer() == nullptr || !in.count(x->producer())) inputs.insert(x);
    }
    if (static_cast<int>(inputs.size()) > kFusedMaxInputs) return false;
    std::vector<const Node*> stack;
    std::unordered_set<const Node*> seen;
    auto visit_readers = [&](const Node* from, bool from_member) {
      for (const Value* v : from->outputs()) {
        for (const auto& use : v->uses()) {
          const Node* r = use.node;
          if (in.count(r)) {
            if (!from_member) return false;
            continue;
          }
          if (pos_.at(r) < last && seen.insert(r).second) stack.push_back(r);
        }
      }
      return true;
    };
    for (const Node* m : members) visit_readers(m, true);
    while (!stack.empty()) {
      const Node* x = stack.back();
      stack.pop_back();
      if (!visit_readers(x, false)) return false;
    }
    return true;
  }

  // Replaces the group (in topological order) by one FusedElementwise node; false when none of
  // its values is read (dead code, left to DCE).
  StatusOr<bool> Fuse(Graph& graph, const std::vector<Node*>& group, const KeptValues& kept) {
    std::unordered_set<const Node*> in(group.begin(), group.end());
    std::unordered_map<const Value*, int> reg;
    std::vector<std::string> input_names;
    std::vector<int64_t> types;  // of every register
    for (const Node* n : group)
      for (const Value* x : n->inputs())
        if ((x->producer() == nullptr || !in.count(x->producer())) && !reg.count(x)) {
          reg[x] = static_cast<int>(input_names.size());
          input_names.push_back(x->name());
          types.push_back(static_cast<int64_t>(x->type().dtype));
        }
    std::vector<std::string> ops;
    std::vector<int64_t> operands, outputs;
    std::vector<Value*> replaced;
    for (const Node* n : group) {
      const FusedOpCode code = *FusedOpCodeOf(*n);
      ops.push_back(FusedOpName(code));
      for (int j = 0; j < 3; ++j) operands.push_back(j < FusedOpArity(code) ? reg.at(n->input(j)) : -1);
      Value* y = n->output(0);
      reg[y] = static_cast<int>(input_names.size() + ops.size() - 1);
      types.push_back(static_cast<int64_t>(y->type().dtype));
      bool read_outside = y->is_graph_output() || kept.Contains(y);
      for (const auto& use : y->uses()) read_outside |= !in.count(use.node);
      if (!read_outside) continue;
      outputs.push_back(reg[y]);
      replaced.push_back(y);
    }
    if (replaced.empty()) return false;
    std::vector<std::string> output_names;
    for (const Value* y : replaced) output_names.push_back(graph.UniqueName(y->name() + "_fused"));
    AttributeMap attrs =
        FusedProgramAttributes(std::move(ops), std::move(operands), std::move(outputs), std::move(types));
    const Node* last = group.back();
    TOB_ASSIGN_OR_RETURN(Node * fused, graph.AddNode(kFusedElementwiseOp, kTobDomain, input_names, output_names,
                                                     std::move(attrs), graph.UniqueName(last->name() + "_fused")));
    graph.PlaceLike(fused, last);
    for (size_t o = 0; o < replaced.size(); ++o) {
      fused->output(static_cast<int>(o))->set_type(replaced[o]->type());
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(replaced[o], fused->output(static_cast<int>(o))));
    }
    for (auto it = group.rbegin(); it != group.rend(); ++it) TOB_RETURN_IF_ERROR(graph.RemoveNode(*it));
    return true;
  }

  std::unordered_map<const Node*, int64_t> pos_;
  std::unordered_map<const Node*, int> group_of_;
  std::vector<std::vector<Node*>> groups_;
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateElementwiseFusionPass() { return std::make_unique<ElementwiseFusion>(); }

}  // namespace tob
