// The executor's side of sequence and optional values: the steps of value kernels
// (KernelDef::value_kernel), whose inputs may be sequences or none and whose outputs the kernel
// sets itself, and the tensor-only fetches of Run / RunPositional.
#include <algorithm>
#include <optional>

#include "ops/op_schema.h"
#include "runtime/bound_subgraph.h"
#include "runtime/session.h"

namespace tob {

Status Session::RunValueStep(Step& step, std::vector<RuntimeValue>& slots, const std::shared_ptr<Allocator>& run_alloc,
                             RunMemory& memory) {
  const Node& node = *step.node;
  // The node's explicit inputs, then the implicit ones (values of enclosing graphs its subgraphs
  // read: If and Loop are value kernels, so they carry sequences and optionals).
  const size_t n_all = step.inputs.size();
  const size_t n_in = step.num_inputs;
  const size_t n_out = step.outputs.size();
  std::vector<const RuntimeValue*> in_values(n_in, nullptr);
  std::vector<const Tensor*> in_ptrs(n_all, nullptr);
  std::vector<ValueType> in_types(n_in);
  std::vector<const ValueType*> type_ptrs(n_in, nullptr);
  for (size_t i = 0; i < n_all; ++i) {
    const int s = step.inputs[i];
    if (s < 0) continue;
    const RuntimeValue& v = slots[s];
    if (!v.defined()) {
      if (i >= n_in)
        return RuntimeError(node.Describe(), ": '", slot_values_[s]->name(),
                            "', which its subgraphs read, has no value");
      return RuntimeError(node.Describe(), ": input ", i, " '", slot_values_[s]->name(), "' has no value");
    }
    if (v.is_tensor()) in_ptrs[i] = &v.tensor();
    if (i >= n_in) continue;
    in_values[i] = &v;
    // The value's own type, still optional where the graph says so (an optional holding a value).
    in_types[i] = v.Type();
    in_types[i].optional = in_types[i].optional || slot_values_[s]->type().optional;
    type_ptrs[i] = &in_types[i];
  }
  std::vector<const Tensor*> explicit_in(in_ptrs.begin(), in_ptrs.begin() + n_in);
  // The shape function on this run's types checks what it can (positions, axes, kinds) before the
  // kernel runs; its answer is what the kernel's outputs are checked against.
  InferenceContext ictx(node, step.opset, type_ptrs, explicit_in);
  TOB_RETURN_IF_ERROR(OpSchemaRegistry::Global().Infer(ictx));

  std::vector<RuntimeValue*> out_values(n_out, nullptr);
  for (size_t j = 0; j < n_out; ++j) {
    RuntimeValue& out = slots[step.outputs[j]];
    out = RuntimeValue();
    out_values[j] = &out;
  }
  std::vector<BoundSubgraph> bound;
  std::vector<const SubgraphRunner*> runners = BindSubgraphs(step, slots, &bound);
  KernelContext kctx(node, explicit_in, std::vector<Tensor*>(n_out, nullptr), pool_.get(), run_alloc,
                     std::move(runners));
  kctx.SetValues(std::move(in_values), std::move(out_values));
  const bool profiling = profiler_->enabled();
  const int64_t t0 = profiling ? profiler_->NowUs() : 0;
  Status st = step.kernel->Compute(kctx);
  if (!st.ok()) return st.WithContext(StrCat("while running ", node.Describe()));
  for (size_t j = 0; j < n_out; ++j) {
    TOB_RETURN_IF_ERROR(AdoptKernelOutput(step, j, ictx.output_types()[j], in_ptrs, slots));
    const int s = step.outputs[j];
    if (owns_output_memory_[s]) TOB_RETURN_IF_ERROR(DetachFromCallerMemory(slots[s], slots));
  }
  if (profiling) {
    std::string shapes;
    for (int s : step.outputs) shapes += (shapes.empty() ? "" : " ") + slots[s].Describe();
    profiler_->Record(
        ProfileEvent{node.name(), "Node", node.op_type(), node.provider(), shapes, t0, profiler_->NowUs() - t0});
  }
  // A subgraph's runs held their own memory on top of what this run held while the step ran.
  size_t nested_peak = 0;
  for (const BoundSubgraph& b : bound) nested_peak = std::max(nested_peak, b.peak_live_bytes());
  return FinishStep(step, slots, in_ptrs, memory, nested_peak);
}

namespace {

bool SharesBytes(const Tensor& a, const Tensor& b) {
  if (a.nbytes() == 0 || b.nbytes() == 0 || a.device() != b.device()) return false;
  const char* p = static_cast<const char*>(a.raw_data());
  const char* q = static_cast<const char*>(b.raw_data());
  return p < q + b.nbytes() && q < p + a.nbytes();
}

void AppendTensors(const RuntimeValue& v, std::vector<const Tensor*>* out) {
  if (v.is_tensor()) out->push_back(&v.tensor());
  if (v.is_sequence())
    for (const Tensor& t : v.sequence().tensors) out->push_back(&t);
}

}  // namespace

// The value kernels hand out tensors they were given (SequenceAt, OptionalGetElement, Identity,
// SequenceConstruct of an initializer or a feed). A graph output must not let the caller write
// into the model's constants or see its own feed change under it, so those are copied here.
Status Session::DetachFromCallerMemory(RuntimeValue& value, const std::vector<RuntimeValue>& slots) const {
  std::vector<const Tensor*> caller;
  for (const RuntimeValue& c : constants_) AppendTensors(c, &caller);
  for (int s : input_slots_) AppendTensors(slots[s], &caller);
  for (const Tensor& t : bound_states_)
    if (t.defined()) caller.push_back(&t);
  auto detached = [&](const Tensor& t) -> StatusOr<std::optional<Tensor>> {
    for (const Tensor* c : caller) {
      if (!SharesBytes(t, *c)) continue;
      TOB_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(t.dtype(), t.shape(), CpuAllocator::Default()));
      CopyTensorData(t, copy);
      return std::optional<Tensor>(std::move(copy));
    }
    return std::optional<Tensor>();
  };
  if (value.is_tensor()) {
    TOB_ASSIGN_OR_RETURN(std::optional<Tensor> copy, detached(value.tensor()));
    if (copy) value = std::move(*copy);
    return Status::OK();
  }
  if (!value.is_sequence()) return Status::OK();
  const TensorSequence& seq = value.sequence();
  std::vector<Tensor> tensors;
  bool copied = false;
  for (const Tensor& t : seq.tensors) {
    TOB_ASSIGN_OR_RETURN(std::optional<Tensor> copy, detached(t));
    copied = copied || copy.has_value();
    tensors.push_back(copy ? std::move(*copy) : t);
  }
  if (copied) value = RuntimeValue::OfSequence(seq.dtype, std::move(tensors));
  return Status::OK();
}

Status Session::FetchedTensors(const std::vector<int>& fetch_slots, std::vector<RuntimeValue>& values,
                               std::vector<Tensor>* tensors) const {
  tensors->clear();
  tensors->reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i].is_tensor())
      return InvalidArgument("output '", slot_values_[fetch_slots[i]]->name(), "' is ", values[i].Describe(),
                             ", not a tensor: fetch it with RunValues (Python: InferenceSession.run)");
    tensors->push_back(std::move(values[i].mutable_tensor()));
  }
  return Status::OK();
}

}  // namespace tob
