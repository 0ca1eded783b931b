// The sequence ops. All are value kernels (KernelDef::ValueKernel): they read sequences through
// KernelContext::input_value and set their outputs themselves. A sequence is immutable, so
// Insert / Erase make a new one that shares the other tensors' buffers. Tensors the ops make
// (SplitToSequence's pieces, ConcatFromSequence's result, SequenceLength) live on the host heap,
// never in a run's arena; the executor keeps the tensors that go into sequences out of the arena
// too (docs/architecture.md, "Sequence and optional values").
#include <cstring>
#include <string>

#include "framework/kernel_registry.h"

namespace tob {

namespace {

StatusOr<const TensorSequence*> SequenceInput(const KernelContext& ctx, int i) {
  const RuntimeValue* v = ctx.input_value(i);
  if (v == nullptr || !v->is_sequence())
    return ctx.Fail("input ", i, " must be a sequence, got ", v == nullptr ? std::string("nothing") : v->Describe());
  return &v->sequence();
}

StatusOr<Tensor> HeapTensor(DType dtype, const Shape& shape) {
  return Tensor::Allocate(dtype, shape, CpuAllocator::Default());
}

// A position input (int32/int64 scalar) in [-n, n - 1], or [-n, n] when inserting; negative
// positions count from the end. `fallback` when the input is omitted.
StatusOr<int64_t> Position(const KernelContext& ctx, int i, int64_t n, bool inserting, int64_t fallback) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return fallback;
  if (t->numel() != 1 || t->rank() > 1 || (t->dtype() != DType::kInt32 && t->dtype() != DType::kInt64))
    return ctx.Fail("position must be an int32 or int64 scalar, got ", DTypeName(t->dtype()),
                    ShapeToString(t->shape()));
  const int64_t p = t->ElementAsInt64(0);
  const int64_t hi = inserting ? n : n - 1;
  if (p < -n || p > hi)
    return ctx.Fail("position ", p, " is out of range for a sequence of ", n, " tensors (allowed: ", -n, " to ", hi,
                    ")");
  return p < 0 ? p + n : p;
}

// Copies `rows` rows of `row_elems` elements between strided places: from src + r * src_stride to
// dst + r * dst_stride (in elements). Strings are assigned one by one, everything else memcpy'd.
void CopyRows(const Tensor& src, int64_t src_offset, int64_t src_stride, Tensor& dst, int64_t dst_offset,
              int64_t dst_stride, int64_t rows, int64_t row_elems) {
  if (src.dtype() == DType::kString) {
    const std::string* s = src.data<std::string>();
    std::string* d = dst.data<std::string>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < row_elems; ++e) d[dst_offset + r * dst_stride + e] = s[src_offset + r * src_stride + e];
    return;
  }
  const size_t es = DTypeSize(src.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(dst.raw_data());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + (dst_offset + r * dst_stride) * es, s + (src_offset + r * src_stride) * es,
                static_cast<size_t>(row_elems) * es);
}

class SequenceEmptyKernel final : public OpKernel {
 public:
  SequenceEmptyKernel(const Node& node, DType dtype) : OpKernel(node), dtype_(dtype) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t code = static_cast<int64_t>(DType::kFloat32);
    TOB_RETURN_IF_ERROR(node.GetAttr("dtype", &code, code));
    const DType dtype = DTypeFromOnnx(static_cast<int32_t>(code));
    if (dtype == DType::kUndefined) return InvalidModel(node.Describe(), ": dtype ", code, " is not supported");
    return MakeKernel<SequenceEmptyKernel>(node, dtype);
  }
  Status Compute(KernelContext& ctx) const override {
    *ctx.output_value(0) = RuntimeValue::OfSequence(dtype_, {});
    return Status::OK();
  }

 private:
  DType dtype_;
};

class SequenceConstructKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<SequenceConstructKernel>(node);
  }
  Status Compute(KernelContext& ctx) const override {
    std::vector<Tensor> tensors;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      if (t == nullptr) return ctx.Fail("input ", i, " must be a tensor");
      if (t->dtype() != ctx.input(0)->dtype())
        return ctx.Fail("input ", i, " is ", DTypeName(t->dtype()), ", input 0 is ", DTypeName(ctx.input(0)->dtype()));
      tensors.push_back(*t);
    }
    *ctx.output_value(0) = RuntimeValue::OfSequence(ctx.input(0)->dtype(), std::move(tensors));
    return Status::OK();
  }
};

class SequenceAtKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<SequenceAtKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(const TensorSequence* seq, SequenceInput(ctx, 0));
    const int64_t n = static_cast<int64_t>(seq->tensors.size());
    if (n == 0) return ctx.Fail("the sequence is empty: no position is in range");
    TOB_ASSIGN_OR_RETURN(int64_t p, Position(ctx, 1, n, false, 0));
    *ctx.output_value(0) = seq->tensors[static_cast<size_t>(p)];
    return Status::OK();
  }
};

class SequenceInsertKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<SequenceInsertKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(const TensorSequence* seq, SequenceInput(ctx, 0));
    const Tensor* t = ctx.input(1);
    if (t == nullptr) return ctx.Fail("input 1 must be a tensor");
    if (t->dtype() != seq->dtype)
      return ctx.Fail("tensor is ", DTypeName(t->dtype()), " but the sequence holds ", DTypeName(seq->dtype));
    const int64_t n = static_cast<int64_t>(seq->tensors.size());
    TOB_ASSIGN_OR_RETURN(int64_t p, Position(ctx, 2, n, true, n));
    std::vector<Tensor> tensors = seq->tensors;
    tensors.insert(tensors.begin() + p, *t);
    *ctx.output_value(0) = RuntimeValue::OfSequence(seq->dtype, std::move(tensors));
    return Status::OK();
  }
};

class SequenceEraseKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<SequenceEraseKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(const TensorSequence* seq, SequenceInput(ctx, 0));
    const int64_t n = static_cast<int64_t>(seq->tensors.size());
    if (n == 0) return ctx.Fail("cannot erase from an empty sequence");
    TOB_ASSIGN_OR_RETURN(int64_t p, Position(ctx, 1, n, false, n - 1));
    std::vector<Tensor> tensors = seq->tensors;
    tensors.erase(tensors.begin() + p);
    *ctx.output_value(0) = RuntimeValue::OfSequence(seq->dtype, std::move(tensors));
    return Status::OK();
  }
};

class SequenceLengthKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<SequenceLengthKernel>(node); }
  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(const TensorSequence* seq, SequenceInput(ctx, 0));
    *ctx.output_value(0) = Tensor::FromVector<int64_t>({static_cast<int64_t>(seq->tensors.size())}, {});
    return Status::OK();
  }
};

class SplitToSequenceKernel final : public OpKernel {
 public:
  SplitToSequenceKernel(const Node& node, int64_t axis, bool keepdims)
      : OpKernel(node), axis_(axis), keepdims_(keepdims) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = 0, keepdims = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, int64_t{0}));
    TOB_RETURN_IF_ERROR(node.GetAttr("keepdims", &keepdims, int64_t{1}));
    return MakeKernel<SplitToSequenceKernel>(node, axis, keepdims != 0);
  }

  // No split: pieces of 1 along the axis (squeezed unless keepdims); a scalar split: pieces of
  // that size (the last one shorter); a 1-D split: those sizes, which must add up to the axis.
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const int64_t rank = x.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", rank);
    const int64_t extent = x.dim(axis);
    std::vector<int64_t> sizes;
    bool squeeze = false;
    const Tensor* split = ctx.input(1);
    if (split == nullptr) {
      sizes.assign(static_cast<size_t>(extent), 1);
      squeeze = !keepdims_;
    } else if (split->rank() == 0) {
      const int64_t s = split->ElementAsInt64(0);
      if (s <= 0) return ctx.Fail("split must be positive, got ", s);
      for (int64_t at = 0; at < extent; at += s) sizes.push_back(std::min(s, extent - at));
    } else if (split->rank() == 1) {
      int64_t total = 0;
      for (int64_t v : split->ToInt64Vector()) {
        if (v < 0) return ctx.Fail("split sizes must be >= 0, got ", v);
        sizes.push_back(v);
        total += v;
      }
      if (total != extent)
        return ctx.Fail("split sizes add up to ", total, " but axis ", axis, " has ", extent, " elements");
    } else {
      return ctx.Fail("split must be a scalar or a 1-D tensor, got shape ", ShapeToString(split->shape()));
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis + 1; d < rank; ++d) inner *= x.dim(d);
    std::vector<Tensor> pieces;
    int64_t start = 0;
    for (int64_t size : sizes) {
      Shape shape = x.shape();
      shape[static_cast<size_t>(axis)] = size;
      if (squeeze) shape.erase(shape.begin() + axis);
      TOB_ASSIGN_OR_RETURN(Tensor piece, HeapTensor(x.dtype(), shape));
      CopyRows(x, start * inner, extent * inner, piece, 0, size * inner, outer, size * inner);
      pieces.push_back(std::move(piece));
      start += size;
    }
    *ctx.output_value(0) = RuntimeValue::OfSequence(x.dtype(), std::move(pieces));
    return Status::OK();
  }

 private:
  int64_t axis_;
  bool keepdims_;
};

class ConcatFromSequenceKernel final : public OpKernel {
 public:
  ConcatFromSequenceKernel(const Node& node, int64_t axis, bool new_axis)
      : OpKernel(node), axis_(axis), new_axis_(new_axis) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = 0, new_axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis));
    TOB_RETURN_IF_ERROR(node.GetAttr("new_axis", &new_axis, int64_t{0}));
    return MakeKernel<ConcatFromSequenceKernel>(node, axis, new_axis != 0);
  }

  // Concat of the sequence's tensors along axis, or (new_axis) their stack along a new axis.
  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(const TensorSequence* seq, SequenceInput(ctx, 0));
    if (seq->tensors.empty()) return ctx.Fail("the sequence is empty: there is nothing to concatenate");
    const Shape& first = seq->tensors.front().shape();
    const int64_t in_rank = static_cast<int64_t>(first.size());
    const int64_t out_rank = in_rank + (new_axis_ ? 1 : 0);
    const int64_t axis = axis_ < 0 ? axis_ + out_rank : axis_;
    if (axis < 0 || axis >= out_rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", out_rank);
    Shape out_shape = first;
    if (new_axis_) out_shape.insert(out_shape.begin() + axis, 0);
    out_shape[static_cast<size_t>(axis)] = 0;
    for (size_t k = 0; k < seq->tensors.size(); ++k) {
      const Shape& s = seq->tensors[k].shape();
      bool same = static_cast<int64_t>(s.size()) == in_rank;
      for (int64_t d = 0; same && d < in_rank; ++d) same = (!new_axis_ && d == axis) || s[d] == first[d];
      if (!same)
        return ctx.Fail(
            "tensor ", k, " has shape ", ShapeToString(s), " but tensor 0 has ", ShapeToString(first),
            new_axis_ ? " (stacking needs one shape)" : StrCat(" (they may differ only in axis ", axis, ")"));
      out_shape[static_cast<size_t>(axis)] += new_axis_ ? 1 : s[static_cast<size_t>(axis)];
    }
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out_shape[d];
    for (int64_t d = axis + 1; d < out_rank; ++d) inner *= out_shape[d];
    TOB_ASSIGN_OR_RETURN(Tensor out, HeapTensor(seq->dtype, out_shape));
    const int64_t out_extent = out_shape[static_cast<size_t>(axis)];
    int64_t at = 0;
    for (const Tensor& t : seq->tensors) {
      const int64_t size = new_axis_ ? 1 : t.dim(axis);
      CopyRows(t, 0, size * inner, out, at * inner, out_extent * inner, outer, size * inner);
      at += size;
    }
    *ctx.output_value(0) = std::move(out);
    return Status::OK();
  }

 private:
  int64_t axis_;
  bool new_axis_;
};

}  // namespace

void RegisterCpuSequenceKernels(KernelRegistry& registry) {
  const std::vector<DType> types = AllTypesAndString();
  const std::vector<DType> positions{DType::kInt32, DType::kInt64};
  registry.Register(Def("SequenceEmpty").Versions(11).ValueKernel().Kernel<SequenceEmptyKernel>());
  registry.Register(Def("SequenceConstruct")
                        .Versions(11)
                        .Constraint("T", {TypeConstraint::kAllInputs}, types)
                        .ValueKernel()
                        .Kernel<SequenceConstructKernel>());
  registry.Register(Def("SequenceAt")
                        .Versions(11)
                        .Constraint("S", {0}, types)
                        .Constraint("I", {1}, positions)
                        .ValueKernel()
                        .Kernel<SequenceAtKernel>());
  registry.Register(Def("SequenceInsert")
                        .Versions(11)
                        .Constraint("S", {0, 1}, types)
                        .Constraint("I", {2}, positions)
                        .ValueKernel()
                        .Kernel<SequenceInsertKernel>());
  registry.Register(Def("SequenceErase")
                        .Versions(11)
                        .Constraint("S", {0}, types)
                        .Constraint("I", {1}, positions)
                        .ValueKernel()
                        .Kernel<SequenceEraseKernel>());
  registry.Register(
      Def("SequenceLength").Versions(11).Constraint("S", {0}, types).ValueKernel().Kernel<SequenceLengthKernel>());
  registry.Register(Def("SplitToSequence")
                        .Versions(11)
                        .Constraint("T", {0}, types)
                        .Constraint("I", {1}, positions)
                        .ValueKernel()
                        .Kernel<SplitToSequenceKernel>());
  registry.Register(Def("ConcatFromSequence")
                        .Versions(11)
                        .Constraint("S", {0}, types)
                        .ValueKernel()
                        .Kernel<ConcatFromSequenceKernel>());
}

}  // namespace tob
