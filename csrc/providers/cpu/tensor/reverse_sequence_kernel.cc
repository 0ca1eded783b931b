// ReverseSequence (opset 10): for each batch entry b, the first sequence_lens[b] steps along the
// time axis are reversed and the rest copied as they are. Any dtype: the kernel moves bytes. A
// length outside [0, time steps] is an error naming the node.
#include <cstring>
#include <memory>

#include "framework/kernel_registry.h"

namespace tob::cpu {
namespace {

class ReverseSequenceKernel final : public OpKernel {
 public:
  ReverseSequenceKernel(const Node& node, int64_t batch_axis) : OpKernel(node), batch_axis_(batch_axis) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t batch_axis = 1, time_axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("batch_axis", &batch_axis, int64_t{1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("time_axis", &time_axis, int64_t{0}));
    if (!((batch_axis == 0 && time_axis == 1) || (batch_axis == 1 && time_axis == 0)))
      return InvalidModel(node.Describe(), ": batch_axis and time_axis must be 0 and 1 (either way round)");
    return MakeKernel<ReverseSequenceKernel>(node, batch_axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& lens = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    const int64_t time_axis = 1 - batch_axis_;
    const int64_t batch = x.dim(batch_axis_), steps = x.dim(time_axis);
    if (lens.numel() != batch) return ctx.Fail("sequence_lens has ", lens.numel(), " entries for a batch of ", batch);
    const int64_t inner = x.rank() <= 2 ? 1 : x.numel() / (batch * steps == 0 ? 1 : batch * steps);
    const size_t row = static_cast<size_t>(inner) * DTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    // Offset (in rows) of (batch b, step t).
    auto at = [&](int64_t b, int64_t t) { return batch_axis_ == 0 ? b * steps + t : t * batch + b; };
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = lens.data<int64_t>()[b];
      if (len < 0 || len > steps)
        return ctx.Fail("sequence_lens[", b, "] = ", len, " is outside [0, ", steps, "] (the time steps)");
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t from = t < len ? len - 1 - t : t;
        std::memcpy(dst + at(b, t) * row, src + at(b, from) * row, row);
      }
    }
    return Status::OK();
  }

 private:
  int64_t batch_axis_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuReverseSequenceKernels(KernelRegistry& registry) {
  registry.Register(Def("ReverseSequence")
                        .Versions(10)
                        .Constraint("T", {0}, AllTypes())
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Kernel<cpu::ReverseSequenceKernel>());
}

}  // namespace tob
