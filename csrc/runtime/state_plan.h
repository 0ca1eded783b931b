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

// One step writing a state's memory: its input `input` holds (a value in) the state's memory and
// its output `output` is written over it.
struct InplaceLink {
  int step = -1;
  int input = -1;
  int output = -1;
};

// How one update is carried out. In place: `links` (from the state to the update) are the steps
// that write the state's memory, each from the previous one's output (InPlaceAccumulator then
// ZeroGradient, say; one link in the common case). Otherwise `links` is empty, the update is
// copied into the state after the last step and `reason` says why.
struct StateWriter {
  std::vector<InplaceLink> links;
  std::string reason;
  bool in_place() const { return !links.empty(); }
};

struct StateSchedule {
  std::vector<int> order;            // new position -> old step index
  std::vector<StateWriter> writers;  // per update, indices into the new order
};

// An update is done in place when it is reached from the state through producers that declare
// MayInplace(i, o) for the value they consume (a chain of links; usually one), and for each link:
// the step reads that value through no other input, no value that may share its memory
// (Reshape-like aliases, kernel-allocated outputs, transitively) is a graph output, and every
// other step reading it or such a view can run before the link. The order keeps every step that
// neither writes a state in place nor depends on such a write first, in the original order; the
// in-place writers and everything downstream of them run last.
StateSchedule ScheduleStateUpdates(const std::vector<ScheduleStep>& steps, int num_slots,
                                   const std::vector<bool>& is_graph_output,
                                   const std::vector<ScheduledUpdate>& updates);

}  // namespace tob
