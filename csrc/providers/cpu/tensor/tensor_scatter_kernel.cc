// TensorScatter (opset 24): the KV-cache update. present_cache = past_cache, then for each batch
// row b (and every index of the dims between batch and `axis`) the update's sequence positions
// s = 0 .. seq-1 go to cache position write_indices[b] + s ("linear", which must stay inside the
// cache) or (write_indices[b] + s) mod max_sequence_length ("circular"). write_indices defaults to
// zeros. Any dtype: the kernel moves bytes. A cache held as session state is updated in its own
// memory (MayInplace): only the new positions are written.
#include <cstring>
#include <memory>

#include "framework/kernel_registry.h"

namespace tob::cpu {
namespace {

class TensorScatterKernel final : public OpKernel {
 public:
  TensorScatterKernel(const Node& node, int64_t axis, bool circular)
      : OpKernel(node), axis_(axis), circular_(circular) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = -2;
    std::string mode;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, int64_t{-2}));
    TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode, std::string("linear")));
    if (mode != "linear" && mode != "circular")
      return InvalidModel(node.Describe(), ": attribute 'mode' must be 'linear' or 'circular', got '", mode, "'");
    return MakeKernel<TensorScatterKernel>(node, axis, mode == "circular");
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& past = *ctx.input(0);
    const Tensor& update = *ctx.input(1);
    const Tensor* write = ctx.input(2) != nullptr && ctx.input(2)->defined() ? ctx.input(2) : nullptr;
    Tensor& present = *ctx.output(0);
    const int64_t axis = axis_ < 0 ? axis_ + past.rank() : axis_;
    if (axis <= 0 || axis >= past.rank())
      return ctx.Fail("axis ", axis_, " is not a sequence axis of rank ", past.rank());
    const int64_t batch = past.dim(0), max_seq = past.dim(axis), seq = update.dim(axis);
    int64_t middle = 1, inner = 1;  // dims between batch and axis; dims after axis
    for (int64_t d = 1; d < axis; ++d) middle *= past.dim(d);
    for (int64_t d = axis + 1; d < past.rank(); ++d) inner *= past.dim(d);
    const size_t row = static_cast<size_t>(inner) * DTypeSize(past.dtype());
    if (!present.SharesDataWith(past)) std::memcpy(present.raw_data(), past.raw_data(), past.nbytes());
    const char* src = static_cast<const char*>(update.raw_data());
    char* dst = static_cast<char*>(present.raw_data());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t start = write != nullptr ? write->data<int64_t>()[b] : 0;
      if (start < 0 || (!circular_ && start + seq > max_seq))
        return ctx.Fail("write_indices[", b, "] = ", start, " with ", seq, " new positions does not fit the cache of ",
                        max_seq, circular_ ? "" : " (linear mode)");
      for (int64_t m = 0; m < middle; ++m)
        for (int64_t s = 0; s < seq; ++s) {
          const int64_t at = circular_ ? (start + s) % max_seq : start + s;
          std::memcpy(dst + ((b * middle + m) * max_seq + at) * row, src + ((b * middle + m) * seq + s) * row, row);
        }
    }
    return Status::OK();
  }

 private:
  int64_t axis_;
  bool circular_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuTensorScatterKernels(KernelRegistry& registry) {
  registry.Register(Def("TensorScatter")
                        .Versions(24)
                        .Constraint("T", {0, 1}, AllTypes())
                        .Constraint("T1", {2}, {DType::kInt64})
                        .MayInplace(0, 0)
                        .Kernel<cpu::TensorScatterKernel>());
}

}  // namespace tob
