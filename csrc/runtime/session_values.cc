// The executor's side of sequence and optional values: the steps of value kernels
// (KernelDef::value_kernel), whose inputs may be sequences or none and whose outputs the kernel
// sets itself, and the tensor-only fetches of Run / RunPositional.
#include "ops/op_schema.h"
#include "runtime/session.h"

namespace tob {

Status Session::RunValueStep(Step& step, std::vector<RuntimeValue>& slots, const std::shared_ptr<Allocator>& run_alloc,
                             RunMemory& memory) {
  const Node& node = *step.node;
  const size_t n_in = step.inputs.size();
  const size_t n_out = step.outputs.size();
  std::vector<const RuntimeValue*> in_values(n_in, nullptr);
  std::vector<const Tensor*> in_ptrs(n_in, nullptr);
  std::vector<ValueType> in_types(n_in);
  std::vector<const ValueType*> type_ptrs(n_in, nullptr);
  for (size_t i = 0; i < n_in; ++i) {
    const int s = step.inputs[i];
    if (s < 0) continue;
    const RuntimeValue& v = slots[s];
    if (!v.defined())
      return RuntimeError(node.Describe(), ": input ", i, " '", slot_values_[s]->name(), "' has no value");
    in_values[i] = &v;
    if (v.is_tensor()) in_ptrs[i] = &v.tensor();
    // The value's own type, still optional where the graph says so (an optional holding a value).
    in_types[i] = v.Type();
    in_types[i].optional = in_types[i].optional || slot_values_[s]->type().optional;
    type_ptrs[i] = &in_types[i];
  }
  // The shape function on this run's types checks what it can (positions, axes, kinds) before the
  // kernel runs; its answer is what the kernel's outputs are checked against.
  InferenceContext ictx(node, step.opset, type_ptrs, in_ptrs);
  TOB_RETURN_IF_ERROR(OpSchemaRegistry::Global().Infer(ictx));

  std::vector<RuntimeValue*> out_values(n_out, nullptr);
  for (size_t j = 0; j < n_out; ++j) {
    RuntimeValue& out = slots[step.outputs[j]];
    out = RuntimeValue();
    out_values[j] = &out;
  }
  KernelContext kctx(node, in_ptrs, std::vector<Tensor*>(n_out, nullptr), pool_.get(), run_alloc);
  kctx.SetValues(std::move(in_values), std::move(out_values));
  const bool profiling = profiler_->enabled();
  const int64_t t0 = profiling ? profiler_->NowUs() : 0;
  Status st = step.kernel->Compute(kctx);
  if (!st.ok()) return st.WithContext(StrCat("while running ", node.Describe()));
  for (size_t j = 0; j < n_out; ++j)
    TOB_RETURN_IF_ERROR(AdoptKernelOutput(step, j, ictx.output_types()[j], in_ptrs, slots));
  if (profiling) {
    std::string shapes;
    for (int s : step.outputs) shapes += (shapes.empty() ? "" : " ") + slots[s].Describe();
    profiler_->Record(
        ProfileEvent{node.name(), "Node", node.op_type(), node.provider(), shapes, t0, profiler_->NowUs() - t0});
  }
  return FinishStep(step, slots, in_ptrs, memory);
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
