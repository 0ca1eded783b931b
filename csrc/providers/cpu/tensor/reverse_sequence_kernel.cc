// ReverseSequence: for each batch entry b, the first sequence_lens[b] steps along the time axis in
// reverse order, the rest as they are. Time and batch are dims 0 and 1 (in either order); each
// (time, batch) pair owns one contiguous row of the remaining dims, so the kernel moves rows of
// bytes. Strings move by element number (string_moves.h).
#include <cstring>

#include "framework/kernel_registry.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob {

namespace {

class ReverseSequenceKernel final : public OpKernel {
 public:
  ReverseSequenceKernel(const Node& node, bool time_major) : OpKernel(node), time_major_(time_major) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t batch_axis = 1, time_axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("batch_axis", &batch_axis, int64_t{1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("time_axis", &time_axis, int64_t{0}));
    if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) || batch_axis == time_axis)
      return InvalidModel(node.Describe(), ": batch_axis and time_axis must be 0 and 1 in some order, got ", batch_axis,
                          " and ", time_axis);
    return MakeKernel<ReverseSequenceKernel>(node, time_axis == 0);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& lens = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    if (x.rank() < 2) return ctx.Fail("input must have rank >= 2, got ", ShapeToString(x.shape()));
    const int64_t steps = x.dim(time_major_ ? 0 : 1);
    const int64_t batch = x.dim(time_major_ ? 1 : 0);
    if (lens.dtype() != DType::kInt64 || lens.rank() != 1 || lens.dim(0) != batch)
      return ctx.Fail("sequence_lens must be int64 [", batch, "], got ", DTypeName(lens.dtype()),
                      ShapeToString(lens.shape()));
    if (y.dtype() != x.dtype() || y.shape() != x.shape())
      return ctx.Fail("output ", DTypeName(y.dtype()), ShapeToString(y.shape()), " does not match input ",
                      DTypeName(x.dtype()), ShapeToString(x.shape()));
    const int64_t* len = lens.data<int64_t>();
    for (int64_t b = 0; b < batch; ++b)
      if (len[b] < 0 || len[b] > steps)
        return ctx.Fail("sequence_lens[", b, "] = ", len[b], " is outside [0, ", steps, "]");
    const size_t row_bytes =
        static_cast<size_t>(x.numel() / (steps * batch > 0 ? steps * batch : 1)) * DTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    auto row = [&](int64_t t, int64_t b) { return static_cast<size_t>(time_major_ ? t * batch + b : b * steps + t); };
    ParallelFor(ctx.thread_pool(), batch, tensor_ops::CopyGrain(steps * row_bytes), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b)
        for (int64_t t = 0; t < steps; ++t) {
          const int64_t from = t < len[b] ? len[b] - 1 - t : t;
          std::memcpy(dst + row(t, b) * row_bytes, src + row(from, b) * row_bytes, row_bytes);
        }
    });
    return Status::OK();
  }

 private:
  bool time_major_;  // time_axis 0, batch_axis 1
};

}  // namespace

void RegisterCpuReverseSequenceKernels(KernelRegistry& registry) {
  registry.Register(Def("ReverseSequence")
                        .Versions(10)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("I", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&ReverseSequenceKernel::Create, {0})));
}

}  // namespace tob
