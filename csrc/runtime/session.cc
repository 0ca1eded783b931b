#include "runtime/session.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "core/env_switch.h"
#include "memory/arena_pool.h"
#include "memory/run_allocator.h"
#include "ops/op_schema.h"
#include "partition/provider_registry.h"
#include "providers/cpu/cpu_execution_provider.h"
#include "runtime/bound_subgraph.h"

namespace tob {

namespace {

constexpr size_t kMaxMemoryPatterns = 16;

// A step's input pointers (RunStep), in a vector this thread reused from an earlier step (a stack:
// a control-flow kernel runs nested sessions' steps on the same thread), so that a steady run
// allocates none.
thread_local std::vector<std::vector<const Tensor*>> tls_step_inputs;

class PooledStepInputs {
 public:
  explicit PooledStepInputs(size_t n) {
    if (!tls_step_inputs.empty()) {
      ptrs_ = std::move(tls_step_inputs.back());
      tls_step_inputs.pop_back();
    }
    ptrs_.assign(n, nullptr);
  }
  ~PooledStepInputs() {
    if (tls_step_inputs.size() < 8) tls_step_inputs.push_back(std::move(ptrs_));
  }
  PooledStepInputs(const PooledStepInputs&) = delete;
  PooledStepInputs& operator=(const PooledStepInputs&) = delete;
  std::vector<const Tensor*>& get() { return ptrs_; }

 private:
  std::vector<const Tensor*> ptrs_;
};

std::string OpsetLabel(const Graph& g, const Node& n) { return StrCat("opset ", g.Opset(n.domain())); }

// A string tensor reached input i of a kernel chosen while that input's type was unknown: only a
// kernel whose constraints name strings there may take it (its elements are objects, not bytes).
Status CheckStringInput(const Node& node, const KernelDef& def, bool takes_strings,
                        const std::vector<const Tensor*>& inputs, size_t i) {
  std::string why = StrCat("input ", i, " is a string tensor, which this kernel does not take");
  if (takes_strings) {
    std::vector<DType> types(inputs.size(), DType::kUndefined);
    for (size_t k = 0; k < inputs.size(); ++k)
      if (inputs[k] != nullptr) types[k] = inputs[k]->dtype();
    if (def.Accepts(types, &why)) return Status::OK();
  }
  return RuntimeError(node.Describe(), " (", def.Describe(), "): ", why);
}

}  // namespace

StatusOr<std::unique_ptr<Session>> Session::Create(std::unique_ptr<Graph> graph, SessionOptions options) {
  if (graph == nullptr) return InvalidArgument("Session::Create: graph is null");
  TOB_RETURN_IF_ERROR(CheckEnvSwitches());
  if (options.intra_op_threads < 0)
    return InvalidArgument("intra_op_threads must be >= 0 (0 = all cores), got ", options.intra_op_threads);
  std::unique_ptr<Session> s(new Session());
  ArenaPool::Global().AddUser();  // ~Session removes it
  s->options_ = std::move(options);
  s->owned_graph_ = std::move(graph);
  s->graph_ = s->owned_graph_.get();
  TOB_RETURN_IF_ERROR(s->Initialize());
  return s;
}

Session::~Session() { ArenaPool::Global().RemoveUser(); }

Status Session::Initialize() {
  profiler_ = std::make_shared<Profiler>(options_.enable_profiling);
  const int64_t t0 = profiler_->NowUs();
  // 0: the following pool, on the process's intra-op runtime where one is installed (torch's
  // pool in the Python module, at torch's current thread count), else on all hardware threads.
  pool_ = ThreadPool::Shared(std::max(0, options_.intra_op_threads));

  const ProviderRegistry& provider_registry = ProviderRegistry::Global();
  const std::vector<std::string> fallbacks = provider_registry.FallbackNames();
  auto is_fallback = [&](const std::string& name) {
    return std::find(fallbacks.begin(), fallbacks.end(), name) != fallbacks.end();
  };
  for (const std::string& name : options_.providers) {
    if (name == kCpuProvider || is_fallback(name)) continue;
    TOB_ASSIGN_OR_RETURN(auto ep, provider_registry.Create(name));
    providers_.push_back(std::move(ep));
  }
  providers_.push_back(std::make_unique<CpuExecutionProvider>());
  for (const std::string& name : fallbacks) {
    TOB_ASSIGN_OR_RETURN(auto ep, provider_registry.Create(name));
    providers_.push_back(std::move(ep));
  }

  Graph& g = *graph_;
  const OpSchemaRegistry& schemas = OpSchemaRegistry::Global();
  TOB_RETURN_IF_ERROR(VerifyGraph(g, schemas));
  // Errors inside subgraphs wait for the inference after the passes: a branch the optimizer
  // proves dead (InlineConstantIf) is never run, so it need not be well-typed.
  TOB_RETURN_IF_ERROR(InferShapes(g, schemas, /*defer_subgraph_errors=*/true));
  // IO types as the user declared them (before passes may re-point outputs).
  for (const Value* v : g.inputs()) input_info_.push_back({v->name(), v->type()});
  for (size_t i = 0; i < g.outputs().size(); ++i) output_info_.push_back({g.output_names()[i], g.outputs()[i]->type()});
  TOB_RETURN_IF_ERROR(VerifyStateUpdates(g, options_.state_updates));
  bound_states_.assign(g.inputs().size(), Tensor());

  PassManager pipeline = BuildPipeline(options_.optimization_level, options_.propagate_cast_ops);
  PassContext pctx;
  pctx.verify_after_each_pass = options_.verify_each_pass;
  pctx.elementwise_fusion = providers_.size() == 1 + fallbacks.size();  // the CPU provider's nodes only
  TOB_RETURN_IF_ERROR(pipeline.Run(g, pctx));
  applied_passes_ = pipeline.applied();
  for (const auto& line : applied_passes_) log_.push_back("pass " + line);
  TOB_RETURN_IF_ERROR(InferShapes(g, schemas));

  std::vector<const ExecutionProvider*> eps;
  for (const auto& ep : providers_) eps.push_back(ep.get());
  TOB_RETURN_IF_ERROR(PartitionGraph(g, eps, KernelRegistry::Global(), &partition_report_));
  log_.push_back(partition_report_.ToString());
  TOB_RETURN_IF_ERROR(BuildPlan());
  profiler_->Record(ProfileEvent{"session_initialization", "Session", "", "", "", t0, profiler_->NowUs() - t0});
  return Status::OK();
}

Status Session::BuildPlan() {
  Graph& g = *graph_;
  auto slot = [&](const Value* v) {
    auto it = slot_of_.find(v);
    if (it != slot_of_.end()) return it->second;
    int s = static_cast<int>(slot_values_.size());
    slot_of_[v] = s;
    slot_values_.push_back(v);
    return s;
  };
  for (const Value* v : g.inputs()) input_slots_.push_back(slot(v));
  for (const Value* v : g.outer_scope_values()) input_slots_.push_back(slot(v));  // nested sessions
  for (const Value* v : g.initializers()) slot(v);

  TOB_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::unordered_map<std::string, const ExecutionProvider*> by_name;
  for (const auto& ep : providers_) by_name[ep->name()] = ep.get();

  const KernelPermissions permissions{options_.allow_unsafe_aten_ops};
  for (Node* node : order) {
    Step step;
    step.node = node;
    step.opset = g.Opset(node->domain());
    auto ep_it = by_name.find(node->provider());
    TOB_ENFORCE(ep_it != by_name.end(), "node without a provider after partitioning: ", node->Describe());
    step.provider = ep_it->second;
    std::string why;
    step.def = KernelRegistry::Global().Find(node->provider(), node->domain(), node->op_type(), step.opset,
                                             InputDTypes(*node), &why, TakesOrMakesNonTensors(*node));
    if (step.def == nullptr) return NotImplemented(node->Describe(), " (", OpsetLabel(g, *node), "): ", why);
    auto kernel = step.provider->CreateKernel(*step.def, *node, permissions);
    if (!kernel.ok()) return kernel.status();
    step.kernel = std::move(kernel).value();
    step.takes_strings = step.def->value_kernel;
    for (const TypeConstraint& c : step.def->constraints)
      step.takes_strings =
          step.takes_strings || std::find(c.allowed.begin(), c.allowed.end(), DType::kString) != c.allowed.end();
    // Constant inputs are offered to the kernel once, here, before any run (OpKernel::PrePack).
    for (size_t i = 0; i < node->inputs().size(); ++i) {
      const Value* in = node->inputs()[i];
      if (in == nullptr || in->initializer() == nullptr) continue;
      bool packed = false;
      TOB_RETURN_IF_ERROR(step.kernel->PrePack(static_cast<int>(i), *in->initializer(), &packed));
      prepacked_constants_ += packed ? 1 : 0;
    }
    prepacked_bytes_ += step.kernel->PrePackedBytes();
    for (const Value* in : node->inputs()) step.inputs.push_back(in ? slot(in) : -1);
    step.num_inputs = step.inputs.size();
    for (const Value* in : node->implicit_inputs()) step.inputs.push_back(slot(in));
    if (node->has_subgraphs()) TOB_RETURN_IF_ERROR(PlanSubgraphs(step));
    for (const Value* out : node->outputs()) {
      step.outputs.push_back(slot(out));
      step.unused.push_back(step.def->skips_unused_outputs && out->uses().empty() && !out->is_graph_output());
    }
    steps_.push_back(std::move(step));
  }
  for (const Value* v : g.outputs()) output_slots_.push_back(slot(v));
  for (const Step& step : steps_)
    for (const auto& nested : step.subgraphs) {
      prepacked_bytes_ += nested->prepacked_bytes_;
      prepacked_constants_ += nested->prepacked_constants_;
    }
  TOB_RETURN_IF_ERROR(PlanStateUpdates());  // may reorder steps_

  const int n = static_cast<int>(slot_values_.size());
  is_output_slot_.assign(n, false);
  for (int s : output_slots_) is_output_slot_[s] = true;
  // Values that become a graph output through aliasing kernels only (MatMul -> Reshape -> output):
  // they are allocated like outputs (outside the arena the next run reuses), so the Reshape can
  // hand out a view instead of copying. Walks back from each output through single-reader aliases.
  owns_output_memory_ = is_output_slot_;
  std::vector<int> producer_step(n, -1);
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i)
    for (int s : steps_[i].outputs) producer_step[s] = i;
  std::vector<int> pending(output_slots_.begin(), output_slots_.end());
  // The tensor inputs of value kernels too: a sequence or an optional made from a tensor keeps it
  // for as long as the value lives, which the arena's plan does not know (a later buffer of the
  // run, or the next run, could overwrite it), so such tensors are allocated outside the arena.
  // Control-flow kernels (If, Loop) are value kernels too but keep no input: one they hand
  // through unchanged is copied once (AdoptKernelOutput).
  for (const Step& step : steps_) {
    if (!step.def->value_kernel || !step.subgraphs.empty()) continue;
    for (size_t i = 0; i < step.num_inputs; ++i) {
      const int src = step.inputs[i];
      if (src < 0 || owns_output_memory_[src] || !step.node->inputs()[i]->type().is_tensor()) continue;
      owns_output_memory_[src] = true;
      pending.push_back(src);
    }
  }
  while (!pending.empty()) {
    const int s = pending.back();
    pending.pop_back();
    const int p = producer_step[s];
    if (p < 0) continue;
    const Step& step = steps_[p];
    for (const auto& [ai, ao] : step.def->aliases) {
      if (ao >= static_cast<int>(step.outputs.size()) || step.outputs[ao] != s ||
          ai >= static_cast<int>(step.inputs.size()) || step.inputs[ai] < 0)
        continue;
      const int src = step.inputs[ai];
      const Value* v = slot_values_[src];
      if (owns_output_memory_[src] || v->producer() == nullptr || v->uses().size() != 1) continue;
      owns_output_memory_[src] = true;
      pending.push_back(src);
    }
  }
  constants_.assign(n, Tensor());
  for (const Value* v : g.initializers()) constants_[slot_of_[v]] = *v->initializer();
  for (const RuntimeValue& c : constants_)
    if (c.is_tensor() && c.tensor().buffer() != nullptr) constant_buffers_.insert(c.tensor().buffer().get());

  // Last reader of every intermediate: it is released right after that step.
  std::vector<int> last_use(n, -1);
  for (int i = 0; i < static_cast<int>(steps_.size()); ++i) {
    for (int s : steps_[i].inputs)
      if (s >= 0) last_use[s] = i;
    for (int s : steps_[i].outputs)
      if (last_use[s] < i) last_use[s] = i;  // unused outputs die at their producer
  }
  std::vector<bool> persistent(n, false);
  for (int s : input_slots_) persistent[s] = true;
  for (int s : output_slots_) persistent[s] = true;
  for (const Value* v : g.initializers()) persistent[slot_of_[v]] = true;
  for (int s = 0; s < n; ++s)
    if (!persistent[s] && last_use[s] >= 0) steps_[last_use[s]].free_after.push_back(s);
  // A donated graph input (Run's `donated`) is released after its last reader too, unless the graph
  // returns it or a planned state update writes it.
  std::vector<bool> keep_input(n, false);
  for (int s : output_slots_) keep_input[s] = true;
  for (const PlannedUpdate& u : planned_updates_) keep_input[u.state_slot] = true;
  for (int s : input_slots_)
    if (!keep_input[s] && last_use[s] >= 0) steps_[last_use[s]].donated_free_after.push_back(s);
  log_.push_back(
      StrCat("execution plan: ", steps_.size(), " steps, ", n, " values, ", pool_->num_threads(), " intra-op threads"));
  if (prepacked_constants_ > 0)
    log_.push_back(StrCat("pre-packed ", prepacked_constants_, " constant inputs (", prepacked_bytes_, " bytes)"));
  return Status::OK();
}

namespace {

bool SameValueType(const ValueType& a, const ValueType& b) {
  if (a.dtype != b.dtype || a.kind != b.kind || a.optional != b.optional || a.shape.has_value() != b.shape.has_value())
    return false;
  if (!a.shape) return true;
  if (a.shape->size() != b.shape->size()) return false;
  for (size_t d = 0; d < a.shape->size(); ++d)
    if ((*a.shape)[d].value != (*b.shape)[d].value || (*a.shape)[d].symbol != (*b.shape)[d].symbol) return false;
  return true;
}

}  // namespace

// Run-time shape inference costs more than most small kernels (schema lookup, attribute parsing,
// Dims with strings), so its answer is kept per step. It is reused only when nothing it may
// depend on changed: the node is fixed, the input dtypes and shapes are compared on every run, and
// an op whose answer may depend on the values of its (non-constant) inputs is inferred every run.
// Which ops those are is decided once per step, by inferring with and without those values.
Status Session::InferStep(Step& step, const std::vector<const Tensor*>& inputs) const {
  const size_t n_in = inputs.size();
  if (step.inference_by_types == 1) {
    bool same = true;
    for (size_t i = 0; same && i < n_in; ++i)
      same = inputs[i] == nullptr
                 ? step.inferred_dtypes[i] == DType::kUndefined
                 : inputs[i]->dtype() == step.inferred_dtypes[i] && inputs[i]->shape() == step.inferred_shapes[i];
    if (same) return Status::OK();
  }
  std::vector<ValueType> in_types(n_in);
  std::vector<const ValueType*> type_ptrs(n_in, nullptr);
  std::vector<const Tensor*> values(n_in, nullptr);
  for (size_t i = 0; i < n_in; ++i) {
    if (inputs[i] == nullptr) continue;
    in_types[i] = ValueType::OfTensor(*inputs[i]);
    type_ptrs[i] = &in_types[i];
    if (inputs[i]->device().type == DeviceType::kCPU) values[i] = inputs[i];
  }
  const OpSchemaRegistry& schemas = OpSchemaRegistry::Global();
  InferenceContext ictx(*step.node, step.opset, type_ptrs, values);
  TOB_RETURN_IF_ERROR(schemas.Infer(ictx));
  if (step.inference_by_types < 0) {
    std::vector<const Tensor*> constant_values(n_in, nullptr);
    for (size_t i = 0; i < n_in; ++i)
      if (step.inputs[i] >= 0 && constants_[step.inputs[i]].defined()) constant_values[i] = values[i];
    InferenceContext by_types(*step.node, step.opset, type_ptrs, constant_values);
    bool same = schemas.Infer(by_types).ok();
    for (size_t j = 0; same && j < ictx.output_types().size(); ++j)
      same = SameValueType(ictx.output_types()[j], by_types.output_types()[j]);
    step.inference_by_types = same ? 1 : 0;
  }
  step.output_types = ictx.output_types();
  step.output_shapes.clear();
  for (const ValueType& t : step.output_types)
    step.output_shapes.push_back(t.shape ? ConcreteShape(*t.shape) : std::nullopt);
  if (step.inference_by_types == 1) {
    step.inferred_dtypes.assign(n_in, DType::kUndefined);
    step.inferred_shapes.assign(n_in, Shape());
    for (size_t i = 0; i < n_in; ++i) {
      if (inputs[i] == nullptr) continue;
      step.inferred_dtypes[i] = inputs[i]->dtype();
      step.inferred_shapes[i] = inputs[i]->shape();
    }
  }
  return Status::OK();
}

Status Session::RunStep(Step& step, std::vector<RuntimeValue>& slots, const std::shared_ptr<Allocator>& run_alloc,
                        RunMemory& memory) {
  const Node& node = *step.node;
  if (step.def->value_kernel) return RunValueStep(step, slots, run_alloc, memory);
  // The node's explicit inputs, then the implicit ones (values of enclosing graphs its subgraphs read).
  const size_t n_all = step.inputs.size();
  const size_t n_in = step.num_inputs;
  PooledStepInputs pooled_inputs(n_all);
  std::vector<const Tensor*>& in_ptrs = pooled_inputs.get();
  for (size_t i = 0; i < n_all; ++i) {
    int s = step.inputs[i];
    if (s < 0) continue;
    const RuntimeValue& v = slots[s];
    if (i >= n_in) {
      // An implicit input reaches the subgraphs as a value of any kind (a tensor, a sequence, none).
      if (!v.defined())
        return RuntimeError(node.Describe(), ": '", slot_values_[s]->name(),
                            "', which its subgraphs read, has no value");
      if (v.is_tensor()) in_ptrs[i] = &v.tensor();
      continue;
    }
    if (!v.is_tensor()) {
      const std::string what =
          v.defined() ? StrCat("is ", v.Describe(), ", not a tensor") : std::string("has no value");
      return RuntimeError(node.Describe(), ": input ", i, " '", slot_values_[s]->name(), "' ", what);
    }
    in_ptrs[i] = &v.tensor();
    if (i < n_in && v.tensor().dtype() == DType::kString)
      TOB_RETURN_IF_ERROR(CheckStringInput(node, *step.def, step.takes_strings, in_ptrs, i));
  }
  // The kernel and the shape function take the explicit inputs; the implicit ones reach the
  // subgraphs through their runners.
  std::vector<const Tensor*> explicit_storage;
  if (n_all != n_in) explicit_storage.assign(in_ptrs.begin(), in_ptrs.begin() + n_in);
  const std::vector<const Tensor*>& explicit_in = n_all != n_in ? explicit_storage : in_ptrs;
  TOB_RETURN_IF_ERROR(InferStep(step, explicit_in));
  const std::vector<ValueType>& output_types = step.output_types;

  const bool on_host = step.provider->device().type == DeviceType::kCPU;
  const bool kernel_allocates = step.def->kernel_allocates_outputs;
  std::vector<Tensor*> out_ptrs(step.outputs.size(), nullptr);
  for (size_t j = 0; kernel_allocates && j < step.outputs.size(); ++j) {
    RuntimeValue& out = slots[step.outputs[j]];
    out = Tensor();
    out_ptrs[j] = &out.mutable_tensor();
  }
  for (size_t j = 0; !kernel_allocates && j < step.outputs.size(); ++j) {
    if (step.unused[j]) continue;  // the kernel skips it (out_ptrs[j] stays nullptr)
    const ValueType& t = output_types[j];
    const std::optional<Shape>& shape = step.output_shapes[j];
    if (!shape || t.dtype == DType::kUndefined)
      return RuntimeError(node.Describe(), ": could not determine output ", j, " (", t.ToString(), ") from the inputs");
    const int s = step.outputs[j];
    slots[s] = Tensor();
    Tensor& out = slots[s].mutable_tensor();
    if (const int u = step.inplace_update[j]; u >= 0 && bound_states_[planned_updates_[u].input_index].defined()) {
      // A state update written into the bound state's own memory (PlanStateUpdates). A state
      // input that is fed instead of bound is never written.
      const int state_input = step.inplace_input[j];
      const Tensor& state = *in_ptrs[state_input];
      if (state.dtype() != t.dtype || state.shape() != *shape)
        return RuntimeError(node.Describe(), ": output ", j, " '", slot_values_[s]->name(), "' is ", DTypeName(t.dtype),
                            ShapeToString(*shape), " but is written in place over '",
                            slot_values_[step.inputs[state_input]]->name(), "' (", DTypeName(state.dtype()),
                            ShapeToString(state.shape()), "), the memory of state '",
                            options_.state_updates[u].state_input, "'");
      out = state;
      out_ptrs[j] = &out;
      continue;
    }
    bool aliased = false;
    for (const auto& [ai, ao] : step.def->aliases) {
      if (ao != static_cast<int>(j) || ai >= static_cast<int>(n_in) || in_ptrs[ai] == nullptr) continue;
      // Output memory (graph outputs, tensors sequences keep) may only view memory that is itself
      // output memory (see BuildPlan).
      if (owns_output_memory_[s] && !owns_output_memory_[step.inputs[ai]]) continue;
      const Tensor& src = *in_ptrs[ai];
      if (src.dtype() == t.dtype && src.numel() == NumElements(*shape)) {
        out = src.Reshaped(*shape);
        aliased = true;
      }
    }
    if (!aliased) {
      const bool host_memory = on_host || step.def->IsHostOutput(static_cast<int>(j));
      std::shared_ptr<Allocator> alloc = !host_memory             ? step.provider->allocator()
                                         : owns_output_memory_[s] ? CpuAllocator::Default()
                                                                  : run_alloc;
      TOB_ASSIGN_OR_RETURN(out, Tensor::Allocate(t.dtype, *shape, alloc));
    }
    out_ptrs[j] = &out;
  }
  std::vector<BoundSubgraph> bound;
  std::vector<const SubgraphRunner*> runners = BindSubgraphs(step, slots, &bound);
  // out_ptrs moves into the context (the profiler reads the outputs back through it).
  KernelContext kctx(node, explicit_in, std::move(out_ptrs), pool_.get(),
                     on_host ? run_alloc : step.provider->allocator(), std::move(runners));
  const bool profiling = profiler_->enabled();
  const int64_t t0 = profiling ? profiler_->NowUs() : 0;
  Status st = step.kernel->Compute(kctx);
  if (!st.ok()) return st.WithContext(StrCat("while running ", node.Describe()));
  if (kernel_allocates) TOB_RETURN_IF_ERROR(AdoptKernelOutputs(step, output_types, in_ptrs, slots));
  if (profiling) {
    std::string shapes;
    for (int j = 0; j < kctx.num_outputs(); ++j)
      if (const Tensor* o = kctx.output(j); o != nullptr)
        shapes += (shapes.empty() ? "" : " ") + ShapeToString(o->shape());
    profiler_->Record(
        ProfileEvent{node.name(), "Node", node.op_type(), node.provider(), shapes, t0, profiler_->NowUs() - t0});
  }
  // A subgraph's runs held their own memory on top of what this run held while the step ran.
  size_t nested_peak = 0;
  for (const BoundSubgraph& b : bound) nested_peak = std::max(nested_peak, b.peak_live_bytes());
  return FinishStep(step, slots, in_ptrs, memory, nested_peak);
}

// After a step: the memory it holds counted (with `nested_peak`, the most its subgraphs' runs
// held), the values whose last reader it was released. Sequences are not counted (their tensors
// are outside the arena, docs/architecture.md).
Status Session::FinishStep(const Step& step, std::vector<RuntimeValue>& slots,
                           const std::vector<const Tensor*>& in_ptrs, RunMemory& memory, size_t nested_peak) {
  for (int s : step.outputs)
    if (slots[s].is_tensor()) memory.outside.Hold(slots[s].tensor(), in_ptrs, *memory.allocator);
  memory.peak_live_bytes =
      std::max(memory.peak_live_bytes, memory.allocator->window_peak_bytes() + memory.outside.live() + nested_peak);
  memory.peak_held_bytes =
      std::max(memory.peak_held_bytes,
               memory.arena_bytes + memory.allocator->base_window_peak_bytes() + memory.outside.live() + nested_peak);
  for (int s : step.free_after) {
    if (slots[s].is_tensor()) memory.outside.Release(slots[s].tensor());
    slots[s] = RuntimeValue();
  }
  for (int s : step.donated_free_after) {
    if (memory.donated.empty() || !memory.donated[s]) continue;
    if (slots[s].is_tensor()) memory.outside.Release(slots[s].tensor());
    slots[s] = RuntimeValue();  // the last reference, unless the caller kept one
  }
  return Status::OK();
}

namespace {

bool Overlaps(const Tensor& t, const Buffer& b) {
  if (t.nbytes() == 0) return false;
  const char* p = static_cast<const char*>(t.raw_data());
  const char* q = static_cast<const char*>(b.data());
  return p < q + b.bytes() && q < p + t.nbytes();
}

}  // namespace

// Outputs the kernel made itself are not in the memory plan: they are checked against what the
// model declares (the shape function's answer). A graph output that views the memory of an
// intermediate or a constant is copied out: the intermediate may live in the arena the next run
// reuses, and the caller must not be able to write into the model's constants.
Status Session::AdoptKernelOutput(const Step& step, size_t j, const ValueType& want,
                                  const std::vector<const Tensor*>& inputs, std::vector<RuntimeValue>& slots) {
  const Node& node = *step.node;
  const int s = step.outputs[j];
  const Value* value = slot_values_[s];
  if (!slots[s].defined()) {
    if (value->uses().empty() && !value->is_graph_output()) return Status::OK();
    return RuntimeError(node.Describe(), ": output ", j, " '", value->name(),
                        "' was not produced by the kernel but the graph reads it");
  }
  if (!slots[s].is_tensor()) {
    const ValueType got = slots[s].Type();
    const bool kind_ok = slots[s].is_none() ? want.optional && got.kind == want.kind : got.kind == want.kind;
    if (!kind_ok || (want.dtype != DType::kUndefined && got.dtype != want.dtype))
      return RuntimeError(node.Describe(), ": output ", j, " '", value->name(), "' is declared ", want.ToString(),
                          " but the kernel produced ", slots[s].Describe());
    return Status::OK();
  }
  Tensor& out = slots[s].mutable_tensor();
  if (want.kind != ValueKind::kTensor || (want.dtype != DType::kUndefined && out.dtype() != want.dtype))
    return RuntimeError(node.Describe(), ": output ", j, " '", value->name(), "' is declared ", want.ToString(),
                        " but the kernel produced ", DTypeName(out.dtype()), ShapeToString(out.shape()));
  if (want.shape) {
    bool match = static_cast<int64_t>(want.shape->size()) == out.rank();
    for (size_t d = 0; match && d < want.shape->size(); ++d)
      match = !(*want.shape)[d].is_known() || (*want.shape)[d].value == out.shape()[d];
    if (!match)
      return RuntimeError(node.Describe(), ": output ", j, " '", value->name(), "' is declared ", want.ToString(),
                          " but the kernel produced shape ", ShapeToString(out.shape()));
  }
  if (out.device().type != DeviceType::kCPU) return Status::OK();
  // A control-flow node hands a value through unchanged when a loop runs no iteration or a
  // subgraph returns what it was fed: the output is then one of the node's inputs (explicit or
  // implicit). Such an output is copied once here, so no value outlives the memory the plan
  // gave its input (whether it does depends on the data, which a memory plan cannot know).
  bool passes_input_through = false;
  for (size_t i = 0; !step.subgraphs.empty() && i < inputs.size(); ++i)
    if (inputs[i] != nullptr && inputs[i]->buffer() && Overlaps(out, *inputs[i]->buffer())) passes_input_through = true;
  if (!owns_output_memory_[s] && !passes_input_through) return Status::OK();
  bool views_engine_memory = passes_input_through;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int in_slot = step.inputs[i];
    if (inputs[i] != nullptr && !slot_values_[in_slot]->is_graph_input() && inputs[i]->buffer() &&
        Overlaps(out, *inputs[i]->buffer()))
      views_engine_memory = true;
  }
  if (!views_engine_memory) return Status::OK();
  TOB_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(out.dtype(), out.shape(), CpuAllocator::Default()));
  CopyTensorData(out, copy);
  out = std::move(copy);
  return Status::OK();
}

Status Session::AdoptKernelOutputs(const Step& step, const std::vector<ValueType>& declared,
                                   const std::vector<const Tensor*>& inputs, std::vector<RuntimeValue>& slots) {
  for (size_t j = 0; j < step.outputs.size(); ++j)
    TOB_RETURN_IF_ERROR(AdoptKernelOutput(step, j, declared[j], inputs, slots));
  return Status::OK();
}

Status Session::FetchSlots(const std::vector<std::string>& fetch_names, std::vector<int>* fetch_slots) const {
  const auto& out_names = graph_->output_names();
  if (fetch_names.empty()) {
    *fetch_slots = output_slots_;
    return Status::OK();
  }
  for (const std::string& name : fetch_names) {
    auto it = std::find(out_names.begin(), out_names.end(), name);
    if (it == out_names.end()) {
      std::string all;
      for (const auto& n : out_names) all += (all.empty() ? "" : ", ") + n;
      return InvalidArgument("unknown output '", name, "'; the model's outputs are: ", all);
    }
    fetch_slots->push_back(output_slots_[it - out_names.begin()]);
  }
  return Status::OK();
}

Status Session::Run(const std::vector<std::string>& feed_names, std::vector<Tensor> feeds,
                    const std::vector<std::string>& fetch_names, std::vector<Tensor>* fetches, RunStats* stats,
                    const std::vector<bool>& donated) {
  std::vector<RuntimeValue> values(std::make_move_iterator(feeds.begin()), std::make_move_iterator(feeds.end()));
  feeds.clear();
  std::vector<RuntimeValue> fetched;
  TOB_RETURN_IF_ERROR(RunValues(feed_names, std::move(values), fetch_names, &fetched, stats, donated));
  std::vector<int> fetch_slots;
  TOB_RETURN_IF_ERROR(FetchSlots(fetch_names, &fetch_slots));
  return FetchedTensors(fetch_slots, fetched, fetches);
}

Status Session::RunValues(const std::vector<std::string>& feed_names, std::vector<RuntimeValue> feeds,
                          const std::vector<std::string>& fetch_names, std::vector<RuntimeValue>* fetches,
                          RunStats* stats, const std::vector<bool>& donated) {
  // Resolve fetches first so a typo fails before any work.
  std::vector<int> fetch_slots;
  TOB_RETURN_IF_ERROR(FetchSlots(fetch_names, &fetch_slots));

  std::lock_guard<std::mutex> lock(run_mu_);
  const int64_t t0 = profiler_->NowUs();
  std::vector<RuntimeValue> slots = constants_;
  std::string signature;
  TOB_RETURN_IF_ERROR(BindFeeds(feed_names, feeds, slots, &signature));
  std::vector<bool> donated_inputs;  // by graph input; BindFeeds checked the names
  if (!donated.empty()) {
    if (donated.size() != feed_names.size())
      return InvalidArgument("got ", donated.size(), " donation flags for ", feed_names.size(), " feeds");
    donated_inputs.assign(input_slots_.size(), false);
    for (size_t f = 0; f < feed_names.size(); ++f)
      if (donated[f]) donated_inputs[FindInput(feed_names[f])] = true;
  }
  return RunBound(slots, signature, fetch_slots, fetches, stats, t0, donated_inputs);
}

namespace {

// RunPositional's containers (the slots, the memory-pattern signature, the fetched values), reused
// run after run on each thread: clear() keeps their memory, so that a steady run allocates none of
// them. A stack, as a kernel may run another graph on the same thread; taken and given back on
// every path out of the run.
struct RunScratch {
  std::vector<RuntimeValue> slots;
  std::string signature;
  std::vector<RuntimeValue> fetched;
};
constexpr size_t kMaxPooledRunScratch = 8;
thread_local std::vector<RunScratch> tls_run_scratch;

class PooledRunScratch {
 public:
  PooledRunScratch() {
    if (!tls_run_scratch.empty()) {
      scratch_ = std::move(tls_run_scratch.back());
      tls_run_scratch.pop_back();
    }
  }
  ~PooledRunScratch() {
    scratch_.slots.clear();  // the run's tensors are released here, its containers' memory kept
    scratch_.fetched.clear();
    scratch_.signature.clear();
    if (tls_run_scratch.size() < kMaxPooledRunScratch) tls_run_scratch.push_back(std::move(scratch_));
  }
  PooledRunScratch(const PooledRunScratch&) = delete;
  PooledRunScratch& operator=(const PooledRunScratch&) = delete;
  RunScratch* operator->() { return &scratch_; }

 private:
  RunScratch scratch_;
};

}  // namespace

Status Session::RunPositional(std::vector<Tensor> feeds, std::vector<Tensor>* fetches, RunStats* stats,
                              const std::vector<bool>& donated) {
  if (!donated.empty() && donated.size() != feeds.size())
    return InvalidArgument("got ", donated.size(), " donation flags for ", feeds.size(), " inputs");
  for (size_t i = 0; i < bound_states_.size(); ++i)
    if (bound_states_[i].defined())
      return InvalidArgument("input '", input_info_[i].name,
                             "' is bound as session state: a session with state runs by feed names (Run)");
  if (feeds.size() != input_slots_.size())
    return InvalidArgument("got ", feeds.size(), " inputs; the model takes ", input_slots_.size());
  std::lock_guard<std::mutex> lock(run_mu_);
  const int64_t t0 = profiler_->enabled() ? profiler_->NowUs() : 0;  // the "run" event's start
  PooledRunScratch scratch;
  std::vector<RuntimeValue>& slots = scratch->slots;
  slots.assign(constants_.begin(), constants_.end());
  // The signature (AppendSignature: a dtype/rank header and the dims of each feed) in a string kept
  // from this thread's earlier runs.
  std::string& signature = scratch->signature;
  std::unordered_map<std::string, int64_t> symbols;
  for (size_t i = 0; i < feeds.size(); ++i)
    TOB_RETURN_IF_ERROR(BindPositional(i, std::move(feeds[i]), slots, &symbols, &signature));
  std::vector<RuntimeValue>& fetched = scratch->fetched;
  TOB_RETURN_IF_ERROR(RunBound(slots, signature, output_slots_, &fetched, stats, t0, donated));
  return FetchedTensors(output_slots_, fetched, fetches);
}

namespace {

// RunBound's LiveBytes, reused run after run on each thread (LiveBytes::Clear keeps the containers'
// memory), so that a steady run's memory bookkeeping allocates nothing.
constexpr size_t kMaxPooledLiveBytes = 8;
thread_local std::vector<LiveBytes> tls_live_bytes;

}  // namespace

// A copy of `t` on the device it is on: on the host directly, elsewhere through the host with the
// device's provider (providers copy between their device and the host only).
static StatusOr<Tensor> CopyOnItsDevice(const Tensor& t, const std::shared_ptr<Allocator>& host,
                                        const std::vector<std::shared_ptr<ExecutionProvider>>& providers) {
  if (t.device().type == DeviceType::kCPU) {
    TOB_ASSIGN_OR_RETURN(Tensor fresh, Tensor::Allocate(t.dtype(), t.shape(), host));
    CopyTensorData(t, fresh);
    return fresh;
  }
  for (const auto& provider : providers) {
    if (!(provider->device() == t.device())) continue;
    TOB_ASSIGN_OR_RETURN(Tensor staged, Tensor::Allocate(t.dtype(), t.shape(), host));
    TOB_RETURN_IF_ERROR(provider->CopyTensor(t, staged));
    TOB_ASSIGN_OR_RETURN(Tensor fresh, Tensor::Allocate(t.dtype(), t.shape(), provider->allocator()));
    TOB_RETURN_IF_ERROR(provider->CopyTensor(staged, fresh));
    return fresh;
  }
  return RuntimeError("no provider of this session holds device ", t.device().ToString(), " to copy an output on");
}

Status Session::RunBound(std::vector<RuntimeValue>& slots, const std::string& signature,
                         const std::vector<int>& fetch_slots, std::vector<RuntimeValue>* fetches, RunStats* stats,
                         int64_t t0, const std::vector<bool>& donated_inputs) {
  const std::shared_ptr<Allocator> host = CpuAllocator::Default();
  std::shared_ptr<RunAllocator> run_alloc;
  MemoryPattern* pattern = nullptr;
  if (options_.enable_memory_pattern) {
    auto it = patterns_.find(signature);
    if (it != patterns_.end()) pattern = &it->second;
  }
  // The arena is the process's for this run only (memory/arena_pool.h): given back on every path
  // out of Run, so that sessions that never run at once share one.
  ScopedArena arena(options_.release_arena_after_run);
  if (pattern != nullptr) {
    // A plan without allocations (graphs whose every value is an input, a constant or an output)
    // needs no arena, nor a trip through the pool's lock: the run allocator never reads it.
    if (!pattern->lifetimes.empty() && !arena.Take(host, pattern->plan.arena_bytes))
      return Status(StatusCode::kOutOfMemory,
                    StrCat("out of memory allocating the ", pattern->plan.arena_bytes, "-byte arena"));
    run_alloc = std::make_shared<RunAllocator>(host, &pattern->plan, &pattern->lifetimes, arena.data());
  } else {
    run_alloc = std::make_shared<RunAllocator>(host);
  }

  RunMemory memory;
  // The memory bookkeeping's containers come from this thread's earlier runs and go back after
  // this one, on every path out of it (a stack: a kernel may run another graph on this thread).
  if (!tls_live_bytes.empty()) {
    memory.outside = std::move(tls_live_bytes.back());
    tls_live_bytes.pop_back();
  }
  struct GiveBack {
    LiveBytes& outside;
    ~GiveBack() {
      outside.Clear();
      if (tls_live_bytes.size() < kMaxPooledLiveBytes) tls_live_bytes.push_back(std::move(outside));
    }
  } give_back{memory.outside};
  memory.allocator = run_alloc.get();
  memory.arena_bytes = pattern != nullptr ? pattern->plan.arena_bytes : 0;
  if (!donated_inputs.empty()) {
    memory.donated.assign(slots.size(), false);
    for (size_t i = 0; i < donated_inputs.size(); ++i) memory.donated[input_slots_[i]] = donated_inputs[i];
  }
  // Inputs, bound states and constants are the caller's and not counted, except donated inputs:
  // the run holds those until their last reader.
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s].is_sequence())  // a fed sequence: its tensors are the caller's too
      for (const Tensor& t : slots[s].sequence().tensors) memory.outside.Exclude(t);
    if (!slots[s].is_tensor()) continue;
    if (!memory.donated.empty() && memory.donated[s]) memory.outside.Hold(slots[s].tensor(), {}, *run_alloc);
    else memory.outside.Exclude(slots[s].tensor());
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    run_alloc->StartWindow();
    Status st = RunStep(steps_[i], slots, run_alloc, memory);
    if (!st.ok()) return planned_updates_.empty() ? st : StateFailure(std::move(st), i);
  }

  fetches->clear();
  fetches->reserve(fetch_slots.size());
  // A fetched value moves out of its slot (the slots are cleared below), unless the state updates
  // still read the slots afterwards; a value fetched twice (one value named as two outputs) is
  // copied from its first fetch.
  const bool move_fetches = planned_updates_.empty();
  for (size_t k = 0; k < fetch_slots.size(); ++k) {
    const int s = fetch_slots[k];
    if (!slots[s].defined()) {
      const auto first = std::find(fetch_slots.begin(), fetch_slots.begin() + static_cast<std::ptrdiff_t>(k), s);
      if (!move_fetches || first == fetch_slots.begin() + static_cast<std::ptrdiff_t>(k))
        return RuntimeError("output '", slot_values_[s]->name(), "' was not computed");
      fetches->push_back((*fetches)[first - fetch_slots.begin()]);
      continue;
    }
    // Outputs are new values (ONNX): a fetched tensor whose bytes are a constant's (an initializer
    // named as an output, a Reshape of one) or that is a feed itself (an input named as an output,
    // an Identity of one the optimizer removed) is handed back as a copy, so that the caller changing
    // it in place changes neither later runs nor its own input. Donated feeds and bound states are
    // the run's to hand back; views a tensor kernel makes of a feed stay views (docs/architecture.md).
    // Only a graph input's slot (or, in a nested session, a value of the enclosing graphs, which
    // follow the inputs in input_slots_) can be a feed: the search runs for those alone.
    if (slots[s].is_tensor() && slots[s].tensor().buffer() != nullptr) {
      const Tensor& t = slots[s].tensor();
      bool copy = !constant_buffers_.empty() && constant_buffers_.count(t.buffer().get()) != 0;
      if (!copy && (nested_ || slot_values_[s]->is_graph_input())) {
        const auto in = std::find(input_slots_.begin(), input_slots_.end(), s);
        const size_t i = static_cast<size_t>(in - input_slots_.begin());
        copy = in != input_slots_.end() && !(i < donated_inputs.size() && donated_inputs[i]) &&
               !(i < bound_states_.size() && bound_states_[i].defined());
      }
      if (copy) {
        TOB_ASSIGN_OR_RETURN(Tensor fresh, CopyOnItsDevice(t, host, providers_));
        fetches->push_back(RuntimeValue(std::move(fresh)));
        continue;
      }
    }
    if (move_fetches) {
      fetches->push_back(std::move(slots[s]));
      slots[s] = RuntimeValue();  // a moved-from tensor keeps its dtype: the slot is emptied for real
    } else {
      fetches->push_back(slots[s]);
    }
  }
  if (!planned_updates_.empty()) TOB_RETURN_IF_ERROR(WriteBackStates(slots, fetches));
  slots.clear();

  if (stats) {
    stats->peak_bytes = run_alloc->peak_bytes();
    stats->peak_live_bytes = memory.peak_live_bytes;
    stats->peak_held_bytes = memory.peak_held_bytes;
    stats->planned = run_alloc->planned();
    stats->arena_bytes = pattern ? pattern->plan.arena_bytes : 0;
    stats->plan_misses = run_alloc->plan_misses();
    stats->prepacked_bytes = prepacked_bytes_;
    stats->prepacked_constants = prepacked_constants_;
  }
  if (pattern == nullptr && options_.enable_memory_pattern) {
    if (patterns_.size() >= kMaxMemoryPatterns) patterns_.erase(patterns_.begin());
    MemoryPattern p;
    p.lifetimes = run_alloc->TakeTrace().lifetimes;
    p.plan = PlanBuffers(p.lifetimes, kTensorAlignment);
    patterns_[signature] = std::move(p);
  }
  if (profiler_->enabled()) profiler_->Record(ProfileEvent{"run", "Session", "", "", "", t0, profiler_->NowUs() - t0});
  return Status::OK();
}

std::string Session::EndProfiling() { return profiler_->WriteChromeTrace(options_.profile_file_prefix); }

}  // namespace tob
