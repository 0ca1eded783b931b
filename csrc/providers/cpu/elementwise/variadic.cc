// Min, Max, Sum, Mean over any number of inputs with multidirectional broadcasting: the first
// pair is combined into the output, then each further input is folded into it in place.
#include "providers/cpu/elementwise/elementwise_type_sets.h"

namespace tob::ew {

namespace {

// Multiplies the compute-typed result by 1/n (Mean's last step, before rounding to 16 bits).
struct ScaleInPlace {
  double scale = 1.0;
  template <typename T>
  void operator()(T* y, int64_t n) const {
    const T s = static_cast<T>(scale);
    for (int64_t i = 0; i < n; ++i) y[i] *= s;
  }
};

template <typename Op, typename Types, bool kMean = false>
class VariadicKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<VariadicKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const int n = ctx.num_inputs();
    Tensor& out = *ctx.output(0);
    for (int i = 0; i < n; ++i)
      if (ctx.input(i) == nullptr || ctx.input(i)->dtype() != out.dtype())
        return ctx.Fail("input ", i, " is missing or not of type ", DTypeName(out.dtype()));
    if (n == 1) {
      if (ctx.input(0)->shape() != out.shape())
        return ctx.Fail("output ", ShapeToString(out.shape()), " differs from the input ",
                        ShapeToString(ctx.input(0)->shape()));
      ParallelCopy(ctx, *ctx.input(0), out);
      return Status::OK();
    }
    Status status;
    bool known = Dispatch(Types{}, out.dtype(), [&]<typename T>() {
      for (int i = 1; i < n && status.ok(); ++i) {
        const Tensor& a = i == 1 ? *ctx.input(0) : out;
        if (kMean && i == n - 1)
          status = RunBinary<T, T, T>(ctx, a, *ctx.input(i), out, Op{}, kCheapGrain, ScaleInPlace{1.0 / n});
        else status = RunBinary<T, T, T>(ctx, a, *ctx.input(i), out, Op{});
      }
    });
    return known ? status : UnsupportedType(ctx, out.dtype());
  }
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuVariadicKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  const int all = TypeConstraint::kAllInputs;
  const std::vector<VersionTypes> minmax{{6, F3()}, {12, NumericNoBf16()}, {13, Numeric()}};
  RegisterByVersion<VariadicKernel<MinOp, NumericList>>(registry, "Min", {all}, minmax);
  RegisterByVersion<VariadicKernel<MaxOp, NumericList>>(registry, "Max", {all}, minmax);
  const std::vector<VersionTypes> sum{{6, F3()}, {13, F4()}};
  RegisterByVersion<VariadicKernel<AddOp, FloatList>>(registry, "Sum", {all}, sum);
  RegisterByVersion<VariadicKernel<AddOp, FloatList, true>>(registry, "Mean", {all}, sum);
}

}  // namespace tob
