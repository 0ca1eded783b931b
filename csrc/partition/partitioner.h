// The partitioner: every node to the first execution provider (in priority order) that can run
// it, and device copies where an edge crosses devices.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "framework/execution_provider.h"
#include "framework/kernel_registry.h"
#include "ir/graph.h"

namespace tob {

// Per-graph partition summary: which provider got each node, and why nodes fell to a later one.
struct PartitionReport {
  struct Entry {
    std::string node, op_type, provider;
    std::string why_not_earlier;  // reasons earlier providers declined
  };
  std::vector<Entry> nodes;
  int copies_inserted = 0;
  std::string ToString() const;
};

// Assigns every node to the first provider (in priority order) that can run it, then inserts
// MemcpyFromHost / MemcpyToHost nodes (domain com.microsoft) where an edge crosses devices.
// kNotImplemented naming op, domain and opset when no provider can run a node.
Status PartitionGraph(Graph& graph, const std::vector<const ExecutionProvider*>& providers,
                      const KernelRegistry& registry, PartitionReport* report);

}  // namespace tob
