#include "providers/cpu/tensor/string_moves.h"

#include <string>

namespace tob::tensor_ops {

namespace {

class StringMoveKernel final : public OpKernel {
 public:
  StringMoveKernel(const Node& node, std::unique_ptr<OpKernel> inner, std::vector<int> data_inputs)
      : OpKernel(node), inner_(std::move(inner)), data_inputs_(std::move(data_inputs)) {}

  Status Compute(KernelContext& ctx) const override {
    // Built for a node whose element type was not known: decided here, on this run's input.
    const Tensor* first = ctx.input(data_inputs_.front() == kEveryInput ? 0 : data_inputs_.front());
    if (first == nullptr || first->dtype() != DType::kString) return inner_->Compute(ctx);
    std::vector<const Tensor*> inputs(static_cast<size_t>(ctx.num_inputs()));
    for (int i = 0; i < ctx.num_inputs(); ++i) inputs[i] = ctx.input(i);
    std::vector<int> data_inputs = data_inputs_;
    if (data_inputs == std::vector<int>{kEveryInput}) {
      data_inputs.clear();
      for (int i = 0; i < ctx.num_inputs(); ++i) data_inputs.push_back(i);
    }
    std::vector<Tensor> numbers(data_inputs.size());
    std::vector<const std::string*> sources;  // element number -> its string
    for (size_t d = 0; d < data_inputs.size(); ++d) {
      const Tensor* in = ctx.input(data_inputs[d]);
      if (in == nullptr) continue;
      if (in->dtype() != DType::kString)
        return ctx.Fail("input ", data_inputs[d], " is ", DTypeName(in->dtype()), " where string was expected");
      TOB_ASSIGN_OR_RETURN(numbers[d], ctx.AllocateScratch(DType::kInt64, in->shape()));
      int64_t* n = numbers[d].data<int64_t>();
      const std::string* s = in->data<std::string>();
      for (int64_t i = 0; i < in->numel(); ++i) {
        n[i] = static_cast<int64_t>(sources.size());
        sources.push_back(s + i);
      }
      inputs[data_inputs[d]] = &numbers[d];
    }
    const int n_out = ctx.num_outputs();
    std::vector<Tensor> out_numbers(static_cast<size_t>(n_out));
    std::vector<Tensor*> out_ptrs(static_cast<size_t>(n_out), nullptr);
    for (int j = 0; j < n_out; ++j) {
      Tensor* out = ctx.output(j);
      if (out == nullptr) continue;
      // An output the kernel allocates itself (Compress) arrives undefined and stays so here.
      if (out->defined()) {
        TOB_ASSIGN_OR_RETURN(out_numbers[j], ctx.AllocateScratch(DType::kInt64, out->shape()));
      }
      out_ptrs[j] = &out_numbers[j];
    }
    KernelContext inner(ctx.node(), inputs, out_ptrs, ctx.thread_pool(), CpuAllocator::Default());
    TOB_RETURN_IF_ERROR(inner_->Compute(inner));
    for (int j = 0; j < n_out; ++j) {
      Tensor* out = ctx.output(j);
      if (out == nullptr) continue;
      if (!out->defined()) {
        TOB_ASSIGN_OR_RETURN(*out, Tensor::Allocate(DType::kString, out_numbers[j].shape(), CpuAllocator::Default()));
      }
      const int64_t* n = out_numbers[j].data<int64_t>();
      std::string* dst = out->data<std::string>();
      for (int64_t i = 0; i < out->numel(); ++i) {
        TOB_ENFORCE(n[i] >= 0 && n[i] < static_cast<int64_t>(sources.size()), "string move: element number ", n[i],
                    " out of range");
        dst[i] = *sources[static_cast<size_t>(n[i])];
      }
    }
    return Status::OK();
  }

 private:
  std::unique_ptr<OpKernel> inner_;
  std::vector<int> data_inputs_;
};

}  // namespace

KernelFactory MovesStrings(KernelFactory inner, std::vector<int> data_inputs) {
  return [inner = std::move(inner),
          data_inputs = std::move(data_inputs)](const Node& node) -> StatusOr<std::unique_ptr<OpKernel>> {
    TOB_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel, inner(node));
    const Value* first = node.input(data_inputs.front() == kEveryInput ? 0 : static_cast<size_t>(data_inputs.front()));
    // Wrapped for strings, and where the type is not known yet (the wrapper decides per run).
    if (first == nullptr || (first->type().dtype != DType::kString && first->type().dtype != DType::kUndefined))
      return kernel;
    return std::unique_ptr<OpKernel>(new StringMoveKernel(node, std::move(kernel), data_inputs));
  };
}

}  // namespace tob::tensor_ops
