// SGDOptimizer and AdamOptimizer (com.microsoft, opset 1) on the CPU, onnxruntime-training's
// semantics (docs/architecture.md, "Training ops"; arithmetic in training/optimizer_math.h).
// Stateless: weights, moments and the step count come in as inputs and leave as outputs; the
// defs declare MayInplace for them, so a session holding them as state (SessionOptions::
// state_updates) gets each output in the state's own memory. Every loop reads a block of its
// inputs before writing the same block of its outputs, so an output may be its input.
#include <algorithm>

#include "core/float_convert.h"
#include "core/half.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/training/optimizer_inputs.h"
#include "training/multi_tensor_adam.h"
#include "training/optimizer_attributes.h"
#include "training/optimizer_math.h"

namespace tob {

namespace {

using namespace optimizer_inputs;

constexpr int64_t kGrain = 1 << 14;

// SGDOptimizer (ETA, W, G) -> (NW?, NG?): NW = W - ETA G, NG = -ETA G.
class SgdOptimizerKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<SgdOptimizerKernel>(n); }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(double lr, RequiredScalar(ctx, 0, "ETA"));
    const Tensor& w = *ctx.input(1);
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(2), 2, "G", w.shape(), DType::kFloat32));
    const float eta = static_cast<float>(lr);
    const float* wp = w.data<float>();
    const float* gp = ctx.input(2)->data<float>();
    float* nw = ctx.output(0) ? ctx.output(0)->data<float>() : nullptr;
    float* ng = ctx.output(1) ? ctx.output(1)->data<float>() : nullptr;
    ParallelFor(ctx.thread_pool(), w.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = gp[i];
        if (ng) ng[i] = -eta * g;
        if (nw) nw[i] = training::SgdUpdate(eta, wp[i], g);
      }
    });
    return Status::OK();
  }
};

// AdamOptimizer (R, T, weights, gradients, moment_1, moment_2, mixed_precision_weights?,
// loss_scale?, global_gradient_norm?, update_signal?) -> (new_T, new_moment_1, new_moment_2,
// new_weights?, new_gradients?, new_mixed_precision_weights?).
class AdamOptimizerKernel final : public OpKernel {
 public:
  AdamOptimizerKernel(const Node& n, training::AdamOpAttributes a) : OpKernel(n), attrs_(a) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    TOB_ASSIGN_OR_RETURN(training::AdamOpAttributes a, training::ReadAdamAttributes(n));
    return MakeKernel<AdamOptimizerKernel>(n, a);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(double lr, RequiredScalar(ctx, 0, "R"));
    TOB_ASSIGN_OR_RETURN(double step_value, RequiredScalar(ctx, 1, "T"));
    const int64_t step = static_cast<int64_t>(step_value);
    const Tensor& w = *ctx.input(2);
    const Tensor* g = ctx.input(3);
    const Tensor* mixed = ctx.input(6);
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, g, 3, "gradients", w.shape()));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(4), 4, "moment_1", w.shape(), DType::kFloat32));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, ctx.input(5), 5, "moment_2", w.shape(), DType::kFloat32));
    if (mixed != nullptr) TOB_RETURN_IF_ERROR(CheckOperand(ctx, mixed, 6, "mixed_precision_weights", w.shape()));
    Tensor* new_step = ctx.output(0);
    Tensor* new_m1 = ctx.output(1);
    Tensor* new_m2 = ctx.output(2);
    Tensor* new_w = ctx.output(3);
    Tensor* new_g = ctx.output(4);
    Tensor* new_mixed = mixed != nullptr ? ctx.output(5) : nullptr;  // written only with its input

    TOB_ASSIGN_OR_RETURN(bool update, ShouldUpdate(ctx, 9));
    if (!update) {
      TOB_RETURN_IF_ERROR(PassThrough(ctx, ctx.input(1), new_step));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, ctx.input(4), new_m1));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, ctx.input(5), new_m2));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, &w, new_w));
      TOB_RETURN_IF_ERROR(PassThrough(ctx, g, new_g));
      return PassThrough(ctx, mixed, new_mixed);
    }
    TOB_ASSIGN_OR_RETURN(std::optional<double> loss_scale, OptionalScalar(ctx, 7, "loss_scale"));
    TOB_ASSIGN_OR_RETURN(std::optional<double> grad_norm, OptionalScalar(ctx, 8, "global_gradient_norm"));
    const double divisor = training::GradientDivisor(loss_scale ? &*loss_scale : nullptr,
                                                     grad_norm ? &*grad_norm : nullptr, attrs_.max_norm_clip);
    const training::AdamScalars s = training::MakeAdamOpScalars(attrs_, lr, step, divisor);

    Status status;
    const bool known = DispatchDType<float, Float16, BFloat16>(
        g->dtype(), [&]<typename G>() { status = Update<G>(ctx, s, w, *g, new_m1, new_m2, new_w, new_g, new_mixed); });
    if (!known) return ctx.Fail("gradients must be float32, float16 or bfloat16, got ", DTypeName(g->dtype()));
    TOB_RETURN_IF_ERROR(status);
    if (new_step != nullptr) new_step->data<int64_t>()[0] = step + 1;
    return Status::OK();
  }

 private:
  template <typename G>
  Status Update(KernelContext& ctx, const training::AdamScalars& s, const Tensor& w, const Tensor& g, Tensor* new_m1,
                Tensor* new_m2, Tensor* new_w, Tensor* new_g, Tensor* new_mixed) const {
    const float* wp = w.data<float>();
    const G* gp = g.data<G>();
    const float* m1p = ctx.input(4)->data<float>();
    const float* m2p = ctx.input(5)->data<float>();
    if (new_mixed != nullptr && new_mixed->dtype() != DType::kFloat16 && new_mixed->dtype() != DType::kBFloat16)
      return ctx.Fail("new_mixed_precision_weights must be float16 or bfloat16, got ", DTypeName(new_mixed->dtype()));
    ParallelFor(ctx.thread_pool(), w.numel(), kGrain, [&](int64_t begin, int64_t end) {
      alignas(32) float p[kConvertBlock], grad[kConvertBlock], m[kConvertBlock], v[kConvertBlock];
      for (int64_t b = begin; b < end; b += kConvertBlock) {
        const int64_t len = std::min(kConvertBlock, end - b);
        std::copy_n(wp + b, len, p);
        ToFloat(gp + b, grad, len);
        std::copy_n(m1p + b, len, m);
        std::copy_n(m2p + b, len, v);
        training::AdamFloat32(s, p, grad, m, v, len);
        if (new_g != nullptr) {  // the update applied, before new_w may overwrite w
          float delta[kConvertBlock];
          for (int64_t i = 0; i < len; ++i) delta[i] = p[i] - wp[b + i];
          FromFloat(delta, new_g->data<G>() + b, len);
        }
        if (new_m1 != nullptr) std::copy_n(m, len, new_m1->data<float>() + b);
        if (new_m2 != nullptr) std::copy_n(v, len, new_m2->data<float>() + b);
        if (new_w != nullptr) std::copy_n(p, len, new_w->data<float>() + b);
        if (new_mixed != nullptr) {
          if (new_mixed->dtype() == DType::kFloat16) FromFloat(p, new_mixed->data<Float16>() + b, len);
          else FromFloat(p, new_mixed->data<BFloat16>() + b, len);
        }
      }
    });
    return Status::OK();
  }

  training::AdamOpAttributes attrs_;
};

}  // namespace

void RegisterCpuOptimizerKernels(KernelRegistry& registry) {
  const std::vector<DType> f32 = {DType::kFloat32};
  const std::vector<DType> grads = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  registry.Register(Def("SGDOptimizer")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("L", {0}, f32)
                        .Constraint("T", {1, 2}, f32)
                        .MayInplace(1, 0)
                        .SkipsUnusedOutputs()
                        .Kernel<SgdOptimizerKernel>());
  registry.Register(Def("AdamOptimizer")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T1", {0}, f32)
                        .Constraint("T2", {1}, {DType::kInt64})
                        .Constraint("T3", {2, 7}, f32)
                        .Constraint("T_GRAD", {3}, grads)
                        .Constraint("T4", {4, 5}, f32)
                        .Constraint("T_MIXED_PRECISION_FP", {6}, {DType::kFloat16, DType::kBFloat16})
                        .Constraint("T_GRAD_NORM", {8}, grads)
                        .Constraint("T_BOOL", {9}, {DType::kBool})
                        .MayInplace(1, 0)
                        .MayInplace(4, 1)
                        .MayInplace(5, 2)
                        .MayInplace(2, 3)
                        .MayInplace(6, 5)
                        .SkipsUnusedOutputs()
                        .Kernel<AdamOptimizerKernel>());
}

}  // namespace tob
