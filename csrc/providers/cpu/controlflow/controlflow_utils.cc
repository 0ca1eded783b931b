#include "providers/cpu/controlflow/controlflow_utils.h"

#include <algorithm>
#include <cstring>

#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/transpose.h"

namespace tob::controlflow {

StatusOr<bool> ReadCondition(const KernelContext& ctx, const Tensor& t, const std::string& what) {
  if (t.dtype() != DType::kBool || t.numel() != 1)
    return ctx.Fail(what, " must be a bool tensor of one element, got ", DTypeName(t.dtype()),
                    ShapeToString(t.shape()));
  if (t.device().type != DeviceType::kCPU) return ctx.Fail(what, " is not in host memory");
  return *t.data<bool>();
}

Tensor Int64Scalar(int64_t value, const Shape& shape) { return Tensor::FromVector<int64_t>({value}, shape); }

Tensor BoolScalar(bool value, const Shape& shape) { return Tensor::FromVector<bool>({value}, shape); }

Shape OneElementShape(const Graph& body, size_t input) {
  if (input >= body.inputs().size()) return {};
  const ValueType& t = body.inputs()[input]->type();
  if (!t.shape || t.shape->size() > 1) return {};
  std::optional<Shape> s = ConcreteShape(*t.shape);
  return s && NumElements(*s) == 1 ? *s : Shape{};
}

Tensor SliceFirst(const Tensor& t, int64_t i) {
  TOB_ENFORCE(!IsPackedDType(t.dtype()), "SliceFirst of packed ", DTypeName(t.dtype()),
              " (the shape function refuses it)");
  Shape rest(t.shape().begin() + 1, t.shape().end());
  const size_t bytes = static_cast<size_t>(NumElements(rest)) * DTypeSize(t.dtype());
  return Tensor(t.dtype(), std::move(rest), t.buffer(), t.byte_offset() + static_cast<size_t>(i) * bytes);
}

namespace {

StatusOr<Tensor> Permuted(ThreadPool* pool, const Tensor& t, const std::vector<int64_t>& perm) {
  Shape shape(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) shape[i] = t.shape()[perm[i]];
  TOB_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(t.dtype(), shape, CpuAllocator::Default()));
  if (t.nbytes() > 0)
    tensor_ops::TransposeBytes(pool, t.raw_data(), out.raw_data(), DTypeSize(t.dtype()), t.shape(), perm);
  return out;
}

}  // namespace

StatusOr<Tensor> AxisToFront(ThreadPool* pool, const Tensor& t, int64_t axis) {
  if (axis == 0) return t;
  std::vector<int64_t> perm{axis};
  for (int64_t d = 0; d < t.rank(); ++d)
    if (d != axis) perm.push_back(d);
  return Permuted(pool, t, perm);
}

StatusOr<Tensor> FrontToAxis(ThreadPool* pool, const Tensor& t, int64_t axis) {
  if (axis == 0) return t;
  // Output dim d comes from input dim: 0 at `axis`, d + 1 before it, d after it.
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < t.rank(); ++d) perm.push_back(d == axis ? 0 : d < axis ? d + 1 : d);
  return Permuted(pool, t, perm);
}

StatusOr<Tensor> CopyOf(ThreadPool* pool, const Tensor& t) {
  TOB_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(t.dtype(), t.shape(), CpuAllocator::Default()));
  tensor_ops::ParallelCopy(pool, out.raw_data(), t.raw_data(), t.nbytes());
  return out;
}

Status StackedOutput::Put(ThreadPool* pool, int64_t index, const Tensor& slice, int64_t iteration) {
  if (slice.device().type != DeviceType::kCPU)
    return RuntimeError(what_, ": iteration ", iteration, " is not in host memory");
  if (IsPackedDType(slice.dtype()))  // the shape functions refuse these; a body typed only at run time lands here
    return RuntimeError(what_, " is ", DTypeName(slice.dtype()), " at iteration ", iteration,
                        ": a packed sub-byte type cannot be stacked a whole number of bytes per element");
  if (!data_.defined()) {
    Shape shape{length_};
    shape.insert(shape.end(), slice.shape().begin(), slice.shape().end());
    TOB_ASSIGN_OR_RETURN(data_, Tensor::Allocate(slice.dtype(), shape, CpuAllocator::Default()));
    first_iteration_ = iteration;
  } else if (slice.dtype() != data_.dtype() ||
             !std::equal(slice.shape().begin(), slice.shape().end(), data_.shape().begin() + 1, data_.shape().end()) ||
             slice.rank() + 1 != data_.rank()) {
    Shape first(data_.shape().begin() + 1, data_.shape().end());
    return RuntimeError(what_, " is ", DTypeName(slice.dtype()), ShapeToString(slice.shape()), " at iteration ",
                        iteration, " but ", DTypeName(data_.dtype()), ShapeToString(first), " at iteration ",
                        first_iteration_, " (a scan output keeps one shape across iterations)");
  }
  Tensor dst = SliceFirst(data_, index);
  tensor_ops::ParallelCopy(pool, dst.raw_data(), slice.raw_data(), slice.nbytes());
  return Status::OK();
}

Status StackedOutput::ZeroRest(int64_t from, const ValueType& declared) {
  if (from >= length_) return Status::OK();
  if (!data_.defined()) {
    std::optional<Shape> slice = declared.shape ? ConcreteShape(*declared.shape) : std::nullopt;
    if (!slice || declared.dtype == DType::kUndefined)
      return RuntimeError(what_, ": no iteration ran and the subgraph declares no complete type (", declared.ToString(),
                          "), so the padding cannot be made");
    Shape shape{length_};
    shape.insert(shape.end(), slice->begin(), slice->end());
    TOB_ASSIGN_OR_RETURN(data_, Tensor::Allocate(declared.dtype, shape, CpuAllocator::Default()));
  }
  const size_t slice_bytes = data_.nbytes() / static_cast<size_t>(length_);
  std::memset(static_cast<char*>(data_.raw_data()) + static_cast<size_t>(from) * slice_bytes, 0,
              static_cast<size_t>(length_ - from) * slice_bytes);
  return Status::OK();
}

StatusOr<Tensor> StackedOutput::Finish(const ValueType& declared) {
  if (data_.defined()) return data_;
  if (length_ != 0) return RuntimeError(what_, ": ", length_, " slices expected, none given");
  if (declared.dtype == DType::kUndefined)
    return RuntimeError(what_,
                        ": no iteration ran and the subgraph does not say its dtype, so the empty output "
                        "cannot be made");
  Shape shape{0};
  if (declared.shape)
    for (const Dim& d : *declared.shape) shape.push_back(d.is_known() ? d.value : 0);
  return Tensor::Allocate(declared.dtype, shape, CpuAllocator::Default());
}

}  // namespace tob::controlflow
