// The optimizer and gradient-management ops on the GPU (kernels/training/optimizer_ops.cu), with the CPU
// kernels' semantics and attribute checks (training/optimizer_attributes.h). The one-value inputs
// (learning rate, step, loss scale, norm, update signal) and the norms' partial sums are read back
// to the host, so the per-call scalars come from the same host code as on the CPU: one
// synchronisation per node.
#include <cuda_runtime_api.h>

#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "kernels/training/optimizer_ops.h"
#include "providers/cuda/cuda_common.h"
#include "providers/cuda/cuda_device_context.h"
#include "training/optimizer_attributes.h"

namespace tob {

namespace {

// The value of a one-element device input as a double; nullopt when the input is omitted.
StatusOr<std::optional<double>> ReadScalar(const KernelContext& ctx, const CudaDeviceContext& dev, int i,
                                           const char* name) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return std::optional<double>();
  if (t->numel() != 1)
    return ctx.Fail("input ", i, " (", name, ") must hold one value, got shape ", ShapeToString(t->shape()));
  TOB_ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(t->dtype(), t->shape(), CpuAllocator::Default()));
  TOB_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host.raw_data(), t->raw_data(), t->nbytes(), cudaMemcpyDeviceToHost, dev.stream()));
  TOB_RETURN_IF_ERROR(dev.Synchronize());
  return std::optional<double>(host.ElementAsDouble(0));
}

StatusOr<double> RequiredScalar(const KernelContext& ctx, const CudaDeviceContext& dev, int i, const char* name) {
  TOB_ASSIGN_OR_RETURN(std::optional<double> v, ReadScalar(ctx, dev, i, name));
  if (!v) return ctx.Fail("input ", i, " (", name, ") is required");
  return *v;
}

StatusOr<bool> ShouldUpdate(const KernelContext& ctx, const CudaDeviceContext& dev, int i) {
  TOB_ASSIGN_OR_RETURN(std::optional<double> signal, ReadScalar(ctx, dev, i, "update_signal"));
  return !signal || *signal != 0.0;
}

Status WriteStep(const CudaDeviceContext& dev, Tensor* out, int64_t value) {
  if (out == nullptr) return Status::OK();
  TOB_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(out->raw_data(), &value, sizeof(value), cudaMemcpyHostToDevice, dev.stream()));
  return dev.Synchronize();  // `value` lives on this stack frame
}

Status PassThrough(const KernelContext& ctx, const CudaDeviceContext& dev, const Tensor* src, Tensor* dst) {
  if (dst == nullptr || src == nullptr || dst->SharesDataWith(*src) || src->nbytes() == 0) return Status::OK();
  if (dst->nbytes() != src->nbytes()) return ctx.Fail("output and input sizes differ");
  TOB_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(dst->raw_data(), src->raw_data(), src->nbytes(), cudaMemcpyDeviceToDevice, dev.stream()));
  return Status::OK();
}

Status CheckOperand(const KernelContext& ctx, const Tensor* t, int i, const char* name, const Shape& shape,
                    DType dtype = DType::kUndefined) {
  if (t == nullptr) return ctx.Fail("input ", i, " (", name, ") is required");
  if (t->shape() != shape)
    return ctx.Fail("input ", i, " (", name, ") has shape ", ShapeToString(t->shape()), ", the weights have ",
                    ShapeToString(shape));
  if (dtype != DType::kUndefined && t->dtype() != dtype)
    return ctx.Fail("input ", i, " (", name, ") must be ", DTypeName(dtype), ", got ", DTypeName(t->dtype()));
  return Status::OK();
}

double Divisor(const std::optional<double>& loss_scale, const std::optional<double>& grad_norm, double max_norm) {
  return training::GradientDivisor(loss_scale ? &*loss_scale : nullptr, grad_norm ? &*grad_norm : nullptr, max_norm);
}

template <typename T>
T* DataOrNull(Tensor* t) {
  return t ? t->data<T>() : nullptr;
}
void* RawOrNull(Tensor* t) { return t ? t->raw_data() : nullptr; }
cuda::ElementType TypeOr(const Tensor* t, DType fallback) { return ToElementType(t ? t->dtype() : fallback); }

// sqrt of the sum of squares of `tensors`: float64 partial sums per fixed chunk, added in order.
StatusOr<double> L2Norm(KernelContext& ctx, const CudaDeviceContext& dev, const std::vector<const Tensor*>& tensors) {
  int64_t count = 0;
  for (const Tensor* t : tensors) count += cuda::SquareSumPartialCount(t->numel());
  if (count == 0) return 0.0;
  TOB_ASSIGN_OR_RETURN(Tensor partials, ctx.AllocateScratch(DType::kFloat64, {count}));
  int64_t offset = 0;
  for (const Tensor* t : tensors) {
    TOB_RETURN_IF_ERROR(CheckCuda("launch_square_sum_partials",
                                  cuda::launch_square_sum_partials(ToElementType(t->dtype()), t->raw_data(), t->numel(),
                                                                   partials.data<double>() + offset, dev.stream())));
    offset += cuda::SquareSumPartialCount(t->numel());
  }
  std::vector<double> host(static_cast<size_t>(count));
  TOB_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host.data(), partials.raw_data(), partials.nbytes(), cudaMemcpyDeviceToHost, dev.stream()));
  TOB_RETURN_IF_ERROR(dev.Synchronize());
  double sum = 0.0;
  for (double p : host) sum += p;
  return std::sqrt(sum);
}

class CudaSgdOptimizerKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<CudaSgdOptimizerKernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    TOB_ASSIGN_OR_RETURN(double lr, RequiredScalar(ctx, *dev, 0, "ETA"));
    const Tensor& w = *ctx.input(1);
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(2), 2, "G", w.shape(), DType::kFloat32));
    return CheckCuda("launch_sgd_optimizer",
                     cuda::launch_sgd_optimizer(static_cast<float>(lr), w.data<float>(), ctx.input(2)->data<float>(),
                                                DataOrNull<float>(ctx.output(0)), DataOrNull<float>(ctx.output(1)),
                                                w.numel(), dev->stream()));
  }
};

class CudaAdamOptimizerKernel final : public OpKernel {
 public:
  CudaAdamOptimizerKernel(const Node& n, training::AdamOpAttributes a) : OpKernel(n), attrs_(a) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    TOB_ASSIGN_OR_RETURN(training::AdamOpAttributes a, training::ReadAdamAttributes(n));
    return MakeKernel<CudaAdamOptimizerKernel>(n, a);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& w = *ctx.input(2);
    const Tensor* g = ctx.input(3);
    const Tensor* mixed = ctx.input(6);
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, g, 3, "gradients", w.shape()));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(4), 4, "moment_1", w.shape(), DType::kFloat32));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(5), 5, "moment_2", w.shape(), DType::kFloat32));
    if (mixed != nullptr) TOB_RETURN_IF_ERROR(CheckOperand(ctx, mixed, 6, "mixed_precision_weights", w.shape()));
    Tensor* new_mixed = mixed != nullptr ? ctx.output(5) : nullptr;
    TOB_ASSIGN_OR_RETURN(double lr, RequiredScalar(ctx, *dev, 0, "R"));
    TOB_ASSIGN_OR_RETURN(double step_value, RequiredScalar(ctx, *dev, 1, "T"));
    const int64_t step = static_cast<int64_t>(step_value);
    TOB_ASSIGN_OR_RETURN(bool update, ShouldUpdate(ctx, *dev, 9));
    if (!update) {
      TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, ctx.input(1), ctx.output(0)));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, ctx.input(4), ctx.output(1)));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, ctx.input(5), ctx.output(2)));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, &w, ctx.output(3)));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, g, ctx.output(4)));
      return PassThrough(ctx, *dev, mixed, new_mixed);
    }
    TOB_ASSIGN_OR_RETURN(std::optional<double> loss_scale, ReadScalar(ctx, *dev, 7, "loss_scale"));
    TOB_ASSIGN_OR_RETURN(std::optional<double> grad_norm, ReadScalar(ctx, *dev, 8, "global_gradient_norm"));
    const training::AdamScalars s =
        training::MakeAdamOpScalars(attrs_, lr, step, Divisor(loss_scale, grad_norm, attrs_.max_norm_clip));
    TOB_RETURN_IF_ERROR(
        CheckCuda("launch_adam_optimizer",
                  cuda::launch_adam_optimizer(
                      s, ToElementType(g->dtype()), w.data<float>(), g->raw_data(), ctx.input(4)->data<float>(),
                      ctx.input(5)->data<float>(), DataOrNull<float>(ctx.output(3)), RawOrNull(ctx.output(4)),
                      DataOrNull<float>(ctx.output(1)), DataOrNull<float>(ctx.output(2)),
                      TypeOr(new_mixed, DType::kFloat16), RawOrNull(new_mixed), w.numel(), dev->stream())));
    return WriteStep(*dev, ctx.output(0), step + 1);
  }

 private:
  training::AdamOpAttributes attrs_;
};

class CudaLambOptimizerKernel final : public OpKernel {
 public:
  CudaLambOptimizerKernel(const Node& n, training::LambAttributes a, int groups)
      : OpKernel(n), attrs_(std::move(a)), groups_(groups) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    const int groups = training::LambGroupCount(static_cast<int>(n.inputs().size()));
    TOB_ASSIGN_OR_RETURN(training::LambAttributes a, training::ReadLambAttributes(n, groups));
    return MakeKernel<CudaLambOptimizerKernel>(n, std::move(a), groups);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    for (int k = 0; k < groups_; ++k) {
      const Tensor* w = In(ctx, k, 0);
      const int base = 5 + 5 * k;
      if (w == nullptr || w->dtype() != DType::kFloat32)
        return ctx.Fail("weight group ", k, ": input ", base, " (weights) must be a float32 tensor");
      TOB_RETURN_IF_ERROR(CheckOperand(ctx, In(ctx, k, 1), base + 1, "gradients", w->shape()));
      TOB_RETURN_IF_ERROR(CheckOperand(ctx, In(ctx, k, 2), base + 2, "moment1", w->shape(), DType::kFloat32));
      TOB_RETURN_IF_ERROR(CheckOperand(ctx, In(ctx, k, 3), base + 3, "moment2", w->shape(), DType::kFloat32));
    }
    TOB_ASSIGN_OR_RETURN(bool update, ShouldUpdate(ctx, *dev, 0));
    TOB_ASSIGN_OR_RETURN(std::optional<double> step, ReadScalar(ctx, *dev, 4, "step"));
    if (!update) {
      TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, ctx.input(4), ctx.output(0)));
      for (int k = 0; k < groups_; ++k)
        for (int j = 0; j < 5; ++j) TOB_RETURN_IF_ERROR(PassThrough(ctx, *dev, In(ctx, k, j), Out(ctx, k, j)));
      return Status::OK();
    }
    TOB_ASSIGN_OR_RETURN(std::optional<double> loss_scale, ReadScalar(ctx, *dev, 1, "loss_scale"));
    TOB_ASSIGN_OR_RETURN(std::optional<double> grad_norm, ReadScalar(ctx, *dev, 2, "gradient_norm"));
    TOB_ASSIGN_OR_RETURN(double lr, RequiredScalar(ctx, *dev, 3, "R"));
    const int64_t step_count = step ? static_cast<int64_t>(*step) : 0;
    for (int k = 0; k < groups_; ++k) {
      const Tensor& w = *In(ctx, k, 0);
      const Tensor& g = *In(ctx, k, 1);
      Tensor* new_mixed = In(ctx, k, 4) != nullptr ? Out(ctx, k, 4) : nullptr;
      const training::LambScalars s =
          training::MakeLambScalars(attrs_.alpha[k], attrs_.beta[k], attrs_.lambda[k], attrs_.epsilon[k], step_count,
                                    attrs_.do_bias_correction, Divisor(loss_scale, grad_norm, attrs_.max_norm_clip[k]));
      TOB_ASSIGN_OR_RETURN(Tensor direction, ctx.AllocateScratch(DType::kFloat32, w.shape()));
      TOB_RETURN_IF_ERROR(
          CheckCuda("launch_lamb_direction",
                    cuda::launch_lamb_direction(s, ToElementType(g.dtype()), w.data<float>(), g.raw_data(),
                                                In(ctx, k, 2)->data<float>(), In(ctx, k, 3)->data<float>(),
                                                direction.data<float>(), DataOrNull<float>(Out(ctx, k, 2)),
                                                DataOrNull<float>(Out(ctx, k, 3)), w.numel(), dev->stream())));
      TOB_ASSIGN_OR_RETURN(double w_norm, L2Norm(ctx, *dev, {&w}));
      TOB_ASSIGN_OR_RETURN(double d_norm, L2Norm(ctx, *dev, {&direction}));
      const float ratio =
          training::LambRatio(static_cast<float>(lr), w_norm, d_norm, attrs_.ratio_min, attrs_.ratio_max);
      TOB_RETURN_IF_ERROR(CheckCuda(
          "launch_lamb_apply",
          cuda::launch_lamb_apply(ratio, w.data<float>(), direction.data<float>(), DataOrNull<float>(Out(ctx, k, 0)),
                                  ToElementType(g.dtype()), RawOrNull(Out(ctx, k, 1)),
                                  TypeOr(new_mixed, DType::kFloat16), RawOrNull(new_mixed), w.numel(), dev->stream())));
    }
    if (ctx.output(0) != nullptr && !step) return ctx.Fail("output 0 (new_step) needs input 4 (step)");
    return WriteStep(*dev, ctx.output(0), step_count + 1);
  }

 private:
  static const Tensor* In(const KernelContext& ctx, int group, int j) { return ctx.input(5 + 5 * group + j); }
  static Tensor* Out(KernelContext& ctx, int group, int j) { return ctx.output(1 + 5 * group + j); }

  training::LambAttributes attrs_;
  int groups_;
};

class CudaInPlaceAccumulatorKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    return MakeKernel<CudaInPlaceAccumulatorKernel>(n);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    const Tensor& sum = *ctx.input(0);
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(1), 1, "value", sum.shape()));
    TOB_ASSIGN_OR_RETURN(bool update, ShouldUpdate(ctx, *dev, 2));
    if (!update) return PassThrough(ctx, *dev, &sum, ctx.output(0));
    return CheckCuda(
        "launch_accumulate",
        cuda::launch_accumulate(sum.data<float>(), ToElementType(ctx.input(1)->dtype()), ctx.input(1)->raw_data(),
                                ctx.output(0)->data<float>(), sum.numel(), dev->stream()));
  }
};

class CudaZeroGradientKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<CudaZeroGradientKernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    Tensor& out = *ctx.output(0);
    if (out.nbytes() == 0) return Status::OK();
    return CheckCuda("cudaMemsetAsync", cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), dev->stream()));
  }
};

class CudaReduceAllL2Kernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<CudaReduceAllL2Kernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(CudaDeviceContext * dev, KernelDeviceContext(ctx));
    std::vector<const Tensor*> tensors;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      if (ctx.input(i)->dtype() != ctx.input(0)->dtype())
        return ctx.Fail("inputs must share one dtype, got ", DTypeName(ctx.input(0)->dtype()), " and ",
                        DTypeName(ctx.input(i)->dtype()), " (input ", i, ")");
      tensors.push_back(ctx.input(i));
    }
    TOB_ASSIGN_OR_RETURN(double norm, L2Norm(ctx, *dev, tensors));
    Tensor& y = *ctx.output(0);
    TOB_ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(y.dtype(), y.shape(), CpuAllocator::Default()));
    const bool known = DispatchDType<float, double, Float16, BFloat16>(y.dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, double>) host.data<T>()[0] = norm;
      else host.data<T>()[0] = T(static_cast<float>(norm));
    });
    if (!known) return ctx.Fail("output Y must be a float type, got ", DTypeName(y.dtype()));
    TOB_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(y.raw_data(), host.raw_data(), host.nbytes(), cudaMemcpyHostToDevice, dev->stream()));
    return dev->Synchronize();  // `host` is freed on return
  }
};

}  // namespace

void RegisterCudaOptimizerKernels(KernelRegistry& registry) {
  const std::vector<DType> f32 = {DType::kFloat32};
  const std::vector<DType> storage = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const std::vector<DType> half = {DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("SGDOptimizer")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("L", {0}, f32)
                        .Constraint("T", {1, 2}, f32)
                        .SkipsUnusedOutputs()
                        .Kernel<CudaSgdOptimizerKernel>());
  registry.Register(Def("AdamOptimizer")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T1", {0}, f32)
                        .Constraint("T2", {1}, {DType::kInt64})
                        .Constraint("T3", {2, 7}, f32)
                        .Constraint("T_GRAD", {3}, storage)
                        .Constraint("T4", {4, 5}, f32)
                        .Constraint("T_MIXED_PRECISION_FP", {6}, half)
                        .Constraint("T_GRAD_NORM", {8}, storage)
                        .Constraint("T_BOOL", {9}, {DType::kBool})
                        .SkipsUnusedOutputs()
                        .Kernel<CudaAdamOptimizerKernel>());
  registry.Register(Def("LambOptimizer")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T_BOOL", {0}, {DType::kBool})
                        .Constraint("T1", {3}, f32)
                        .Constraint("TInt64", {4}, {DType::kInt64})
                        .SkipsUnusedOutputs()
                        .Kernel<CudaLambOptimizerKernel>());
  registry.Register(Def("InPlaceAccumulator")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T", {0}, f32)
                        .Constraint("T_GRAD", {1}, storage)
                        .Constraint("T_BOOL", {2}, {DType::kBool})
                        .Kernel<CudaInPlaceAccumulatorKernel>());
  registry.Register(Def("ZeroGradient")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("T1", {0}, FloatTypes())
                        .Kernel<CudaZeroGradientKernel>());
  registry.Register(Def("ReduceAllL2")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Provider(kCudaProvider)
                        .Constraint("TIn", {TypeConstraint::kAllInputs}, storage)
                        .Kernel<CudaReduceAllL2Kernel>());
}

}  // namespace tob
