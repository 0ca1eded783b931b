// A canonical text form of a Graph, for golden pass tests and debug dumps.
//
//   graph(x: float32[batch, 4]) {
//     const w: float32[4] = [1, 2, 3, 4]
//     %0 = Add(x, w)
//     y = Relu(%0) @CPUExecutionProvider
//     return y
//   }
//
// Nodes come in a canonical topological order (a post-order walk from the graph outputs, inputs
// visited left to right, then nodes nothing depends on in insertion order), so two graphs with
// the same structure print the same text whatever order their nodes were added in.
#pragma once

#include <string>

#include "ir/graph.h"

namespace tob {

struct GraphTextOptions {
  // Intermediate values print as %0, %1, ... in definition order and node names are omitted, so
  // that the text depends only on structure (golden tests). Off: real names (debug dumps).
  bool canonical_names = true;
  // Append each node output's static type ("%0: float32[batch, 4]").
  bool show_types = false;
  // Constants with at most this many elements print their values; larger ones print a summary.
  int max_constant_elements = 16;
};

std::string GraphToText(const Graph& graph, const GraphTextOptions& options);
std::string GraphToText(const Graph& graph);

}  // namespace tob
