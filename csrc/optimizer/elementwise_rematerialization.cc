// Elementwise rematerialisation: a FusedElementwise node (the consumer) that reads values another
// FusedElementwise node (the producer) writes only for it recomputes them from the producer's own
// inputs inside its loop, so they are never materialised. The case it is for: a recomputed
// transformer layer's MLP in the training backward. The memory optimizer's recompute rebuilds the
// layer's tanh-GELU in one fused node whose five outputs (x / 2, tanh(...), 1 + tanh(...), x^2
// terms and the GELU itself) the GELU gradient's fused node reads after the MLP's down-projection
// gradient: four of the five exist only for the gradient, 16 MiB each at the benchmark's size, and
// they were the backward's peak. Recomputed inside the gradient's loop from x alone they cost one
// tensor (x, kept to the gradient) instead of four, and a few elementwise instructions per element.
//
// Only elementwise work is ever duplicated (the instructions of a fused program: no GEMM, no
// reduction), and only when it saves memory, judged on the engine's execution order (the model's
// order, which this pass keeps: Graph::PlaceLike):
//  - a value v qualifies when its only reader is the consumer, it is not a graph output or kept by
//    name, it has the consumer's output shape (so recomputing it costs no more elements than
//    reading it), and the instructions that compute it from the producer's inputs (its cone) number
//    at most kMaxConeInstructions;
//  - the consumer then reads the cones' leaves (producer inputs) instead. A leaf costs nothing
//    when it is a constant, a graph output, already read by the consumer or read by a node that
//    runs after it; otherwise it lives from its last reader to the consumer;
//  - of the qualifying values, the pass takes the set that frees the most bytes net, and only
//    when at every point between the producers and the consumer the values it frees outweigh the
//    leaves it keeps alive longer (so no point of the run holds more than before), within the
//    program's bounds (kFusedMaxInputs inputs, kFusedMaxInstructions instructions).
// The producer keeps its other outputs (the GELU itself, read by the down-projection's products)
// and drops the instructions nothing reads any more; a producer left with no output is removed.
// The copied instructions are the producer's, with their register types, so the consumer computes
// bit for bit what it used to read (the kernel keeps every register as the unfused kernel stores
// it, 16-bit rounding included).
//
// Runs after ElementwiseFusion (level 99; TOB_ELEMENTWISE_REMAT=0 turns it off, A/B runs), only where
// that pass runs (PassContext::elementwise_fusion), on the main graph only (not inside control-flow
// bodies). Sizes with symbolic dims count each symbol as kSymbolicDim elements.
#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ops/fused_elementwise_program.h"
#include "optimizer/node_traits.h"
#include "optimizer/passes.h"

namespace tob {

namespace {

inline constexpr int kMaxConeInstructions = 12;
inline constexpr int kMaxCandidates = 10;  // subsets tried: 2^10
inline constexpr int64_t kSymbolicDim = 1024;

bool IsFused(const Node* n) { return n != nullptr && n->op_type() == kFusedElementwiseOp && n->domain() == kTobDomain; }

int64_t Bytes(const Value* v) {
  const ValueType& t = v->type();
  if (!t.shape) return 0;
  int64_t n = 1;
  for (const Dim& d : *t.shape) n *= d.is_known() ? d.value : kSymbolicDim;
  return n * static_cast<int64_t>(DTypeSize(t.dtype));
}

// Whether an output of n is kept by name (not as a graph output): the node is then left as it is,
// since its replacement's outputs have new names (ElementwiseFusion leaves such producers too).
bool KeepsANameOf(const Node& n, const KeptValues& kept) {
  for (const Value* y : n.outputs())
    if (!y->is_graph_output() && kept.ContainsName(y->name())) return true;
  return false;
}

// Instructions (indices into p.code, ascending) that compute register r from the inputs.
std::vector<int> Cone(const FusedProgram& p, int r) {
  std::set<int> cone;
  std::vector<int> stack = {r};
  while (!stack.empty()) {
    const int reg = stack.back();
    stack.pop_back();
    if (reg < p.num_inputs) continue;
    const int k = reg - p.num_inputs;
    if (!cone.insert(k).second) continue;
    for (int j = 0; j < p.code[k].arity; ++j) stack.push_back(p.code[k].src[j]);
  }
  return {cone.begin(), cone.end()};
}

// Input registers the instructions read.
std::set<int> Leaves(const FusedProgram& p, const std::vector<int>& instructions) {
  std::set<int> leaves;
  for (int k : instructions)
    for (int j = 0; j < p.code[k].arity; ++j)
      if (p.code[k].src[j] < p.num_inputs) leaves.insert(p.code[k].src[j]);
  return leaves;
}

// A program being written: its inputs (values, each once) with their types, and its instructions
// with their result types.
struct ProgramBuilder {
  std::vector<Value*> inputs;
  std::vector<DType> input_types;
  std::vector<FusedInstruction> code;
  std::vector<DType> code_types;

  int Input(Value* v, DType t) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] == v) return static_cast<int>(i);
    inputs.push_back(v);
    input_types.push_back(t);
    return static_cast<int>(inputs.size()) - 1;
  }
};

// A register named before the program's inputs are final: input `index`, or the result of
// instruction `index`. Replace numbers them (inputs first, then the instructions).
struct Reg {
  bool input;
  int index;
};

class ElementwiseRematerialization final : public GraphPass {
 public:
  const char* name() const override { return "ElementwiseRematerialization"; }
  bool applies_to_subgraphs() const override { return false; }

  Status Run(Graph& graph, PassContext& ctx, bool* changed) override {
    *changed = false;
    if (!ctx.elementwise_fusion) return Status::OK();
    KeptValues kept(ctx);
    programs_.clear();
    int rewrites = 0, recomputed = 0;
    int64_t freed = 0;
    // Each rewrite removes at least one output of a producer, so this ends.
    for (bool again = true; again;) {
      again = false;
      TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
      pos_.clear();
      for (size_t i = 0; i < order.size(); ++i) pos_[order[i]] = static_cast<int64_t>(i);
      for (Node* consumer : order) {
        if (!IsFused(consumer)) continue;
        TOB_ASSIGN_OR_RETURN(Choice choice, Choose(*consumer, kept));
        if (choice.values.empty()) continue;
        TOB_RETURN_IF_ERROR(Rewrite(graph, consumer, choice, kept));
        ++rewrites;
        recomputed += static_cast<int>(choice.values.size());
        freed += choice.gain;
        again = true;
        break;
      }
    }
    if (rewrites == 0) return Status::OK();
    *changed = true;
    summary_ = StrCat(rewrites, " FusedElementwise nodes recompute ", recomputed,
                      " values of their producers instead of reading them (", freed, " bytes less held)");
    return Status::OK();
  }

  std::string summary() const override { return summary_; }

 private:
  struct Candidate {
    int input = 0;  // the consumer's input register
    Node* producer = nullptr;
    int reg = 0;            // the value's register in the producer's program
    std::vector<int> cone;  // the producer's instructions that compute it
  };
  struct Choice {
    std::vector<Candidate> values;
    int64_t gain = 0;
  };

  // The values of `consumer` worth recomputing in it (none: keep it as it is).
  StatusOr<Choice> Choose(const Node& consumer, const KeptValues& kept) {
    TOB_ASSIGN_OR_RETURN(FusedProgram cp, ReadFusedProgram(consumer));
    const Value* out = consumer.output(0);
    if (!out->type().shape || KeepsANameOf(consumer, kept)) return Choice{};
    std::vector<Candidate> candidates;
    for (int i = 0; i < cp.num_inputs; ++i) {
      Value* v = consumer.input(i);
      Node* p = v->producer();
      if (!IsFused(p) || p == &consumer || kept.Contains(v) || KeepsANameOf(*p, kept)) continue;
      if (!v->type().shape || !(*v->type().shape == *out->type().shape)) continue;
      bool only_here = true;
      for (const auto& use : v->uses()) only_here &= use.node == &consumer;
      if (!only_here) continue;
      TOB_ASSIGN_OR_RETURN(const FusedProgram* pp, ProgramOf(*p));
      const int reg = pp->outputs[v->producer_output()];
      std::vector<int> cone = Cone(*pp, reg);
      if (static_cast<int>(cone.size()) > kMaxConeInstructions) continue;
      candidates.push_back({i, p, reg, std::move(cone)});
      if (static_cast<int>(candidates.size()) == kMaxCandidates) break;
    }
    Choice best;
    const int n = static_cast<int>(candidates.size());
    for (uint32_t mask = 1; mask < (1u << n); ++mask) {
      std::vector<Candidate> set;
      for (int c = 0; c < n; ++c)
        if (mask & (1u << c)) set.push_back(candidates[c]);
      TOB_ASSIGN_OR_RETURN(std::optional<int64_t> gain, Gain(consumer, cp, set));
      if (gain && *gain > best.gain) best = Choice{std::move(set), *gain};
    }
    return best;
  }

  // Bytes the set frees net at the consumer, or nullopt when it breaks a bound or holds more at
  // some point before the consumer than it frees there.
  StatusOr<std::optional<int64_t>> Gain(const Node& consumer, const FusedProgram& cp,
                                        const std::vector<Candidate>& set) {
    std::unordered_set<int> replaced;
    for (const Candidate& c : set) replaced.insert(c.input);
    std::unordered_set<const Value*> inputs;  // the rewritten consumer's
    for (int i = 0; i < cp.num_inputs; ++i)
      if (!replaced.count(i)) inputs.insert(consumer.input(i));
    std::unordered_set<const Value*> kept_inputs = inputs;
    std::map<const Node*, std::set<int>> instructions;  // per producer, cones merged
    for (const Candidate& c : set) instructions[c.producer].insert(c.cone.begin(), c.cone.end());
    int count = static_cast<int>(cp.code.size());
    std::vector<const Value*> leaves;
    for (const auto& [p, ks] : instructions) {
      count += static_cast<int>(ks.size());
      TOB_ASSIGN_OR_RETURN(const FusedProgram* pp, ProgramOf(*p));
      for (int r : Leaves(*pp, {ks.begin(), ks.end()}))
        if (inputs.insert(p->input(r)).second) leaves.push_back(p->input(r));
    }
    if (count > kFusedMaxInstructions || static_cast<int>(inputs.size()) > kFusedMaxInputs)
      return std::optional<int64_t>();
    const int64_t at = pos_.at(&consumer);
    // Freed: each value from its producer to the consumer. Held longer: each leaf not alive at the
    // consumer anyway, from after its last reader to the consumer.
    std::vector<std::pair<int64_t, int64_t>> events;  // (position, bytes: + held, - freed)
    int64_t total = 0;
    for (const Candidate& c : set) {
      const int64_t b = Bytes(consumer.input(c.input));
      events.push_back({pos_.at(c.producer), -b});
      total -= b;
    }
    for (const Value* l : leaves) {
      if (l->initializer() != nullptr || l->is_graph_output()) continue;
      int64_t last = -1;
      for (const auto& use : l->uses()) {
        // A reader the order does not place (none is expected: implicit uses are their owner's)
        // makes the leaf's lifetime unknown: no rewrite.
        auto it = pos_.find(use.node);
        if (it == pos_.end()) return std::optional<int64_t>();
        last = std::max(last, it->second);
      }
      if (last > at) continue;
      const int64_t b = Bytes(l);
      events.push_back({last + 1, b});
      total += b;
    }
    if (total >= 0) return std::optional<int64_t>();
    // Freed values count from their producer's position on, held leaves from after their reader:
    // at equal positions the freed come first (a producer runs before a reader placed after it).
    std::sort(events.begin(), events.end());
    int64_t running = 0;
    for (const auto& [where, bytes] : events) {
      running += bytes;
      if (running > 0) return std::optional<int64_t>();
    }
    return std::optional<int64_t>(-total);
  }

  // The producer's program, read once per pass run (nodes are replaced, never edited in place).
  StatusOr<const FusedProgram*> ProgramOf(const Node& p) {
    auto it = programs_.find(&p);
    if (it == programs_.end()) {
      TOB_ASSIGN_OR_RETURN(FusedProgram prog, ReadFusedProgram(p));
      it = programs_.emplace(&p, std::move(prog)).first;
    }
    return &it->second;
  }

  Status Rewrite(Graph& graph, Node* consumer, const Choice& choice, const KeptValues& kept) {
    TOB_ASSIGN_OR_RETURN(FusedProgram cp, ReadFusedProgram(*consumer));
    std::unordered_map<int, const Candidate*> by_input;
    for (const Candidate& c : choice.values) by_input[c.input] = &c;

    // The consumer: its kept inputs, then the cones (each producer's instructions once, in its
    // program's order), then its own instructions.
    ProgramBuilder b;
    std::vector<Reg> creg(cp.num_inputs + cp.code.size());
    for (int i = 0; i < cp.num_inputs; ++i)
      if (!by_input.count(i)) creg[i] = {true, b.Input(consumer->input(i), cp.types[i])};
    std::map<Node*, std::set<int>> instructions;
    for (const Candidate& c : choice.values) instructions[c.producer].insert(c.cone.begin(), c.cone.end());
    // Producers in execution order, so that the copied code reads like the graph it came from.
    std::vector<Node*> producers;
    for (const auto& [p, ks] : instructions) producers.push_back(p);
    std::sort(producers.begin(), producers.end(), [&](Node* x, Node* y) { return pos_.at(x) < pos_.at(y); });
    std::vector<Reg> code_regs;  // Reg of each instruction written, by position in b.code
    std::map<std::pair<Node*, int>, Reg> preg;
    for (Node* p : producers) {
      TOB_ASSIGN_OR_RETURN(const FusedProgram* pp, ProgramOf(*p));
      auto reg_of = [&](int r) -> Reg {
        if (r < pp->num_inputs) return {true, b.Input(p->input(r), pp->types[r])};
        return preg.at({p, r});
      };
      for (int k : instructions[p]) {
        FusedInstruction ins = pp->code[k];
        std::array<Reg, 3> src{};
        for (int j = 0; j < ins.arity; ++j) src[j] = reg_of(ins.src[j]);
        Emit(b, ins, src, pp->types[pp->num_inputs + k]);
        preg[{p, pp->num_inputs + k}] = {false, static_cast<int>(b.code.size()) - 1};
      }
    }
    for (int i = 0; i < cp.num_inputs; ++i)
      if (by_input.count(i)) creg[i] = preg.at({by_input[i]->producer, by_input[i]->reg});
    for (size_t k = 0; k < cp.code.size(); ++k) {
      std::array<Reg, 3> src{};
      for (int j = 0; j < cp.code[k].arity; ++j) src[j] = creg[cp.code[k].src[j]];
      Emit(b, cp.code[k], src, cp.types[cp.num_inputs + k]);
      creg[cp.num_inputs + k] = {false, static_cast<int>(b.code.size()) - 1};
    }
    std::vector<Reg> outs;
    for (int r : cp.outputs) outs.push_back(creg[r]);
    const std::vector<Value*> consumer_outputs = consumer->outputs();
    TOB_RETURN_IF_ERROR(Replace(graph, consumer, b, outs, consumer_outputs));

    // Each producer: its outputs still read, and the instructions they need.
    for (Node* p : producers) {
      TOB_ASSIGN_OR_RETURN(const FusedProgram* pp, ProgramOf(*p));
      std::vector<Value*> still;
      std::vector<int> still_regs;
      for (size_t o = 0; o < p->outputs().size(); ++o) {
        Value* y = p->output(o);
        if (y->uses().empty() && !kept.Contains(y)) continue;
        still.push_back(y);
        still_regs.push_back(pp->outputs[o]);
      }
      if (still.empty()) {
        programs_.erase(p);
        TOB_RETURN_IF_ERROR(graph.RemoveNode(p));
        continue;
      }
      if (still.size() == p->outputs().size()) continue;
      std::set<int> needed;
      for (int r : still_regs) {
        const std::vector<int> cone = Cone(*pp, r);
        needed.insert(cone.begin(), cone.end());
      }
      ProgramBuilder pb;
      std::map<int, Reg> kreg;
      for (int k : needed) {
        FusedInstruction ins = pp->code[k];
        std::array<Reg, 3> src{};
        for (int j = 0; j < ins.arity; ++j) {
          const int r = ins.src[j];
          src[j] = r < pp->num_inputs ? Reg{true, pb.Input(p->input(r), pp->types[r])} : kreg.at(r);
        }
        Emit(pb, ins, src, pp->types[pp->num_inputs + k]);
        kreg[pp->num_inputs + k] = {false, static_cast<int>(pb.code.size()) - 1};
      }
      std::vector<Reg> pouts;
      for (int r : still_regs) pouts.push_back(kreg.at(r));
      programs_.erase(p);
      TOB_RETURN_IF_ERROR(Replace(graph, p, pb, pouts, still));
    }
    return Status::OK();
  }

  // Appends `ins` reading `src` (registers as Reg) with result type t. The operands are stored
  // as Reg in the instruction's src until Replace numbers them.
  static void Emit(ProgramBuilder& b, FusedInstruction ins, const std::array<Reg, 3>& src, DType t) {
    for (int j = 0; j < 3; ++j) ins.src[j] = j < ins.arity ? (src[j].input ? src[j].index : -2 - src[j].index) : -1;
    b.code.push_back(ins);
    b.code_types.push_back(t);
  }

  // A new FusedElementwise node for the program, in old's place, whose outputs (registers `outs`)
  // take over `replaced` (old's outputs, in order); old is removed.
  Status Replace(Graph& graph, Node* old, const ProgramBuilder& b, const std::vector<Reg>& outs,
                 const std::vector<Value*>& replaced) {
    const int n = static_cast<int>(b.inputs.size());
    auto number = [&](int encoded) { return encoded >= 0 ? encoded : n + (-2 - encoded); };
    std::vector<std::string> ops, input_names, output_names;
    std::vector<int64_t> operands, outputs, types;
    for (const Value* v : b.inputs) input_names.push_back(v->name());
    for (DType t : b.input_types) types.push_back(static_cast<int64_t>(t));
    for (size_t k = 0; k < b.code.size(); ++k) {
      const FusedInstruction& ins = b.code[k];
      ops.push_back(FusedOpName(ins.code));
      for (int j = 0; j < 3; ++j) operands.push_back(j < ins.arity ? number(ins.src[j]) : -1);
      types.push_back(static_cast<int64_t>(b.code_types[k]));
    }
    for (const Reg& r : outs) outputs.push_back(r.input ? r.index : n + r.index);
    for (const Value* y : replaced) output_names.push_back(graph.UniqueName(y->name() + "_remat"));
    AttributeMap attrs =
        FusedProgramAttributes(std::move(ops), std::move(operands), std::move(outputs), std::move(types));
    TOB_ASSIGN_OR_RETURN(Node * fresh, graph.AddNode(kFusedElementwiseOp, kTobDomain, input_names, output_names,
                                                     std::move(attrs), graph.UniqueName(old->name() + "_remat")));
    graph.PlaceLike(fresh, old);
    for (size_t o = 0; o < replaced.size(); ++o) {
      fresh->output(o)->set_type(replaced[o]->type());
      TOB_RETURN_IF_ERROR(graph.ReplaceAllUses(replaced[o], fresh->output(o)));
    }
    pos_[fresh] = pos_.at(old);
    programs_.erase(old);
    return graph.RemoveNode(old);
  }

  std::unordered_map<const Node*, int64_t> pos_;
  std::unordered_map<const Node*, FusedProgram> programs_;
  std::string summary_;
};

}  // namespace

std::unique_ptr<GraphPass> CreateElementwiseRematerializationPass() {
  return std::make_unique<ElementwiseRematerialization>();
}

}  // namespace tob
