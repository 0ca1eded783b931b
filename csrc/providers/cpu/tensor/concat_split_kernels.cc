// Concat and Split: both view every tensor as [pre, axis, post] and move whole [axis * post]
// blocks, so each is one memcpy per (pre index, input/output) pair.
#include "framework/kernel_registry.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob {

namespace {

// pre = product of dims before the axis, post = product of dims after it.
void PrePost(const Shape& shape, int64_t axis, int64_t* pre, int64_t* post) {
  *pre = 1;
  *post = 1;
  for (int64_t i = 0; i < axis; ++i) *pre *= shape[i];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) *post *= shape[i];
}

// Whether `part` equals `whole` everywhere except on `axis`.
bool SameOffAxis(const Shape& part, const Shape& whole, int64_t axis) {
  if (part.size() != whole.size()) return false;
  for (size_t i = 0; i < part.size(); ++i)
    if (static_cast<int64_t>(i) != axis && part[i] != whole[i]) return false;
  return true;
}

// Moves blocks between one big tensor ([pre, total_bytes] rows) and its parts ([pre, part_bytes]
// rows at byte offset part_offsets within each big row): Concat gathers, Split scatters.
void CopyParts(ThreadPool* pool, char* big, const std::vector<char*>& parts, const std::vector<size_t>& part_bytes,
               int64_t pre, size_t row_bytes, bool to_big) {
  std::vector<size_t> offsets(parts.size(), 0);
  for (size_t i = 1; i < parts.size(); ++i) offsets[i] = offsets[i - 1] + part_bytes[i - 1];
  if (pre == 1) {
    for (size_t i = 0; i < parts.size(); ++i) {
      if (to_big) tensor_ops::ParallelCopy(pool, big + offsets[i], parts[i], part_bytes[i]);
      else tensor_ops::ParallelCopy(pool, parts[i], big + offsets[i], part_bytes[i]);
    }
    return;
  }
  ParallelFor(pool, pre, tensor_ops::CopyGrain(row_bytes), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      char* row = big + static_cast<size_t>(p) * row_bytes;
      for (size_t i = 0; i < parts.size(); ++i) {
        char* part = parts[i] + static_cast<size_t>(p) * part_bytes[i];
        if (to_big) std::memcpy(row + offsets[i], part, part_bytes[i]);
        else std::memcpy(part, row + offsets[i], part_bytes[i]);
      }
    }
  });
}

class ConcatKernel final : public OpKernel {
 public:
  ConcatKernel(const Node& node, int64_t axis) : OpKernel(node), axis_(axis) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis));
    return MakeKernel<ConcatKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    Tensor* out = ctx.output(0);
    const int64_t rank = out->rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", rank);
    int64_t pre, post;
    PrePost(out->shape(), axis, &pre, &post);
    const size_t es = DTypeSize(out->dtype());
    std::vector<char*> parts;
    std::vector<size_t> bytes;
    int64_t total = 0;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* in = ctx.input(i);
      if (in == nullptr || in->dtype() != out->dtype() || !SameOffAxis(in->shape(), out->shape(), axis))
        return ctx.Fail("input ", i, " ", in ? ShapeToString(in->shape()) : std::string("(missing)"),
                        " does not fit output ", ShapeToString(out->shape()), " on axis ", axis);
      total += in->dim(axis);
      parts.push_back(static_cast<char*>(const_cast<void*>(in->raw_data())));
      bytes.push_back(static_cast<size_t>(in->dim(axis) * post) * es);
    }
    if (total != out->dim(axis)) return ctx.Fail("inputs add up to ", total, " on axis ", axis);
    if (out->numel() == 0) return Status::OK();
    CopyParts(ctx.thread_pool(), static_cast<char*>(out->raw_data()), parts, bytes, pre,
              static_cast<size_t>(total * post) * es, /*to_big=*/true);
    return Status::OK();
  }

 private:
  int64_t axis_;
};

// The split sizes are the output shapes the shape function computed from split / num_outputs.
class SplitKernel final : public OpKernel {
 public:
  SplitKernel(const Node& node, int64_t axis) : OpKernel(node), axis_(axis) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, 0));
    return MakeKernel<SplitKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    const int64_t rank = in.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", rank);
    int64_t pre, post;
    PrePost(in.shape(), axis, &pre, &post);
    const size_t es = DTypeSize(in.dtype());
    std::vector<char*> parts;
    std::vector<size_t> bytes;
    int64_t total = 0;
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      Tensor* out = ctx.output(i);
      if (out == nullptr || out->dtype() != in.dtype() || !SameOffAxis(out->shape(), in.shape(), axis))
        return ctx.Fail("output ", i, " does not fit input ", ShapeToString(in.shape()), " on axis ", axis);
      total += out->dim(axis);
      parts.push_back(static_cast<char*>(out->raw_data()));
      bytes.push_back(static_cast<size_t>(out->dim(axis) * post) * es);
    }
    if (total != in.dim(axis)) return ctx.Fail("outputs add up to ", total, " of ", in.dim(axis), " on axis ", axis);
    if (in.numel() == 0) return Status::OK();
    CopyParts(ctx.thread_pool(), static_cast<char*>(const_cast<void*>(in.raw_data())), parts, bytes, pre,
              static_cast<size_t>(total * post) * es, /*to_big=*/false);
    return Status::OK();
  }

 private:
  int64_t axis_;
};

}  // namespace

void RegisterCpuConcatSplitKernels(KernelRegistry& registry) {
  // Concat accepts negative axes from 11.
  registry.Register(Def("Concat")
                        .Versions(4, 10)
                        .Constraint("T", {TypeConstraint::kAllInputs}, tensor_ops::DataMovementTypes())
                        .Factory(tensor_ops::MovesStrings(&ConcatKernel::Create, {tensor_ops::kEveryInput})));
  registry.Register(Def("Concat")
                        .Versions(11)
                        .Constraint("T", {TypeConstraint::kAllInputs}, tensor_ops::DataMovementTypes())
                        .Factory(tensor_ops::MovesStrings(&ConcatKernel::Create, {tensor_ops::kEveryInput})));
  // Split: negative axes from 11, split as an input from 13, num_outputs from 18.
  registry.Register(Def("Split")
                        .Versions(2, 10)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Factory(tensor_ops::MovesStrings(&SplitKernel::Create, {0})));
  registry.Register(Def("Split")
                        .Versions(11, 12)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Factory(tensor_ops::MovesStrings(&SplitKernel::Create, {0})));
  registry.Register(Def("Split")
                        .Versions(13, 17)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&SplitKernel::Create, {0})));
  registry.Register(Def("Split")
                        .Versions(18)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&SplitKernel::Create, {0})));
}

}  // namespace tob
