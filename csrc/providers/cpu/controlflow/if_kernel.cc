// If (ai.onnx 1-25): runs then_branch or else_branch, compiled once as nested sessions
// (runtime/session.h), and hands the branch's outputs over as its own (no copy: a branch's
// outputs are never memory a later run reuses). A value kernel (KernelDef::ValueKernel): the
// branches' outputs may be tensors, sequences or optionals, and their shapes depend on the branch
// taken; the executor checks them against the shape function's answer for this run's condition.
#include "framework/kernel_registry.h"
#include "providers/cpu/controlflow/controlflow_utils.h"

namespace tob {

namespace {

class IfKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    for (const char* branch : {"then_branch", "else_branch"})
      if (node.subgraph(branch) == nullptr)
        return InvalidModel(node.Describe(), ": required GRAPH attribute '", branch, "' is missing");
    return MakeKernel<IfKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor* c = ctx.input(0);
    if (c == nullptr) return ctx.Fail("the condition (input 0) must be a tensor, got ", Described(ctx, 0));
    TOB_ASSIGN_OR_RETURN(bool cond, controlflow::ReadCondition(ctx, *c, "the condition (input 0)"));
    const char* branch = cond ? "then_branch" : "else_branch";
    const SubgraphRunner* runner = ctx.subgraph(branch);
    if (runner == nullptr)
      return ctx.Fail("subgraph '", branch, "' was not compiled (the node runs outside a session)");
    std::vector<RuntimeValue> fetches;
    TOB_RETURN_IF_ERROR(runner->Run({}, &fetches));
    if (static_cast<int>(fetches.size()) != ctx.num_outputs())
      return ctx.Fail(branch, " returned ", fetches.size(), " values for ", ctx.num_outputs(), " outputs");
    // Values of any kind (tensors, sequences, none) are handed over as they are.
    for (int j = 0; j < ctx.num_outputs(); ++j)
      if (RuntimeValue* out = ctx.output_value(j)) *out = std::move(fetches[j]);
    return Status::OK();
  }

 private:
  static std::string Described(const KernelContext& ctx, int i) {
    const RuntimeValue* v = ctx.input_value(i);
    return v == nullptr ? std::string("none given") : v->Describe();
  }
};

}  // namespace

void RegisterCpuIfKernels(KernelRegistry& registry) {
  registry.Register(Def("If").Versions(1).Constraint("B", {0}, {DType::kBool}).ValueKernel().Kernel<IfKernel>());
}

}  // namespace tob
