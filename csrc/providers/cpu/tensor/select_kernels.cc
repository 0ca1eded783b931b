// Data-dependent selections: NonZero (the indices of the non-zero elements) and Compress (the
// slices along an axis whose condition is true). Their output size depends on the values, so the
// kernels allocate their outputs (KernelAllocatesOutputs).
#include <cstring>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob {

namespace {

using AnyList = ew::TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                             uint32_t, uint64_t, bool>;

// Whether x is not zero, on the value (so -0.0 is zero and NaN is not).
template <typename T>
bool NonZeroValue(T x) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return static_cast<float>(x) != 0.0f;
  else return x != T(0);
}

class NonZeroKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<NonZeroKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    std::vector<int64_t> flat;  // flat indices of the non-zero elements, in row-major order
    bool known = ew::Dispatch(AnyList{}, x.dtype(), [&]<typename T>() {
      const T* p = x.data<T>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i)
        if (NonZeroValue(p[i])) flat.push_back(i);
    });
    if (!known) return ctx.Fail("unsupported input type ", DTypeName(x.dtype()));
    const int64_t rank = x.rank(), count = static_cast<int64_t>(flat.size());
    TOB_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(DType::kInt64, {rank, count}, CpuAllocator::Default()));
    int64_t* o = out.data<int64_t>();
    // Row d holds each element's coordinate along axis d (numpy.nonzero's layout).
    for (int64_t k = 0; k < count; ++k) {
      int64_t rest = flat[k];
      for (int64_t d = rank - 1; d >= 0; --d) {
        o[d * count + k] = rest % x.dim(d);
        rest /= x.dim(d);
      }
    }
    *ctx.output(0) = std::move(out);
    return Status::OK();
  }
};

class CompressKernel final : public OpKernel {
 public:
  CompressKernel(const Node& node, std::optional<int64_t> axis) : OpKernel(node), axis_(axis) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::optional<int64_t> axis;
    if (node.FindAttribute("axis") != nullptr) {
      int64_t a = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("axis", &a));
      axis = a;
    }
    return MakeKernel<CompressKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& condition = *ctx.input(1);
    if (condition.rank() != 1) return ctx.Fail("condition must be 1-D, got ", ShapeToString(condition.shape()));
    // Without an axis the input is read flattened.
    int64_t axis = 0;
    Shape shape = axis_ ? x.shape() : Shape{x.numel()};
    if (axis_) {
      axis = *axis_ < 0 ? *axis_ + x.rank() : *axis_;
      if (axis < 0 || axis >= x.rank())
        return ctx.Fail("axis ", *axis_, " is out of range for an input of rank ", x.rank());
    }
    const int64_t extent = shape[axis];
    if (condition.numel() > extent)
      return ctx.Fail("condition has ", condition.numel(), " entries but axis ", axis, " has ", extent,
                      " (a shorter condition leaves the rest out; a longer one is an error)");
    std::vector<int64_t> kept;
    const bool* c = condition.data<bool>();
    for (int64_t i = 0; i < condition.numel(); ++i)
      if (c[i]) kept.push_back(i);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
    for (int64_t d = axis + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
    Shape out_shape = shape;
    out_shape[axis] = static_cast<int64_t>(kept.size());
    TOB_ASSIGN_OR_RETURN(Tensor out, Tensor::Allocate(x.dtype(), out_shape, CpuAllocator::Default()));
    const size_t block = static_cast<size_t>(inner) * DTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i : kept) {
        std::memcpy(dst, src + (o * extent + i) * block, block);
        dst += block;
      }
    *ctx.output(0) = std::move(out);
    return Status::OK();
  }

 private:
  std::optional<int64_t> axis_;
};

}  // namespace

void RegisterCpuSelectKernels(KernelRegistry& registry) {
  registry.Register(
      Def("NonZero").Versions(9).Constraint("T", {0}, AllTypes()).KernelAllocatesOutputs().Kernel<NonZeroKernel>());
  registry.Register(Def("Compress")
                        .Versions(9)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("T1", {1}, {DType::kBool})
                        .KernelAllocatesOutputs()
                        .Factory(tensor_ops::MovesStrings(&CompressKernel::Create, {0})));
}

}  // namespace tob
