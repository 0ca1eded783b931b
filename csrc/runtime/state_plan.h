// Session state (SessionOptions::state_updates): graph inputs bound to persistent tensors that a
// run may update. This file holds the two compile-time pieces, free of Session internals so they
// can be tested alone: checking the declared updates against the graph, and choosing, per update,
// whether the producing kernel writes the state's own memory (in place) or the update is copied
// into the state after the run, together with the step order that makes in-place writes safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace tob {

struct StateUpdate {
  std::string state_input;    // a graph input holding the state
  std::string update_output;  // a graph output holding the state's value after the run
};

// state_input is a graph input, update_output a graph output, their dtypes equal and their shapes
// compatible (same rank, equal known dims); no state input or update output is named twice.
// Called on the graph as the user gave it (before any pass). Errors name the entry and the value.
Status VerifyStateUpdates(const Graph& graph, const std::vector<StateUpdate>& updates);

// One step of the execution plan, as the scheduler sees it (slots are value indices).
struct ScheduleStep {
  std::string name;                          // the node's description, for the log
  std::vector<int> inputs;                   // slot per input, -1 when omitted
  std::vector<int> outputs;                  // slot per output
  std::vector<std::pair<int, int>> aliases;  // KernelDef::aliases: output may view input
  std::vector<std::pair<int, int>> inplace;  // KernelDef::inplace
  bool outputs_may_view_inputs = false;      // kernel-allocated outputs (ATen): any may be a view
};

struct ScheduledUpdate {
  int state_slot = -1;
  int update_slot = -1;
};

// How one update is carried out. writer_step >= 0: that step writes the state in place, its
// input `input` being the state and its output `output` the update. writer_step < 0: the update
// is copied into the state after the last step; `reason` says why it is not done in place.
struct StateWriter {
  int writer_step = -1;
  int input = -1;
  int output = -1;
  std::string reason;
};

struct StateSchedule {
  std::vector<int> order;            // new position -> old step index
  std::vector<StateWriter> writers;  // per update, indices into the new order
};

// An update is done in place when the producing step declares MayInplace(i, o) with input i the
// state and output o the update, reads the state through no other input, no value that may view
// the state (Reshape-like aliases, kernel-allocated outputs, transitively) is a graph output, and
// every other step reading the state or such a view can run before the writer. The order keeps
// every step that neither writes a state in place nor depends on such a write first, in the
// original order; the in-place writers and everything downstream of them run last.
StateSchedule ScheduleStateUpdates(const std::vector<ScheduleStep>& steps, int num_slots,
                                   const std::vector<bool>& is_graph_output,
                                   const std::vector<ScheduledUpdate>& updates);

}  // namespace tob
