// LambOptimizer (com.microsoft, opset 1) on the CPU: onnxruntime-training's schema (variadic
// weight groups) and semantics (training/optimizer_math.h). Per group: the direction and the new
// moments (stage 1), the norms of the weights and the direction (deterministic: fixed segments
// summed in order, training/multi_tensor_ops.h), the trust ratio, the weight update (stage 3).
// The direction goes to scratch memory; the gradient input is never written.
#include <algorithm>

#include "core/float_convert.h"
#include "core/half.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/training/optimizer_inputs.h"
#include "training/multi_tensor_ops.h"
#include "training/optimizer_attributes.h"

namespace tob {

namespace {

using namespace optimizer_inputs;

constexpr int64_t kGrain = 1 << 14;
constexpr int kStepInput = 4;
constexpr int kFirstGroupInput = 5;
constexpr int kFirstGroupOutput = 1;
// Inputs and outputs per weight group.
enum { kWeights = 0, kGradients = 1, kMoment1 = 2, kMoment2 = 3, kMixedPrecision = 4, kGroupSize = 5 };
// The groups onnxruntime-training's schema allowed; MayInplace pairs are declared for this many.
constexpr int kMaxGroups = 1024;

template <typename T>
void StoreMixed(const float* src, Tensor* dst, int64_t offset, int64_t len) {
  FromFloat(src, dst->data<T>() + offset, len);
}

class LambOptimizerKernel final : public OpKernel {
 public:
  LambOptimizerKernel(const Node& n, training::LambAttributes a, int groups)
      : OpKernel(n), attrs_(std::move(a)), groups_(groups) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    const int groups = training::LambGroupCount(static_cast<int>(n.inputs().size()));
    if (groups > kMaxGroups)
      return InvalidModel(n.Describe(), ": ", groups, " weight groups; at most ", kMaxGroups, " per node");
    TOB_ASSIGN_OR_RETURN(training::LambAttributes a, training::ReadLambAttributes(n, groups));
    return MakeKernel<LambOptimizerKernel>(n, std::move(a), groups);
  }

  Status Compute(KernelContext& ctx) const override {
    TOB_ASSIGN_OR_RETURN(bool update, ShouldUpdate(ctx, 0));
    TOB_ASSIGN_OR_RETURN(std::optional<double> step, OptionalScalar(ctx, kStepInput, "step"));
    for (int k = 0; k < groups_; ++k) TOB_RETURN_IF_ERROR(CheckGroup(ctx, k));
    if (!update) {
      TOB_RETURN_IF_ERROR(PassThrough(ctx, ctx.input(kStepInput), ctx.output(0)));
      for (int k = 0; k < groups_; ++k)
        for (int j = 0; j < kGroupSize; ++j)
          TOB_RETURN_IF_ERROR(PassThrough(ctx, ctx.input(kFirstGroupInput + kGroupSize * k + j), Output(ctx, k, j)));
      return Status::OK();
    }
    TOB_ASSIGN_OR_RETURN(std::optional<double> loss_scale, OptionalScalar(ctx, 1, "loss_scale"));
    TOB_ASSIGN_OR_RETURN(std::optional<double> grad_norm, OptionalScalar(ctx, 2, "gradient_norm"));
    TOB_ASSIGN_OR_RETURN(double lr, RequiredScalar(ctx, 3, "R"));
    const int64_t step_count = step ? static_cast<int64_t>(*step) : 0;
    for (int k = 0; k < groups_; ++k) {
      const double divisor = training::GradientDivisor(loss_scale ? &*loss_scale : nullptr,
                                                       grad_norm ? &*grad_norm : nullptr, attrs_.max_norm_clip[k]);
      const training::LambScalars s =
          training::MakeLambScalars(attrs_.alpha[k], attrs_.beta[k], attrs_.lambda[k], attrs_.epsilon[k], step_count,
                                    attrs_.do_bias_correction, divisor);
      Status status;
      const Tensor& g = *Input(ctx, k, kGradients);
      const bool known = DispatchDType<float, Float16, BFloat16>(
          g.dtype(), [&]<typename G>() { status = UpdateGroup<G>(ctx, k, s, static_cast<float>(lr)); });
      if (!known)
        return ctx.Fail("weight group ", k, ": gradients must be float32, float16 or bfloat16, got ",
                        DTypeName(g.dtype()));
      TOB_RETURN_IF_ERROR(status);
    }
    if (Tensor* new_step = ctx.output(0); new_step != nullptr) {
      if (!step) return ctx.Fail("output 0 (new_step) needs input 4 (step)");
      new_step->data<int64_t>()[0] = step_count + 1;
    }
    return Status::OK();
  }

 private:
  static const Tensor* Input(const KernelContext& ctx, int group, int j) {
    return ctx.input(kFirstGroupInput + kGroupSize * group + j);
  }
  static Tensor* Output(KernelContext& ctx, int group, int j) {
    return ctx.output(kFirstGroupOutput + kGroupSize * group + j);
  }

  Status CheckGroup(const KernelContext& ctx, int k) const {
    const Tensor* w = Input(ctx, k, kWeights);
    const int base = kFirstGroupInput + kGroupSize * k;
    if (w == nullptr) return ctx.Fail("weight group ", k, ": input ", base, " (weights) is required");
    if (w->dtype() != DType::kFloat32)
      return ctx.Fail("weight group ", k, ": weights must be float32, got ", DTypeName(w->dtype()));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, Input(ctx, k, kGradients), base + 1, "gradients", w->shape()));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, Input(ctx, k, kMoment1), base + 2, "moment1", w->shape(), DType::kFloat32));
    TOB_RETURN_IF_ERROR(CheckOperand(ctx, Input(ctx, k, kMoment2), base + 3, "moment2", w->shape(), DType::kFloat32));
    if (const Tensor* mixed = Input(ctx, k, kMixedPrecision); mixed != nullptr)
      TOB_RETURN_IF_ERROR(CheckOperand(ctx, mixed, base + 4, "mixed_precision_weights", w->shape()));
    return Status::OK();
  }

  template <typename G>
  Status UpdateGroup(KernelContext& ctx, int k, const training::LambScalars& s, float eta) const {
    const Tensor& w = *Input(ctx, k, kWeights);
    const int64_t n = w.numel();
    const float* wp = w.data<float>();
    const G* gp = Input(ctx, k, kGradients)->data<G>();
    const float* m1p = Input(ctx, k, kMoment1)->data<float>();
    const float* m2p = Input(ctx, k, kMoment2)->data<float>();
    Tensor* new_w = Output(ctx, k, kWeights);
    Tensor* new_g = Output(ctx, k, kGradients);
    Tensor* new_m1 = Output(ctx, k, kMoment1);
    Tensor* new_m2 = Output(ctx, k, kMoment2);
    Tensor* new_mixed = Input(ctx, k, kMixedPrecision) != nullptr ? Output(ctx, k, kMixedPrecision) : nullptr;
    TOB_ASSIGN_OR_RETURN(Tensor direction, ctx.AllocateScratch(DType::kFloat32, {n}));
    float* dp = direction.data<float>();

    ParallelFor(ctx.thread_pool(), n, kGrain, [&](int64_t begin, int64_t end) {
      alignas(32) float grad[kConvertBlock];
      for (int64_t b = begin; b < end; b += kConvertBlock) {
        const int64_t len = std::min(kConvertBlock, end - b);
        ToFloat(gp + b, grad, len);
        for (int64_t i = 0; i < len; ++i) {
          float m1 = m1p[b + i], m2 = m2p[b + i];
          dp[b + i] = training::LambDirection(s, wp[b + i], grad[i], m1, m2);
          if (new_m1 != nullptr) new_m1->data<float>()[b + i] = m1;
          if (new_m2 != nullptr) new_m2->data<float>()[b + i] = m2;
        }
      }
    });

    const void* norm_inputs[] = {wp, dp};
    const int64_t numels[] = {n, n};
    TOB_ASSIGN_OR_RETURN(training::L2NormResult norms,
                         training::MultiTensorL2Norm(DType::kFloat32, norm_inputs, numels, ctx.thread_pool()));
    const float ratio =
        training::LambRatio(eta, norms.per_tensor[0], norms.per_tensor[1], attrs_.ratio_min, attrs_.ratio_max);

    ParallelFor(ctx.thread_pool(), n, kGrain, [&](int64_t begin, int64_t end) {
      alignas(32) float updated[kConvertBlock], delta[kConvertBlock];
      for (int64_t b = begin; b < end; b += kConvertBlock) {
        const int64_t len = std::min(kConvertBlock, end - b);
        for (int64_t i = 0; i < len; ++i) updated[i] = training::LambApply(ratio, wp[b + i], dp[b + i], &delta[i]);
        if (new_g != nullptr) FromFloat(delta, new_g->data<G>() + b, len);
        if (new_w != nullptr) std::copy_n(updated, len, new_w->data<float>() + b);
        if (new_mixed != nullptr) {
          if (new_mixed->dtype() == DType::kFloat16) StoreMixed<Float16>(updated, new_mixed, b, len);
          else StoreMixed<BFloat16>(updated, new_mixed, b, len);
        }
      }
    });
    return Status::OK();
  }

  training::LambAttributes attrs_;
  int groups_;
};

}  // namespace

void RegisterCpuLambOptimizerKernels(KernelRegistry& registry) {
  KernelDef def = Def("LambOptimizer")
                      .Domain(kMicrosoftDomain)
                      .Versions(1)
                      .Constraint("T_BOOL", {0}, {DType::kBool})
                      .Constraint("T1", {3}, {DType::kFloat32})
                      .Constraint("TInt64", {kStepInput}, {DType::kInt64})
                      .MayInplace(kStepInput, 0);
  for (int k = 0; k < kMaxGroups; ++k)
    for (int j : {kWeights, kMoment1, kMoment2, kMixedPrecision})
      def.MayInplace(kFirstGroupInput + kGroupSize * k + j, kFirstGroupOutput + kGroupSize * k + j);
  registry.Register(def.SkipsUnusedOutputs().Kernel<LambOptimizerKernel>());
}

}  // namespace tob
