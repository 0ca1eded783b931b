// Ops that relabel a tensor's shape without moving its bytes (Reshape, Flatten, Squeeze,
// Unsqueeze, Identity), and Shape and Size, which report it. The relabelling ops are registered
// with Alias(0, 0): the output shape comes from the shape function, and the kernel copies only
// when the executor could not give the output the input's buffer.
#include <algorithm>

#include "framework/kernel_registry.h"
#include "providers/cpu/tensor/copy_utils.h"

namespace tob {

namespace {

class AliasOrCopyKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<AliasOrCopyKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    if (out->dtype() != in.dtype() || out->numel() != in.numel())
      return ctx.Fail("output ", DTypeName(out->dtype()), ShapeToString(out->shape()), " does not hold input ",
                      DTypeName(in.dtype()), ShapeToString(in.shape()));
    tensor_ops::CopyUnlessAliased(ctx.thread_pool(), in, out);
    return Status::OK();
  }
};

// Identity of a sequence or an optional (from opsets 14 and 16): the same value (sequences are
// immutable, so sharing one is a copy in every way that matters).
class IdentityValueKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<IdentityValueKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    RuntimeValue* out = ctx.output_value(0);
    if (out != nullptr) *out = *ctx.input_value(0);
    return Status::OK();
  }
};

class ShapeKernel final : public OpKernel {
 public:
  ShapeKernel(const Node& node, int64_t start, int64_t end) : OpKernel(node), start_(start), end_(end) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t start, end;
    TOB_RETURN_IF_ERROR(node.GetAttr("start", &start, 0));
    TOB_RETURN_IF_ERROR(node.GetAttr("end", &end, INT64_MAX));
    return MakeKernel<ShapeKernel>(node, start, end);
  }

  Status Compute(KernelContext& ctx) const override {
    const Shape& shape = ctx.input(0)->shape();
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t start = start_ < 0 ? start_ + rank : start_;
    int64_t end = end_ < 0 ? end_ + rank : end_;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, 0, rank);
    Tensor* out = ctx.output(0);
    if (out->numel() != std::max<int64_t>(end - start, 0))
      return ctx.Fail("output has ", out->numel(), " elements for dims [", start, ", ", end, ")");
    std::copy(shape.begin() + start, shape.begin() + start + out->numel(), out->data<int64_t>());
    return Status::OK();
  }

 private:
  int64_t start_, end_;
};

class SizeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<SizeKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    *ctx.output(0)->data<int64_t>() = ctx.input(0)->numel();
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuReshapeKernels(KernelRegistry& registry) {
  auto alias = [&](const char* op, int since, int end, bool second_input_is_axes) {
    KernelDef def = Def(op).Versions(since, end).Constraint("T", {0}, tensor_ops::DataMovementTypes()).Alias(0, 0);
    if (second_input_is_axes) def.Constraint("tensor(int64)", {1}, {DType::kInt64});
    registry.Register(def.Kernel<AliasOrCopyKernel>());
  };
  // Reshape 5..13 reads no attribute; 14 adds allowzero.
  alias("Reshape", 5, 13, true);
  alias("Reshape", 14, kMaxOpset, true);
  // Flatten and Squeeze/Unsqueeze accept negative axes from 11; Squeeze/Unsqueeze take axes as an
  // input from 13.
  alias("Flatten", 1, 10, false);
  alias("Flatten", 11, kMaxOpset, false);
  for (const char* op : {"Squeeze", "Unsqueeze"}) {
    alias(op, 1, 10, false);
    alias(op, 11, 12, false);
    alias(op, 13, kMaxOpset, true);
  }
  alias("Identity", 1, kMaxOpset, false);
  registry.Register(Def("Identity")
                        .Versions(14)
                        .Constraint("V", {0}, tensor_ops::DataMovementTypes())
                        .ValueKernel()
                        .Kernel<IdentityValueKernel>());
  // Shape 15 adds start/end.
  registry.Register(
      Def("Shape").Versions(1, 14).Constraint("T", {0}, tensor_ops::DataMovementTypes()).Kernel<ShapeKernel>());
  registry.Register(
      Def("Shape").Versions(15).Constraint("T", {0}, tensor_ops::DataMovementTypes()).Kernel<ShapeKernel>());
  registry.Register(Def("Size").Versions(1).Constraint("T", {0}, tensor_ops::DataMovementTypes()).Kernel<SizeKernel>());
}

}  // namespace tob
