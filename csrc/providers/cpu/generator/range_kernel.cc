// Range: start + i * delta for i in [0, n), n computed by the shape function from the values.
// Integers are computed exactly in int64; floating types in float64 and then rounded, as numpy's
// arange (the ONNX reference) does.
#include <memory>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/generator/fill.h"

namespace tob::cpu {
namespace {

class RangeKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<RangeKernel>(node); }
  explicit RangeKernel(const Node& node) : OpKernel(node) {}

  Status Compute(KernelContext& ctx) const override {
    for (int i = 0; i < 3; ++i)
      if (ctx.input(i)->numel() != 1) return ctx.Fail("input ", i, " must hold one value");
    Tensor& out = *ctx.output(0);
    const int64_t n = out.numel();
    bool known =
        DispatchDType<float, double, Float16, BFloat16, int16_t, int32_t, int64_t>(out.dtype(), [&]<typename T>() {
          T* y = out.data<T>();
          if constexpr (std::is_integral_v<T>) {
            int64_t start = ctx.input(0)->ElementAsInt64(0), delta = ctx.input(2)->ElementAsInt64(0);
            ParallelFor(ctx.thread_pool(), n, kFillGrain, [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) y[i] = static_cast<T>(start + i * delta);
            });
          } else {
            double start = ctx.input(0)->ElementAsDouble(0), delta = ctx.input(2)->ElementAsDouble(0);
            ParallelFor(ctx.thread_pool(), n, kFillGrain, [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) {
                double v = start + static_cast<double>(i) * delta;
                if constexpr (std::is_floating_point_v<T>) y[i] = static_cast<T>(v);
                else y[i] = T(static_cast<float>(v));
              }
            });
          }
        });
    if (!known) return ctx.Fail("dtype ", DTypeName(out.dtype()), " is not supported");
    return Status::OK();
  }
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuRangeKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  using enum DType;
  registry.Register(Def("Range")
                        .Versions(11)
                        .Constraint("T", {0, 1, 2}, {kFloat32, kFloat64, kFloat16, kBFloat16, kInt16, kInt32, kInt64})
                        .Kernel<RangeKernel>());
}

}  // namespace tob
