// Gradient management of a training graph (com.microsoft, opset 1), on the CPU:
//   InPlaceAccumulator (old_sum, value, update_signal?) -> new_sum = old_sum + value
//                      (update_signal false: old_sum unchanged)
//   ZeroGradient (old_gradient, reset_signal) -> zeros of old_gradient's type and shape
//   ReduceAllL2 (X...) -> the L2 norm of all inputs together (the global gradient norm)
// The accumulator and the reset declare MayInplace (0, 0): held as session state, the sum is
// accumulated and reset in its own memory.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/float_convert.h"
#include "core/half.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/training/optimizer_inputs.h"
#include "training/multi_tensor_ops.h"
#include "training/optimizer_math.h"

namespace tob {

namespace {

using namespace optimizer_inputs;

constexpr int64_t kGrain = 1 << 15;

class InPlaceAccumulatorKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<InPlaceAccumulatorKernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& sum = *ctx.input(0);
    const Tensor* value = ctx.input(1);
    Tensor& out = *ctx.output(0);
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, value, 1, "value", sum.shape()));
    TOB_ASSIGN_OR_RETURN(bool update, ShouldUpdate(ctx, 2));
    if (!update) return PassThrough(ctx, &sum, &out);
    const float* sp = sum.data<float>();
    float* op = out.data<float>();
    const bool known = DispatchDType<float, Float16, BFloat16>(value->dtype(), [&]<typename V>() {
      const V* vp = value->data<V>();
      ParallelFor(ctx.thread_pool(), sum.numel(), kGrain, [&](int64_t begin, int64_t end) {
        alignas(32) float block[kConvertBlock];
        for (int64_t b = begin; b < end; b += kConvertBlock) {
          const int64_t len = std::min(kConvertBlock, end - b);
          ToFloat(vp + b, block, len);
          for (int64_t i = 0; i < len; ++i) op[b + i] = training::AccumulateGradient(sp[b + i], block[i]);
        }
      });
    });
    if (!known) return ctx.Fail("value must be float32, float16 or bfloat16, got ", DTypeName(value->dtype()));
    return Status::OK();
  }
};

class ZeroGradientKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<ZeroGradientKernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    Tensor& out = *ctx.output(0);
    // IEEE zero is all bits clear in every float type.
    if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());
    return Status::OK();
  }
};

class ReduceAllL2Kernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<ReduceAllL2Kernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    std::vector<const void*> tensors;
    std::vector<int64_t> numels;
    const DType dtype = ctx.input(0)->dtype();
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor& x = *ctx.input(i);
      if (x.dtype() != dtype)
        return ctx.Fail("inputs must share one dtype, got ", DTypeName(dtype), " and ", DTypeName(x.dtype()),
                        " (input ", i, ")");
      tensors.push_back(x.raw_data());
      numels.push_back(x.numel());
    }
    // Fixed segments summed in float64 in order: the same result for any thread count.
    TOB_ASSIGN_OR_RETURN(training::L2NormResult norm,
                         training::MultiTensorL2Norm(dtype, tensors, numels, ctx.thread_pool()));
    Tensor& y = *ctx.output(0);
    const bool known = DispatchDType<float, double, Float16, BFloat16>(y.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, double>) y.data<T>()[0] = norm.total;
      else y.data<T>()[0] = T(static_cast<float>(norm.total));
    });
    if (!known) return ctx.Fail("output Y must be a float type, got ", DTypeName(y.dtype()));
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuGradientControlKernels(KernelRegistry& registry) {
  const std::vector<DType> storage = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("InPlaceAccumulator")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0}, {DType::kFloat32})
                        .Constraint("T_GRAD", {1}, storage)
                        .Constraint("T_BOOL", {2}, {DType::kBool})
                        .MayInplace(0, 0)
                        .Kernel<InPlaceAccumulatorKernel>());
  registry.Register(Def("ZeroGradient")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T1", {0}, FloatTypes())
                        .MayInplace(0, 0)
                        .Kernel<ZeroGradientKernel>());
  registry.Register(Def("ReduceAllL2")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("TIn", {TypeConstraint::kAllInputs}, storage)
                        .Kernel<ReduceAllL2Kernel>());
}

}  // namespace tob
