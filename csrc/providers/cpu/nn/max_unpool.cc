// MaxUnpool (opsets 9, 11, 22): Y is zero except Y[I[e]] = X[e], I being MaxPool's flat indices
// (storage order 0) into the unpooled shape [N, C, (D - 1) * stride - pads + kernel...]. With the
// optional output_shape input the result is that larger shape with the unpooled block at its
// start, as onnx's reference places it (the indices stay flat indices of the unpooled shape).
// An index outside the unpooled tensor is an error naming the node.
#include <algorithm>
#include <cstring>
#include <memory>

#include "framework/kernel_registry.h"
#include "ops/nn_window_attributes.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

class MaxUnpoolKernel final : public OpKernel {
 public:
  MaxUnpoolKernel(const Node& node, WindowAttributes attrs) : OpKernel(node), attrs_(std::move(attrs)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(node));
    return MakeKernel<MaxUnpoolKernel>(node, std::move(attrs));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    if (indices.shape() != x.shape())
      return ctx.Fail("I must have X's shape ", ShapeToString(x.shape()), ", got ", ShapeToString(indices.shape()));
    TOB_ASSIGN_OR_RETURN(WindowAttributes a, attrs_.Resolve(node(), x.rank() - 2, {}));
    const size_t r = a.kernel_shape.size();
    Shape unpooled{x.dim(0), x.dim(1)};
    for (size_t i = 0; i < r; ++i)
      unpooled.push_back((x.dim(static_cast<int64_t>(i) + 2) - 1) * a.strides[i] - (a.pads[i] + a.pads[i + r]) +
                         a.kernel_shape[i]);
    const int64_t total = NumElements(unpooled);
    const std::vector<int64_t> y_strides = ContiguousStrides(y.shape());
    std::memset(y.raw_data(), 0, y.nbytes());
    const int64_t* idx = indices.data<int64_t>();
    for (int64_t e = 0; e < x.numel(); ++e)
      if (idx[e] < 0 || idx[e] >= total)
        return ctx.Fail("index I[", e, "] = ", idx[e], " is outside the unpooled tensor ", ShapeToString(unpooled));
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      const T* in = x.data<T>();
      T* out = y.data<T>();
      for (int64_t e = 0; e < x.numel(); ++e) {
        int64_t rest = idx[e], offset = 0;
        for (int64_t d = static_cast<int64_t>(unpooled.size()) - 1; d >= 0; --d) {
          offset += (rest % unpooled[d]) * y_strides[d];
          rest /= unpooled[d];
        }
        out[offset] = in[e];
      }
    });
    return known ? Status::OK() : ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
  }

 private:
  WindowAttributes attrs_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuMaxUnpoolKernels(KernelRegistry& registry) {
  const std::vector<DType> f3{DType::kFloat32, DType::kFloat64, DType::kFloat16};
  const std::vector<DType> f4{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("MaxUnpool")
                        .Versions(9, 21)
                        .Constraint("T1", {0}, f3)
                        .Constraint("T2", {1, 2}, {DType::kInt64})
                        .Kernel<cpu::MaxUnpoolKernel>());
  registry.Register(Def("MaxUnpool")
                        .Versions(22)
                        .Constraint("T1", {0}, f4)
                        .Constraint("T2", {1, 2}, {DType::kInt64})
                        .Kernel<cpu::MaxUnpoolKernel>());
}

}  // namespace tob
