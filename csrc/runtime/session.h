// Session: the compiled form of one graph. Create() verifies, infers shapes, optimises,
// partitions across providers and builds the kernels and the execution plan once; Run() binds
// feeds, executes the plan sequentially and returns the fetches. Each subgraph (If, Loop, Scan)
// gets a nested Session of its own, built once with the parent (same providers, pool, options):
// a control-flow kernel runs it as a SubgraphRunner, its feeds being the subgraph's formal inputs
// followed by the values it reads from enclosing graphs (the node's implicit inputs).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "framework/kernel_registry.h"
#include "framework/runtime_value.h"
#include "framework/thread_pool.h"
#include "ir/graph.h"
#include "memory/buffer_plan.h"
#include "memory/live_bytes.h"
#include "memory/run_allocator.h"
#include "optimizer/pass.h"
#include "partition/partitioner.h"
#include "runtime/profiler.h"
#include "runtime/state_plan.h"

namespace tob {

class BoundSubgraph;

struct SessionOptions {
  int intra_op_threads = 0;  // 0: follow the process's intra-op runtime (torch's), else all hardware threads
  OptLevel optimization_level = OptLevel::kAll;
  bool enable_profiling = false;
  std::string profile_file_prefix = "tob_profile";
  bool enable_memory_pattern = true;  // plan and reuse one arena per input-shape signature
  // After each run, free the run's arena and every free arena of the process's pool instead of
  // keeping the largest for the next run (memory/arena_pool.h): memory between runs goes back to
  // the system, at the cost of the next run's page faults (the backward of a training step when
  // memory matters more than step time, docs/memory_optimizer.md).
  bool release_arena_after_run = false;
  bool verify_each_pass = false;
  // Cast propagation (optimizer/propagate_cast_ops.cc); off unless level >= 0.
  CastPropagationOptions propagate_cast_ops;
  // ATen nodes may call any torch operator, not only the allow-list of pure tensor operators
  // (csrc/providers/torch/aten_op_policy.inc): only for graphs trusted like code, such as the ones
  // this process's own exporter made (docs/security.md). Never read from the model.
  bool allow_unsafe_aten_ops = false;
  std::vector<std::string> providers;  // priority order; CPU is always the last resort
  // Session state: after each successful run, state_input (a graph input bound with BindState)
  // holds the value of update_output (a graph output), in the bound tensor's own memory.
  std::vector<StateUpdate> state_updates;
};

struct RunStats {
  size_t peak_bytes = 0;  // most bytes of intermediates and scratch live at once
  // Most bytes the run held at once: intermediates, scratch, tensors kernels allocated themselves
  // and the graph outputs made so far (graph inputs, states and constants are the caller's).
  size_t peak_live_bytes = 0;
  // Most bytes the run made the process hold at once: peak_live_bytes with the planned arena
  // counted whole, whatever its buffers hold at the time (its pages stay resident from their first
  // touch to the end of the run). Equal to peak_live_bytes for an unplanned run.
  size_t peak_held_bytes = 0;
  size_t arena_bytes = 0;  // size of the planned arena (0 for an unplanned run)
  bool planned = false;    // this run used a memory plan recorded by an earlier run
  int64_t plan_misses = 0;
  // Constants the kernels keep in their own layout for the session's lifetime (OpKernel::PrePack,
  // GEMM weights in panels): held besides the initializers, not part of the peaks above.
  size_t prepacked_bytes = 0;
  int64_t prepacked_constants = 0;
};

struct IOInfo {
  std::string name;
  ValueType type;
};

class Session {
 public:
  static StatusOr<std::unique_ptr<Session>> Create(std::unique_ptr<Graph> graph, SessionOptions options);
  ~Session();

  const std::vector<IOInfo>& inputs() const { return input_info_; }
  const std::vector<IOInfo>& outputs() const { return output_info_; }

  // fetch_names empty: all graph outputs in order. Errors name the offending feed or fetch.
  // donated (empty, or one flag per feed): feeds the caller hands over. The run drops its reference
  // to a donated feed right after the feed's last reader, so its memory goes as soon as nothing
  // else holds it (a training step's stashed activations, docs/memory_optimizer.md), and counts it
  // in RunStats::peak_live_bytes until then. Never changes what the run computes.
  Status Run(const std::vector<std::string>& feed_names, std::vector<Tensor> feeds,
             const std::vector<std::string>& fetch_names, std::vector<Tensor>* fetches, RunStats* stats = nullptr,
             const std::vector<bool>& donated = {});
  // The compiled-graph fast path: one feed per graph input, in graph-input order (no names to look
  // up), every output fetched in order. Each feed is checked like Run's; a session with bound state
  // takes names (Run).
  Status RunPositional(std::vector<Tensor> feeds, std::vector<Tensor>* fetches, RunStats* stats = nullptr,
                       const std::vector<bool>& donated = {});
  // Run with feeds and fetches of any kind: tensors, sequences (RuntimeValue::OfSequence) and
  // optionals (none: RuntimeValue::None). Run and RunPositional take and give tensors only (a
  // model whose inputs or fetched outputs are sequences or optionals runs through this one).
  Status RunValues(const std::vector<std::string>& feed_names, std::vector<RuntimeValue> feeds,
                   const std::vector<std::string>& fetch_names, std::vector<RuntimeValue>* fetches,
                   RunStats* stats = nullptr, const std::vector<bool>& donated = {});

  // Session state (docs/architecture.md, "State values"). BindState binds graph input
  // `input_name` to `t` (checked like a feed) for every later run: feeds then omit it, and a run
  // writes the input's declared update (SessionOptions::state_updates) into t's memory. Any graph
  // input may be bound; binding again replaces the tensor.
  Status BindState(const std::string& input_name, Tensor t);
  StatusOr<Tensor> State(const std::string& input_name) const;
  std::vector<std::string> BoundStates() const;  // in graph-input order

  const Graph& graph() const { return *graph_; }
  // A subgraph's compiled form, as control-flow kernels run it: `feeds` are its formal inputs,
  // then its outer-scope values (Graph::outer_scope_values order); every output is fetched, and
  // none is memory a later run reuses (a constant output is copied). *peak_live_bytes (optional)
  // gets the run's RunStats::peak_live_bytes. Only for sessions of subgraphs.
  Status RunNested(std::vector<RuntimeValue> feeds, std::vector<RuntimeValue>* fetches,
                   size_t* peak_live_bytes = nullptr);
  const PartitionReport& partition_report() const { return partition_report_; }
  const std::vector<std::string>& applied_passes() const { return applied_passes_; }
  // Human-readable lines about how the session was built (passes, partition, plan).
  const std::vector<std::string>& log() const { return log_; }
  std::string EndProfiling();
  int num_threads() const { return pool_->num_threads(); }
  const SessionOptions& options() const { return options_; }

 private:
  struct Step {
    const Node* node = nullptr;
    const KernelDef* def = nullptr;
    std::unique_ptr<OpKernel> kernel;
    const ExecutionProvider* provider = nullptr;
    int opset = 0;
    // Slot per input, -1 when omitted; the node's implicit inputs follow its num_inputs explicit
    // ones, so liveness, donation and the state plan see what its subgraphs read.
    std::vector<int> inputs;
    size_t num_inputs = 0;
    // Control flow: a nested session per subgraph (Node::subgraphs() order), and for each of its
    // outer-scope values the position in `inputs` of the implicit input it stands for.
    std::vector<std::unique_ptr<Session>> subgraphs;
    std::vector<std::vector<int>> subgraph_outer;
    std::vector<int> outputs;             // slot per output
    std::vector<bool> unused;             // per output: nobody reads it and it is not a graph output
    std::vector<int> free_after;          // slots whose last reader is this step
    std::vector<int> donated_free_after;  // graph-input slots whose last reader is this step (if donated)
    std::vector<int> inplace_update;      // per output: the planned update it writes in place, or -1
    std::vector<int> inplace_input;       // per such output: the input whose memory it is written into
    // The kernel declares string inputs (a type constraint allowing strings, or a value kernel):
    // any other kernel is refused a string tensor at run time (its types were unknown when chosen).
    bool takes_strings = false;
    // Shape inference at run time (InferStep). An op whose output types follow from its input
    // types alone (not from the values of computed inputs) keeps its last answer, reused while its
    // inputs' dtypes and shapes stay the same. -1: not decided yet; 0: inferred every run; 1: cached.
    int inference_by_types = -1;
    std::vector<DType> inferred_dtypes;  // the inputs the cached answer was inferred from
    std::vector<Shape> inferred_shapes;
    std::vector<ValueType> output_types;  // this run's inferred output types
    // Their concrete shapes (nullopt where a dim is not known).
    std::vector<std::optional<Shape>> output_shapes;
  };
  struct MemoryPattern {  // the arena itself is taken from the ArenaPool for each run
    std::vector<BufferLifetime> lifetimes;
    BufferPlan plan;
  };

  Session() = default;
  Status Initialize();
  Status BuildPlan();
  // The nested session of subgraph `sub` (of a node of this session's graph), planned.
  StatusOr<std::unique_ptr<Session>> CreateNested(Graph& sub) const;
  // Builds the nested sessions of `step`'s subgraphs (BuildPlan).
  Status PlanSubgraphs(Step& step);
  Status BindFeeds(const std::vector<std::string>& names, std::vector<RuntimeValue>& feeds,
                   std::vector<RuntimeValue>& slots, std::string* signature) const;
  // The fetch slots of `fetch_names` (all outputs when empty); InvalidArgument for an unknown name.
  Status FetchSlots(const std::vector<std::string>& fetch_names, std::vector<int>* fetch_slots) const;
  // Run's work once the input slots are bound: the steps, the fetches, the memory pattern.
  Status RunBound(std::vector<RuntimeValue>& slots, const std::string& signature, const std::vector<int>& fetch_slots,
                  std::vector<RuntimeValue>* fetches, RunStats* stats, int64_t t0,
                  const std::vector<bool>& donated_inputs);
  // Tensors of `values` into *tensors; InvalidArgument naming the output that is not a tensor.
  Status FetchedTensors(const std::vector<int>& fetch_slots, std::vector<RuntimeValue>& values,
                        std::vector<Tensor>* tensors) const;
  static void AppendSignature(const RuntimeValue& v, std::string* signature);
  // Checks a feed or state `v` for graph input `index` against its declared type; `symbols`
  // (when given) binds symbolic dims across the inputs of one run.
  Status CheckInput(size_t index, const char* kind, const RuntimeValue& v,
                    std::unordered_map<std::string, int64_t>* symbols) const;
  Status CheckInputTensor(size_t index, const char* kind, const Tensor& t, const ValueType& want,
                          std::unordered_map<std::string, int64_t>* symbols) const;
  int FindInput(const std::string& name) const;
  // Binds feed `index` given by position (the graph's inputs in order, for a nested session
  // followed by the values it reads from enclosing graphs) to its slot, checked against its
  // declared type (`symbols` binds symbolic dims across one run's feeds), and appends it to the
  // memory-pattern signature (session_feeds.cc). RunPositional and RunNested loop over it.
  Status BindPositional(size_t index, RuntimeValue feed, std::vector<RuntimeValue>& slots,
                        std::unordered_map<std::string, int64_t>* symbols, std::string* signature) const;
  // The step's subgraphs bound to this run's values of the enclosing graphs they read (into
  // *bound, which must outlive the run of the step), as the runners its kernel sees
  // (session_subgraphs.cc).
  std::vector<const SubgraphRunner*> BindSubgraphs(const Step& step, const std::vector<RuntimeValue>& slots,
                                                   std::vector<BoundSubgraph>* bound) const;
  // session_state.cc: the update plan (after the steps are built), the writes after a run.
  Status PlanStateUpdates();
  Status WriteBackStates(std::vector<RuntimeValue>& slots, std::vector<RuntimeValue>* fetches);
  Status StateFailure(Status failed, size_t failed_step) const;
  // What one run's memory accounting carries from step to step (RunStats::peak_live_bytes).
  struct RunMemory {
    RunAllocator* allocator = nullptr;
    LiveBytes outside;          // bytes held outside the run allocator
    std::vector<bool> donated;  // by slot: a graph input the caller donated (empty: none)
    size_t arena_bytes = 0;     // the planned arena the run took, held whole (RunStats::peak_held_bytes)
    size_t peak_live_bytes = 0;
    size_t peak_held_bytes = 0;
  };
  Status RunStep(Step& step, std::vector<RuntimeValue>& slots, const std::shared_ptr<Allocator>& run_alloc,
                 RunMemory& memory);
  // A step of a value kernel (KernelDef::value_kernel): inputs of any kind, outputs the kernel
  // sets (session_values.cc).
  Status RunValueStep(Step& step, std::vector<RuntimeValue>& slots, const std::shared_ptr<Allocator>& run_alloc,
                      RunMemory& memory);
  Status FinishStep(const Step& step, std::vector<RuntimeValue>& slots, const std::vector<const Tensor*>& in_ptrs,
                    RunMemory& memory, size_t nested_peak = 0);
  // A value kernel's output that is (or becomes, through aliases) a graph output holds no tensor
  // that shares memory with a constant, a feed or a bound state: such tensors are copied, as the
  // tensor kernels' outputs are (session_values.cc).
  Status DetachFromCallerMemory(RuntimeValue& value, const std::vector<RuntimeValue>& slots) const;
  // Sets step.output_types for `inputs` (this run's values of the step's inputs).
  Status InferStep(Step& step, const std::vector<const Tensor*>& inputs) const;
  // Checks an output a kernel made itself against its declared type; copies a graph output that
  // views engine memory (session_values.cc).
  Status AdoptKernelOutput(const Step& step, size_t j, const ValueType& declared,
                           const std::vector<const Tensor*>& inputs, std::vector<RuntimeValue>& slots);
  Status AdoptKernelOutputs(const Step& step, const std::vector<ValueType>& declared,
                            const std::vector<const Tensor*>& inputs, std::vector<RuntimeValue>& slots);

  SessionOptions options_;
  std::unique_ptr<Graph> owned_graph_;  // the main graph; a nested session's graph is its node's
  Graph* graph_ = nullptr;
  bool nested_ = false;
  std::shared_ptr<ThreadPool> pool_;
  std::vector<std::shared_ptr<ExecutionProvider>> providers_;
  PartitionReport partition_report_;
  std::vector<std::string> applied_passes_;
  std::vector<std::string> log_;
  std::vector<IOInfo> input_info_, output_info_;

  std::map<const Value*, int> slot_of_;
  std::vector<const Value*> slot_values_;
  std::vector<RuntimeValue> constants_;                 // by slot; defined for initializers
  std::unordered_set<const Buffer*> constant_buffers_;  // their buffers: fetches over them are copied
  std::vector<int> input_slots_;                        // graph inputs, in order
  std::vector<int> output_slots_;                       // graph outputs, in order
  std::vector<bool> is_output_slot_;
  std::vector<bool> owns_output_memory_;  // outputs, and values outputs alias (allocated outside the arena)
  std::vector<Step> steps_;
  size_t prepacked_bytes_ = 0;  // OpKernel::PrePackedBytes over steps_, after BuildPlan
  int64_t prepacked_constants_ = 0;

  // Session state: bound tensors by graph-input index (undefined: not bound), and per declared
  // update its slots and the step writing it in place (-1: copied in after the last step).
  struct PlannedUpdate {
    size_t input_index = 0;
    int state_slot = -1;
    int update_slot = -1;
    int first_writer = -1;  // the first step writing the state in place; -1: copied in after the run
  };
  std::vector<Tensor> bound_states_;
  std::vector<PlannedUpdate> planned_updates_;

  mutable std::mutex run_mu_;
  std::map<std::string, MemoryPattern> patterns_;  // by input-shape signature
  std::shared_ptr<Profiler> profiler_;             // nested sessions share their parent's
};

}  // namespace tob
