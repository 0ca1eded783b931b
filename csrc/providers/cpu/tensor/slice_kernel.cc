// Slice: a strided view of the input (steps may be negative) copied out row by row.
#include "framework/kernel_registry.h"
#include "ops/tensor_params.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob {

namespace {

class SliceKernel final : public OpKernel {
 public:
  SliceKernel(const Node& node, bool from_inputs, SliceArgs args)
      : OpKernel(node), from_inputs_(from_inputs), args_(std::move(args)) {}

  // Opset 1-9 read starts/ends/axes from attributes; later opsets from inputs at every run.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool from_inputs) {
    SliceArgs args;
    if (!from_inputs) {
      TOB_RETURN_IF_ERROR(node.GetAttr("starts", &args.starts));
      TOB_RETURN_IF_ERROR(node.GetAttr("ends", &args.ends));
      TOB_RETURN_IF_ERROR(node.GetAttr("axes", &args.axes, std::vector<int64_t>{}));
    }
    return MakeKernel<SliceKernel>(node, from_inputs, std::move(args));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    SliceArgs args = args_;
    if (from_inputs_) {
      if (ctx.input(1) == nullptr || ctx.input(2) == nullptr) return ctx.Fail("starts and ends are required");
      args.starts = ctx.input(1)->ToInt64Vector();
      args.ends = ctx.input(2)->ToInt64Vector();
      if (const Tensor* axes = ctx.input(3)) args.axes = axes->ToInt64Vector();
      if (const Tensor* steps = ctx.input(4)) args.steps = steps->ToInt64Vector();
    }
    SliceSpec spec;
    Status s = ResolveSlice(in.shape(), args, &spec);
    if (!s.ok()) return ctx.Fail(s.message());
    if (out->shape() != spec.length)
      return ctx.Fail("output shape ", ShapeToString(out->shape()), " differs from the slice's ",
                      ShapeToString(spec.length));
    if (out->numel() == 0) return Status::OK();
    const std::vector<int64_t> in_strides = ContiguousStrides(in.shape());
    std::vector<int64_t> strides(in_strides.size());
    int64_t offset = 0;
    for (size_t i = 0; i < in_strides.size(); ++i) {
      offset += spec.first[i] * in_strides[i];
      strides[i] = spec.step[i] * in_strides[i];
    }
    const size_t es = DTypeSize(in.dtype());
    tensor_ops::StridedCopy(ctx.thread_pool(), static_cast<const char*>(in.raw_data()) + offset * es, out->raw_data(),
                            es, out->shape(), strides);
    return Status::OK();
  }

 private:
  bool from_inputs_;
  SliceArgs args_;
};

KernelFactory SliceFactory(bool from_inputs) {
  return [=](const Node& node) { return SliceKernel::Create(node, from_inputs); };
}

}  // namespace

void RegisterCpuSliceKernels(KernelRegistry& registry) {
  // Slice takes starts/ends/axes as inputs (and adds steps) from 10; negative axes from 11.
  registry.Register(Def("Slice")
                        .Versions(1, 9)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Factory(tensor_ops::MovesStrings(SliceFactory(false), {0})));
  for (auto [since, end] : {std::pair{10, 10}, std::pair{11, kMaxOpset}}) {
    registry.Register(Def("Slice")
                          .Versions(since, end)
                          .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                          .Constraint("Tind", {1, 2, 3, 4}, {DType::kInt32, DType::kInt64})
                          .Factory(tensor_ops::MovesStrings(SliceFactory(true), {0})));
  }
}

}  // namespace tob
