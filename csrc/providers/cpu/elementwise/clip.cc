// Clip: bounds from attributes (opset 6-10) or optional scalar inputs (opset 11+); a missing
// bound does not clip. NaN passes through; min > max gives max everywhere (the ONNX rule).
#include <limits>
#include <optional>

#include "providers/cpu/elementwise/elementwise_type_sets.h"

namespace tob::ew {

namespace {

template <typename C>
struct ClipArrayOp {
  C lo, hi;
  template <typename In, typename Out>
  void operator()(const In* x, Out* y, int64_t n) const {
    const ClipOp op;
    for (int64_t i = 0; i < n; ++i) y[i] = op(x[i], lo, hi);
  }
};

template <typename C>
C NoBound(bool upper) {
  if constexpr (std::numeric_limits<C>::has_infinity)
    return upper ? std::numeric_limits<C>::infinity() : -std::numeric_limits<C>::infinity();
  else return upper ? std::numeric_limits<C>::max() : std::numeric_limits<C>::lowest();
}

class ClipKernel final : public OpKernel {
 public:
  ClipKernel(const Node& node, std::optional<float> lo, std::optional<float> hi)
      : OpKernel(node), attr_lo_(lo), attr_hi_(hi) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    std::optional<float> lo, hi;
    if (node.FindAttribute("min") != nullptr) {
      float v = 0.f;
      TOB_RETURN_IF_ERROR(node.GetAttr("min", &v));
      lo = v;
    }
    if (node.FindAttribute("max") != nullptr) {
      float v = 0.f;
      TOB_RETURN_IF_ERROR(node.GetAttr("max", &v));
      hi = v;
    }
    return MakeKernel<ClipKernel>(node, lo, hi);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    for (int i = 1; i < 3; ++i) {
      const Tensor* b = ctx.input(i);
      if (b == nullptr) continue;
      if (b->dtype() != x.dtype())
        return ctx.Fail(i == 1 ? "min" : "max", " has type ", DTypeName(b->dtype()), ", expected ",
                        DTypeName(x.dtype()));
      if (b->numel() != 1)
        return ctx.Fail(i == 1 ? "min" : "max", " must hold one value, got shape ", ShapeToString(b->shape()));
    }
    Status status;
    bool known = Dispatch(NumericList{}, x.dtype(), [&]<typename T>() {
      using C = ComputeType<T>;
      ClipArrayOp<C> op{Bound<T>(ctx.input(1), attr_lo_, false), Bound<T>(ctx.input(2), attr_hi_, true)};
      status = RunUnary<T, T>(ctx, x, *ctx.output(0), op);
    });
    return known ? status : UnsupportedType(ctx, x.dtype());
  }

 private:
  template <typename T>
  static ComputeType<T> Bound(const Tensor* input, std::optional<float> attr, bool upper) {
    using C = ComputeType<T>;
    if (input != nullptr) return static_cast<C>(input->data<T>()[0]);
    if (attr) return static_cast<C>(*attr);
    return NoBound<C>(upper);
  }

  std::optional<float> attr_lo_, attr_hi_;
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuClipKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  registry.Register(Def("Clip").Versions(6, 10).Constraint("T", {0}, F3()).Kernel<ClipKernel>());
  registry.Register(Def("Clip").Versions(11, 11).Constraint("T", {0, 1, 2}, F3()).Kernel<ClipKernel>());
  registry.Register(Def("Clip").Versions(12, 12).Constraint("T", {0, 1, 2}, NumericNoBf16()).Kernel<ClipKernel>());
  registry.Register(Def("Clip").Versions(13).Constraint("T", {0, 1, 2}, Numeric()).Kernel<ClipKernel>());
}

}  // namespace tob
