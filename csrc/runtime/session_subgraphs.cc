// The session's side of control flow: the nested session planned for each subgraph of a step
// (If, Loop, Scan, SequenceMap bodies; FlexAttention's modifiers), which shares the enclosing
// session's providers, thread pool and profiler, and RunNested, which a control-flow kernel calls
// through its BoundSubgraph with the formal inputs followed by the values of enclosing graphs.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "memory/arena_pool.h"
#include "runtime/bound_subgraph.h"
#include "runtime/session.h"

namespace tob {

StatusOr<std::unique_ptr<Session>> Session::CreateNested(Graph& sub) const {
  std::unique_ptr<Session> s(new Session());
  ArenaPool::Global().AddUser();  // ~Session removes it
  s->options_ = options_;
  s->options_.state_updates.clear();
  s->graph_ = &sub;
  s->nested_ = true;
  s->pool_ = pool_;
  s->providers_ = providers_;
  s->profiler_ = profiler_;
  // Feeds: the formal inputs, then the values of enclosing graphs (RunNested).
  // A feed that is a sequence is checked for its kind and element type only: a Loop body's
  // declaration of a loop-carried value says only the dtype (InferCarried), and the tensors a
  // sequence gathers across iterations may differ in shape (onnx's own test_loop16_seq_none
  // declares rank 0 and carries [1], [2], ...; an If inside reads that value from its enclosing
  // body). Sequences are not planned by shape (their tensors live outside the arena), so nothing
  // downstream relies on their element shapes.
  auto feed_info = [](const Value* v) {
    ValueType t = v->type();
    if (t.kind == ValueKind::kSequence) t.shape.reset();
    return IOInfo{v->name(), std::move(t)};
  };
  for (const Value* v : sub.inputs()) s->input_info_.push_back(feed_info(v));
  for (const Value* v : sub.outer_scope_values()) s->input_info_.push_back(feed_info(v));
  for (size_t i = 0; i < sub.outputs().size(); ++i)
    s->output_info_.push_back({sub.output_names()[i], sub.outputs()[i]->type()});
  s->bound_states_.assign(s->input_info_.size(), Tensor());
  Status st = s->BuildPlan();
  if (!st.ok()) return st.WithContext("planning " + sub.Describe());
  return s;
}

Status Session::PlanSubgraphs(Step& step) {
  const Node& node = *step.node;
  for (Graph* sub : node.subgraphs()) {
    TOB_ASSIGN_OR_RETURN(std::unique_ptr<Session> nested, CreateNested(*sub));
    std::vector<int> outer;
    for (const Value* v : sub->outer_scope_values()) {
      auto it = std::find(node.implicit_inputs().begin(), node.implicit_inputs().end(), v->outer());
      TOB_ENFORCE(it != node.implicit_inputs().end(), sub->Describe(), " reads '", v->name(),
                  "', which is not an implicit input of its node");
      outer.push_back(static_cast<int>(step.num_inputs + (it - node.implicit_inputs().begin())));
    }
    for (const std::string& line : nested->log_) log_.push_back(sub->Describe() + ": " + line);
    step.subgraphs.push_back(std::move(nested));
    step.subgraph_outer.push_back(std::move(outer));
  }
  return Status::OK();
}

Status Session::RunNested(std::vector<RuntimeValue> feeds, std::vector<RuntimeValue>* fetches,
                          size_t* peak_live_bytes) {
  TOB_ENFORCE(nested_, "RunNested on the session of a main graph");
  if (feeds.size() != input_slots_.size())
    return InvalidArgument(graph_->Describe(), ": got ", feeds.size(), " feeds; it takes ", input_slots_.size(),
                           " (its inputs and the values it reads from enclosing graphs)");
  std::lock_guard<std::mutex> lock(run_mu_);
  const int64_t t0 = profiler_->NowUs();
  std::vector<RuntimeValue> slots = constants_;
  std::string signature;
  std::unordered_map<std::string, int64_t> symbols;
  for (size_t i = 0; i < feeds.size(); ++i) {
    Status st = BindPositional(i, std::move(feeds[i]), slots, &symbols, &signature);
    if (!st.ok()) return st.WithContext("feeding " + graph_->Describe());
  }
  RunStats stats;
  fetches->clear();
  Status st = RunBound(slots, signature, output_slots_, fetches, &stats, t0, {});
  if (!st.ok()) return st.WithContext("in " + graph_->Describe());
  if (peak_live_bytes != nullptr) *peak_live_bytes = stats.peak_live_bytes;
  // A constant handed out (itself, or as a tensor of a sequence) would let the caller write into
  // the subgraph's constants: such tensors are copied.
  auto own = [this](const Tensor& t) -> StatusOr<std::optional<Tensor>> {
    for (const RuntimeValue& c : constants_) {
      if (!c.is_tensor() || !t.SharesDataWith(c.tensor())) continue;
      TOB_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(t.dtype(), t.shape(), CpuAllocator::Default()));
      CopyTensorData(t, copy);
      return std::optional<Tensor>(std::move(copy));
    }
    return std::optional<Tensor>();
  };
  for (RuntimeValue& v : *fetches) {
    if (v.is_tensor()) {
      TOB_ASSIGN_OR_RETURN(std::optional<Tensor> copy, own(v.tensor()));
      if (copy) v = std::move(*copy);
    } else if (v.is_sequence()) {
      const TensorSequence& seq = v.sequence();
      std::vector<Tensor> tensors;
      bool copied = false;
      for (const Tensor& t : seq.tensors) {
        TOB_ASSIGN_OR_RETURN(std::optional<Tensor> copy, own(t));
        copied = copied || copy.has_value();
        tensors.push_back(copy ? std::move(*copy) : t);
      }
      if (copied) v = RuntimeValue::OfSequence(seq.dtype, std::move(tensors));
    }
  }
  return Status::OK();
}

std::vector<const SubgraphRunner*> Session::BindSubgraphs(const Step& step, const std::vector<RuntimeValue>& slots,
                                                          std::vector<BoundSubgraph>* bound) const {
  bound->clear();
  bound->reserve(step.subgraphs.size());
  for (size_t k = 0; k < step.subgraphs.size(); ++k) {
    std::vector<RuntimeValue> outer;
    for (int i : step.subgraph_outer[k]) outer.push_back(slots[step.inputs[i]]);
    bound->emplace_back(step.subgraphs[k].get(), std::move(outer));
  }
  std::vector<const SubgraphRunner*> runners;
  for (const BoundSubgraph& b : *bound) runners.push_back(&b);
  return runners;
}

}  // namespace tob
