#include "runtime/state_plan.h"

#include <algorithm>
#include <map>
#include <queue>
#include <set>

namespace tob {

namespace {

std::string NameList(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s.empty() ? "(none)" : s;
}

bool ShapesCompatible(const ValueType& a, const ValueType& b) {
  if (!a.has_rank() || !b.has_rank()) return true;
  if (a.rank() != b.rank()) return false;
  for (size_t d = 0; d < a.shape->size(); ++d) {
    const Dim& x = (*a.shape)[d];
    const Dim& y = (*b.shape)[d];
    if (x.is_known() && y.is_known() && x.value != y.value) return false;
  }
  return true;
}

}  // namespace

Status VerifyStateUpdates(const Graph& graph, const std::vector<StateUpdate>& updates) {
  std::map<std::string, size_t> state_entry, update_entry;
  std::vector<std::string> input_names;
  for (const Value* v : graph.inputs()) input_names.push_back(v->name());
  for (size_t i = 0; i < updates.size(); ++i) {
    const StateUpdate& u = updates[i];
    const std::string entry = StrCat("state_updates[", i, "] ('", u.state_input, "' <- '", u.update_output, "')");
    const Value* state = nullptr;
    for (const Value* v : graph.inputs())
      if (v->name() == u.state_input) state = v;
    if (state == nullptr) {
      const Value* v = graph.FindValue(u.state_input);
      if (v != nullptr && v->initializer() != nullptr)
        return InvalidArgument(entry, ": '", u.state_input,
                               "' is an initializer (a constant of the model), not a graph input; state must be a "
                               "graph input");
      return InvalidArgument(entry, ": '", u.state_input, "' is not a graph input; the graph inputs are ",
                             NameList(input_names));
    }
    const auto& out_names = graph.output_names();
    auto out_it = std::find(out_names.begin(), out_names.end(), u.update_output);
    if (out_it == out_names.end()) {
      if (graph.FindValue(u.update_output) != nullptr)
        return InvalidArgument(entry, ": '", u.update_output,
                               "' is not a graph output; an update must be a graph output (that keeps the nodes "
                               "computing it alive)");
      return InvalidArgument(entry, ": the graph has no value '", u.update_output, "'; the graph outputs are ",
                             NameList(out_names));
    }
    const ValueType& want = state->type();
    const ValueType& got = graph.outputs()[out_it - out_names.begin()]->type();
    if (want.dtype != DType::kUndefined && got.dtype != DType::kUndefined && want.dtype != got.dtype)
      return InvalidArgument(entry, ": the state is ", want.ToString(), " but the update is ", got.ToString(),
                             "; their dtypes must be equal");
    if (!ShapesCompatible(want, got))
      return InvalidArgument(entry, ": the state is ", want.ToString(), " but the update is ", got.ToString(),
                             "; their shapes must agree");
    if (auto [it, fresh] = state_entry.emplace(u.state_input, i); !fresh)
      return InvalidArgument(entry, ": state '", u.state_input, "' is already updated by state_updates[", it->second,
                             "]; a state is updated at most once per run");
    if (auto [it, fresh] = update_entry.emplace(u.update_output, i); !fresh)
      return InvalidArgument(entry, ": output '", u.update_output, "' is already the update of state_updates[",
                             it->second, "]; each state needs its own update output");
  }
  return Status::OK();
}

namespace {

// The steps that read each slot, and the step producing it (-1: a graph input or constant).
struct Dataflow {
  std::vector<std::vector<int>> readers;
  std::vector<int> producer;

  Dataflow(const std::vector<ScheduleStep>& steps, int num_slots) : readers(num_slots), producer(num_slots, -1) {
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      for (int s : steps[i].inputs)
        if (s >= 0 && (readers[s].empty() || readers[s].back() != i)) readers[s].push_back(i);
      for (int s : steps[i].outputs) producer[s] = i;
    }
  }
};

// The slot and every value that may share its memory: outputs of Reshape-like aliases of it and
// everything a kernel-allocating step (ATen: torch may return a view) produces from it.
std::vector<int> MayViewSlot(const std::vector<ScheduleStep>& steps, const Dataflow& flow, int slot) {
  std::vector<int> views{slot};
  std::set<int> seen{slot};
  for (size_t k = 0; k < views.size(); ++k) {
    const int v = views[k];
    for (int r : flow.readers[v]) {
      const ScheduleStep& step = steps[r];
      for (size_t o = 0; o < step.outputs.size(); ++o) {
        bool view = step.outputs_may_view_inputs;
        for (const auto& [ai, ao] : step.aliases)
          view =
              view || (ao == static_cast<int>(o) && ai < static_cast<int>(step.inputs.size()) && step.inputs[ai] == v);
        if (view && seen.insert(step.outputs[o]).second) views.push_back(step.outputs[o]);
      }
    }
  }
  return views;
}

// Whether `to` is reachable from `from` along data edges and the ordering edges added so far.
bool Reaches(const std::vector<ScheduleStep>& steps, const Dataflow& flow,
             const std::vector<std::vector<int>>& extra_edges, int from, int to) {
  std::vector<bool> seen(steps.size(), false);
  std::vector<int> stack{from};
  seen[from] = true;
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    if (s == to) return true;
    auto visit = [&](int next) {
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    };
    for (int out : steps[s].outputs)
      for (int r : flow.readers[out]) visit(r);
    for (int next : extra_edges[s]) visit(next);
  }
  return false;
}

}  // namespace

StateSchedule ScheduleStateUpdates(const std::vector<ScheduleStep>& steps, int num_slots,
                                   const std::vector<bool>& is_graph_output,
                                   const std::vector<ScheduledUpdate>& updates) {
  const int n = static_cast<int>(steps.size());
  const Dataflow flow(steps, num_slots);
  std::vector<std::vector<int>> extra_edges(n);  // reader -> in-place writer of what it reads
  StateSchedule result;
  result.writers.resize(updates.size());

  for (size_t u = 0; u < updates.size(); ++u) {
    StateWriter& w = result.writers[u];
    const int state = updates[u].state_slot;
    // Walk back from the update to the state through producers that compute in place.
    std::vector<InplaceLink> links;
    std::vector<int> consumed;  // per link: the value whose memory it writes
    for (int value = updates[u].update_slot; value != state && w.reason.empty();) {
      const int p = flow.producer[value];
      if (p < 0) {
        w.reason = "the update is not computed by a node from the state";
        break;
      }
      InplaceLink link;
      for (const auto& [i, o] : steps[p].inplace)
        if (link.step < 0 && o < static_cast<int>(steps[p].outputs.size()) && steps[p].outputs[o] == value &&
            i < static_cast<int>(steps[p].inputs.size()) && steps[p].inputs[i] >= 0)
          link = {p, i, o};
      if (link.step < 0 || static_cast<int>(links.size()) >= n) {
        w.reason = StrCat(steps[p].name, " does not compute this output in place from the state");
        break;
      }
      links.insert(links.begin(), link);
      value = steps[p].inputs[link.input];
      consumed.insert(consumed.begin(), value);
    }
    if (links.empty() && w.reason.empty()) w.reason = "the update output is the state input itself";
    // Each link overwrites the value it consumes: every other reader of that value (or of a view
    // of it) must be able to run before it, and none may be a graph output.
    std::vector<std::pair<int, int>> edges;  // reader -> link step
    for (size_t k = 0; k < links.size() && w.reason.empty(); ++k) {
      const ScheduleStep& writer = steps[links[k].step];
      for (int v : MayViewSlot(steps, flow, consumed[k])) {
        if (is_graph_output[v]) {
          w.reason =
              "the state (or a value in its memory, or a view of one) is also a graph output, which must "
              "show the value before the update";
          break;
        }
        for (int r : flow.readers[v]) {
          if (r != links[k].step) {
            edges.emplace_back(r, links[k].step);
            continue;
          }
          for (size_t in = 0; in < writer.inputs.size(); ++in)
            if (writer.inputs[in] == v && static_cast<int>(in) != links[k].input)
              w.reason = StrCat(writer.name, " also reads the value it overwrites through input ", in);
        }
      }
    }
    // Added one at a time, each checked against the ones before it: an edge that closes a cycle
    // (the reader depends on the write) takes this update back to the copy.
    size_t added = 0;
    for (; added < edges.size() && w.reason.empty(); ++added) {
      const auto [r, p] = edges[added];
      if (Reaches(steps, flow, extra_edges, p, r)) {
        w.reason = StrCat(steps[r].name, " reads the state's old value but depends on ", steps[p].name);
        break;
      }
      extra_edges[r].push_back(p);
    }
    if (!w.reason.empty()) {
      while (added-- > 0) extra_edges[edges[added].first].pop_back();
      continue;
    }
    w.links = std::move(links);
  }

  // Steps downstream of an in-place writer (the writers included) run after all others.
  std::vector<bool> deferred(n, false);
  std::vector<int> stack;
  for (const StateWriter& w : result.writers)
    for (const InplaceLink& link : w.links)
      if (!deferred[link.step]) {
        deferred[link.step] = true;
        stack.push_back(link.step);
      }
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    auto visit = [&](int next) {
      if (!deferred[next]) {
        deferred[next] = true;
        stack.push_back(next);
      }
    };
    for (int out : steps[s].outputs)
      for (int r : flow.readers[out]) visit(r);
    for (int next : extra_edges[s]) visit(next);
  }
  // Nothing outside the deferred set depends on it, so the others keep their (topological)
  // order; the deferred steps follow in a topological order of data and ordering edges,
  // earliest original position first.
  std::vector<std::set<int>> successors(n);
  std::vector<int> pending(n, 0);
  for (int s = 0; s < n; ++s) {
    if (!deferred[s]) continue;
    for (int out : steps[s].outputs) successors[s].insert(flow.readers[out].begin(), flow.readers[out].end());
    successors[s].insert(extra_edges[s].begin(), extra_edges[s].end());
    for (int next : successors[s]) ++pending[next];
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int s = 0; s < n; ++s) {
    if (!deferred[s]) result.order.push_back(s);
    else if (pending[s] == 0) ready.push(s);
  }
  while (!ready.empty()) {
    const int s = ready.top();
    ready.pop();
    result.order.push_back(s);
    for (int next : successors[s])
      if (--pending[next] == 0) ready.push(next);
  }
  TOB_ENFORCE(static_cast<int>(result.order.size()) == n, "state schedule lost steps (a cycle)");

  std::vector<int> position(n);
  for (int k = 0; k < n; ++k) position[result.order[k]] = k;
  for (StateWriter& w : result.writers)
    for (InplaceLink& link : w.links) link.step = position[link.step];
  return result;
}

}  // namespace tob
