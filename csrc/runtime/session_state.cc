// Session state: binding graph inputs to persistent tensors, planning how each declared update
// reaches its state (runtime/state_plan.h), and the writes after a run. The guarantees are in
// docs/architecture.md, "State values".
#include <algorithm>
#include <cstring>
#include <mutex>

#include "runtime/session.h"

namespace tob {

namespace {

bool SharesMemory(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0) return false;
  const char* p = static_cast<const char*>(a.raw_data());
  const char* q = static_cast<const char*>(b.raw_data());
  return p < q + b.nbytes() && q < p + a.nbytes();
}

}  // namespace

Status Session::BindState(const std::string& input_name, Tensor t) {
  std::lock_guard<std::mutex> lock(run_mu_);
  const int idx = FindInput(input_name);
  if (idx < 0) {
    std::string names;
    for (const auto& io : input_info_) names += (names.empty() ? "" : ", ") + io.name + " " + io.type.ToString();
    return InvalidArgument("BindState: unknown input '", input_name, "'; the model's inputs are: ", names);
  }
  if (!t.defined()) return InvalidArgument("BindState: state '", input_name, "' is given an undefined tensor");
  TOB_RETURN_IF_ERROR(CheckInput(idx, "state", t, nullptr));
  bound_states_[idx] = std::move(t);
  return Status::OK();
}

StatusOr<Tensor> Session::State(const std::string& input_name) const {
  std::lock_guard<std::mutex> lock(run_mu_);
  const int idx = FindInput(input_name);
  if (idx < 0 || !bound_states_[idx].defined()) {
    std::string bound;
    for (size_t i = 0; i < bound_states_.size(); ++i)
      if (bound_states_[i].defined()) bound += (bound.empty() ? "'" : ", '") + input_info_[i].name + "'";
    return InvalidArgument(idx < 0 ? "unknown input '" : "input '", input_name, idx < 0 ? "'" : "' has no bound state",
                           "; the bound states are ", bound.empty() ? "(none)" : bound);
  }
  return bound_states_[idx];
}

std::vector<std::string> Session::BoundStates() const {
  std::lock_guard<std::mutex> lock(run_mu_);
  std::vector<std::string> names;
  for (size_t i = 0; i < bound_states_.size(); ++i)
    if (bound_states_[i].defined()) names.push_back(input_info_[i].name);
  return names;
}

Status Session::PlanStateUpdates() {
  for (Step& step : steps_) {
    step.inplace_update.assign(step.outputs.size(), -1);
    step.inplace_input.assign(step.outputs.size(), -1);
  }
  if (options_.state_updates.empty()) return Status::OK();
  const Graph& g = *graph_;
  std::vector<ScheduledUpdate> updates;
  for (const StateUpdate& u : options_.state_updates) {
    PlannedUpdate p;
    const int idx = FindInput(u.state_input);
    auto out = std::find(g.output_names().begin(), g.output_names().end(), u.update_output);
    if (idx < 0 || static_cast<size_t>(idx) >= input_slots_.size() || out == g.output_names().end())
      return InvalidArgument("state update '", u.state_input, "' <- '", u.update_output,
                             "': the optimized graph lost the input or the output");
    p.input_index = static_cast<size_t>(idx);
    p.state_slot = input_slots_[idx];
    p.update_slot = output_slots_[out - g.output_names().begin()];
    planned_updates_.push_back(p);
    updates.push_back({p.state_slot, p.update_slot});
  }

  std::vector<ScheduleStep> view(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    view[i].name = step.node->Describe();
    view[i].inputs = step.inputs;
    view[i].outputs = step.outputs;
    view[i].aliases = step.def->aliases;
    view[i].inplace = step.def->inplace;
    view[i].outputs_may_view_inputs = step.def->kernel_allocates_outputs;
  }
  std::vector<bool> is_graph_output(slot_values_.size(), false);
  for (int s : output_slots_) is_graph_output[s] = true;
  const StateSchedule schedule =
      ScheduleStateUpdates(view, static_cast<int>(slot_values_.size()), is_graph_output, updates);

  std::vector<Step> reordered;
  reordered.reserve(steps_.size());
  for (int old : schedule.order) reordered.push_back(std::move(steps_[old]));
  steps_ = std::move(reordered);
  for (size_t u = 0; u < planned_updates_.size(); ++u) {
    const StateWriter& w = schedule.writers[u];
    const StateUpdate& declared = options_.state_updates[u];
    if (w.in_place()) {
      std::string by;
      for (const InplaceLink& link : w.links) {
        steps_[link.step].inplace_update[link.output] = static_cast<int>(u);
        steps_[link.step].inplace_input[link.output] = link.input;
        by += StrCat(by.empty() ? "" : ", then ", steps_[link.step].node->Describe(), " (step ", link.step, ")");
      }
      planned_updates_[u].first_writer = w.links.front().step;  // the chain runs in order
      log_.push_back(StrCat("state '", declared.state_input, "': updated in place by ", by));
    } else {
      log_.push_back(StrCat("state '", declared.state_input, "': '", declared.update_output,
                            "' copied in after the run (", w.reason, ")"));
    }
  }
  return Status::OK();
}

// A run that fails after an in-place writer ran has changed that state: say so.
Status Session::StateFailure(Status failed, size_t failed_step) const {
  std::string written;
  for (size_t u = 0; u < planned_updates_.size(); ++u) {
    const int w = planned_updates_[u].first_writer;
    if (w >= 0 && static_cast<size_t>(w) < failed_step && bound_states_[planned_updates_[u].input_index].defined())
      written += (written.empty() ? "'" : ", '") + options_.state_updates[u].state_input + "'";
  }
  if (written.empty()) return Status(failed.code(), StrCat(failed.message(), " (no session state was changed)"));
  return Status(failed.code(),
                StrCat(failed.message(), " (states ", written, " were already updated in place by earlier steps)"));
}

// After the last step: the updates not written in place are copied into their states. All are
// checked before any is written, and fetched outputs that view a state about to be overwritten
// are copied first, so every fetch shows the value the run computed.
Status Session::WriteBackStates(std::vector<RuntimeValue>& slots, std::vector<RuntimeValue>* fetches) {
  std::vector<std::pair<const Tensor*, Tensor*>> copies;  // (update, state)
  for (size_t u = 0; u < planned_updates_.size(); ++u) {
    const PlannedUpdate& p = planned_updates_[u];
    if (p.first_writer >= 0) continue;
    const StateUpdate& declared = options_.state_updates[u];
    Tensor& state = bound_states_[p.input_index];
    if (!state.defined()) continue;  // fed, not bound: nothing persists
    const Tensor& update = slots[p.update_slot].tensor();
    if (!update.defined())
      return RuntimeError("state '", declared.state_input, "': its update '", declared.update_output,
                          "' was not computed; no state was changed");
    if (update.dtype() != state.dtype() || update.shape() != state.shape())
      return RuntimeError("state '", declared.state_input, "' is ", DTypeName(state.dtype()),
                          ShapeToString(state.shape()), " but its update '", declared.update_output, "' is ",
                          DTypeName(update.dtype()), ShapeToString(update.shape()), "; no state was changed");
    if (update.device().type != DeviceType::kCPU)
      return RuntimeError("state '", declared.state_input, "': its update '", declared.update_output, "' is on ",
                          update.device().ToString(), ", not on the host; no state was changed");
    copies.emplace_back(&update, &state);
  }
  for (RuntimeValue& fetched : *fetches) {
    if (!fetched.is_tensor()) continue;
    Tensor& f = fetched.mutable_tensor();
    bool views_state = false;
    for (const auto& [update, state] : copies)
      views_state = views_state || (!f.SharesDataWith(*update) && SharesMemory(f, *state));
    if (!views_state) continue;
    TOB_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(f.dtype(), f.shape(), CpuAllocator::Default()));
    CopyTensorData(f, copy);
    f = std::move(copy);
  }
  for (const auto& [update, state] : copies) CopyTensorData(*update, *state);
  return Status::OK();
}

}  // namespace tob
