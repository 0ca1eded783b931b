// A graph pass is a small named object: Status Run(Graph&, PassContext&, bool* changed).
// The pipeline (optimizer/pipeline.cc) is one plain, ordered list of passes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "framework/kernel_registry.h"
#include "ir/graph.h"
#include "ops/op_schema.h"

namespace tob {

// Graph optimisation levels, as in onnxruntime's GraphOptimizationLevel.
enum class OptLevel : int { kDisableAll = 0, kBasic = 1, kExtended = 2, kAll = 99 };

struct PassContext {
  const OpSchemaRegistry* schemas = &OpSchemaRegistry::Global();
  const KernelRegistry* kernels = &KernelRegistry::Global();
  // Provider whose kernels evaluate constant subgraphs during folding.
  std::string fold_provider = kCpuProvider;
  // Verify the graph (VerifyGraph, optimizer/verifier.cc) after every pass that changed it.
  bool verify_after_each_pass = false;
  // Receives one line per applied pass ("ConstantFolding: folded 3 nodes"); may be empty.
  std::function<void(const std::string&)> log;
  // Names of graph values that must survive (graph outputs are always kept).
  std::vector<std::string> keep_values;
  // ElementwiseFusion makes ai.tob nodes that only the CPU provider runs: the session turns it off
  // when a device provider (CUDA) would have run their nodes.
  bool elementwise_fusion = true;
};

// Cast propagation (optimizer/propagate_cast_ops.cc), onnxruntime-training's PropagateCastOps:
// moves the Casts between float32 and a low-precision float type across ops that compute as well
// in the low type. Strategy values are the reference's (flags: kInsertAndReduce | kFloodFill).
struct CastPropagationOptions {
  enum class Strategy : int { kNone = 0, kInsertAndReduce = 1, kFloodFill = 2 };
  Strategy strategy = Strategy::kFloodFill;
  // -1: off; 0: only the `allow` ops; 1 and 2: the reference's op sets of that level, and `allow`.
  int level = -1;
  std::vector<std::string> allow;
  DType low_precision = DType::kFloat16;  // float16 or bfloat16
  bool enabled() const { return level >= 0; }
};

class GraphPass {
 public:
  virtual ~GraphPass() = default;
  virtual const char* name() const = 0;
  virtual Status Run(Graph& graph, PassContext& ctx, bool* changed) = 0;
  // What the last Run changed, for PassManager::applied() and logs ("folded 3 nodes").
  virtual std::string summary() const { return "changed the graph"; }
  // Whether the pass manager also runs the pass on every subgraph (If branches, Loop and Scan
  // bodies), after the graph that holds it, with no keep_values. Every pass is written for one
  // graph at a time: values a subgraph reads from outside are implicit inputs of its node, so no
  // pass removes them, and Graph::ReplaceAllUses re-points the subgraph when one is replaced. A
  // pass that cannot work on a subgraph says false.
  virtual bool applies_to_subgraphs() const { return true; }
};

class PassManager {
 public:
  void Add(std::unique_ptr<GraphPass> pass) { passes_.push_back(std::move(pass)); }
  // Runs the passes in order, repeating the list until nothing changes (at most max_rounds). Each
  // pass runs on the graph and then on its subgraphs, recursively (GraphPass::applies_to_subgraphs).
  Status Run(Graph& graph, PassContext& ctx, int max_rounds = 4);
  // "pass: changed" lines from the last Run, in order.
  const std::vector<std::string>& applied() const { return applied_; }
  const std::vector<std::unique_ptr<GraphPass>>& passes() const { return passes_; }

 private:
  // One pass on `graph`, then on the subgraphs below it; one applied() line per graph it changed.
  Status RunPass(GraphPass& pass, Graph& graph, PassContext& ctx, bool* changed);

  std::vector<std::unique_ptr<GraphPass>> passes_;
  std::vector<std::string> applied_;
};

// The standard pipeline for a level (optimizer/pipeline.cc), with cast propagation when
// `casts` enables it (at any level but kDisableAll).
PassManager BuildPipeline(OptLevel level, const CastPropagationOptions& casts = {});

// Fills every value's ValueType from the op schemas (static, symbolic dims allowed), subgraphs
// included. With defer_subgraph_errors, an error inferring the inside of a subgraph does not fail:
// the subgraph keeps what was inferred (and its declared types) and the error returns at the next
// strict inference unless optimisation removed the subgraph first (the branch of an If whose
// condition folds to a constant, never run, may be ill-typed: onnx's AffineGrid body has one).
// Errors of the control-flow node itself (a branch with the wrong output count) always fail.
Status InferShapes(Graph& graph, const OpSchemaRegistry& schemas, bool defer_subgraph_errors = false);

// Structural checks: every node input defined, single producer, no cycle, known schema and arity,
// graph outputs defined. Names the offending node/value.
Status VerifyGraph(const Graph& graph, const OpSchemaRegistry& schemas);

}  // namespace tob
