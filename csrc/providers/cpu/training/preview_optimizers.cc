// The ONNX standard's optimizers (ai.onnx.preview.training, opset 1): Adagrad, Adam, Momentum
// (standard and Nesterov), with the spec's semantics (training/preview_optimizer_math.h). Adam
// runs FusedAdam's per-element update (float32 only: that arithmetic is float32); Adagrad and
// Momentum run on float32 and float64. R may be float or double, T is the int64 step count.
#include <memory>

#include "framework/kernel_registry.h"
#include "training/preview_optimizer_math.h"

namespace tob::cpu {
namespace {

enum class PreviewOptimizer { kAdagrad, kMomentum, kAdam };

int StatesOf(PreviewOptimizer op) { return op == PreviewOptimizer::kAdam ? 2 : 1; }

class PreviewOptimizerKernel final : public OpKernel {
 public:
  PreviewOptimizerKernel(const Node& node, PreviewOptimizer op, float a, float b, float epsilon, float norm,
                         float norm_post, bool nesterov)
      : OpKernel(node),
        op_(op),
        a_(a),
        b_(b),
        epsilon_(epsilon),
        norm_(norm),
        norm_post_(norm_post),
        nesterov_(nesterov) {}

  // a, b: Adagrad's decay_factor; Momentum's alpha, beta; Adam's alpha, beta.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, PreviewOptimizer op) {
    float a = 0, b = 0, epsilon = 1e-6f, norm = 0, norm_post = 0;
    bool nesterov = false;
    TOB_RETURN_IF_ERROR(node.GetAttr("norm_coefficient", &norm,
                                     op == PreviewOptimizer::kMomentum ? std::nullopt : std::optional<float>(0.0f)));
    switch (op) {
      case PreviewOptimizer::kAdagrad:
        TOB_RETURN_IF_ERROR(node.GetAttr("decay_factor", &a, 0.0f));
        TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-6f));
        break;
      case PreviewOptimizer::kMomentum: {
        std::string mode;
        TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &a));
        TOB_RETURN_IF_ERROR(node.GetAttr("beta", &b));
        TOB_RETURN_IF_ERROR(node.GetAttr("mode", &mode));
        if (mode != "standard" && mode != "nesterov")
          return InvalidModel(node.Describe(), ": attribute 'mode' must be 'standard' or 'nesterov', got '", mode, "'");
        nesterov = mode == "nesterov";
        break;
      }
      case PreviewOptimizer::kAdam:
        TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &a, 0.9f));
        TOB_RETURN_IF_ERROR(node.GetAttr("beta", &b, 0.999f));
        TOB_RETURN_IF_ERROR(node.GetAttr("epsilon", &epsilon, 1e-6f));
        TOB_RETURN_IF_ERROR(node.GetAttr("norm_coefficient_post", &norm_post, 0.0f));
        break;
    }
    return MakeKernel<PreviewOptimizerKernel>(node, op, a, b, epsilon, norm, norm_post, nesterov);
  }

  Status Compute(KernelContext& ctx) const override {
    const int per = 2 + StatesOf(op_);
    const int groups = (ctx.num_inputs() - 2) / per;
    if (ctx.input(0)->numel() != 1 || ctx.input(1)->numel() != 1)
      return ctx.Fail("R and T must hold one value each, got ", ctx.input(0)->numel(), " and ", ctx.input(1)->numel());
    const double r = ctx.input(0)->ElementAsDouble(0);
    const int64_t t = ctx.input(1)->ElementAsInt64(0);
    if (t < 0) return ctx.Fail("T (the step count) must be >= 0, got ", t);
    for (int g = 0; g < groups; ++g) {
      const Tensor& x = *ctx.input(2 + g);
      const Tensor& grad = *ctx.input(2 + groups + g);
      for (int k = 1; k < per; ++k)
        if (ctx.input(2 + k * groups + g)->shape() != x.shape())
          return ctx.Fail("input ", 2 + k * groups + g, " must have the shape of input ", 2 + g, " ",
                          ShapeToString(x.shape()));
      Tensor& x_new = *ctx.output(g);
      const int64_t n = x.numel();
      if (x.dtype() == DType::kFloat32) TOB_RETURN_IF_ERROR(Update<float>(ctx, r, t, groups, g, x, grad, x_new, n));
      else if (x.dtype() == DType::kFloat64 && op_ != PreviewOptimizer::kAdam)
        TOB_RETURN_IF_ERROR(Update<double>(ctx, r, t, groups, g, x, grad, x_new, n));
      else return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    }
    return Status::OK();
  }

 private:
  template <typename T>
  Status Update(KernelContext& ctx, double r, int64_t t, int groups, int g, const Tensor& x, const Tensor& grad,
                Tensor& x_new, int64_t n) const {
    const T* xs = x.data<T>();
    const T* gs = grad.data<T>();
    T* xo = x_new.data<T>();
    const T* s1 = ctx.input(2 + 2 * groups + g)->data<T>();
    T* s1o = ctx.output(groups + g)->data<T>();
    switch (op_) {
      case PreviewOptimizer::kAdagrad: {
        const T lr = static_cast<T>(training::PreviewAdagradRate(r, t, a_));
        for (int64_t i = 0; i < n; ++i) {
          T xv = xs[i], h = s1[i];
          training::PreviewAdagradUpdate<T>(lr, static_cast<T>(norm_), static_cast<T>(epsilon_), xv, gs[i], h);
          xo[i] = xv;
          s1o[i] = h;
        }
        return Status::OK();
      }
      case PreviewOptimizer::kMomentum: {
        const T beta_t = t > 0 ? static_cast<T>(b_) : T(1);
        for (int64_t i = 0; i < n; ++i) {
          T xv = xs[i], v = s1[i];
          training::PreviewMomentumUpdate<T>(static_cast<T>(r), static_cast<T>(a_), beta_t, static_cast<T>(norm_),
                                             nesterov_, xv, gs[i], v);
          xo[i] = xv;
          s1o[i] = v;
        }
        return Status::OK();
      }
      case PreviewOptimizer::kAdam: {
        if constexpr (std::is_same_v<T, float>) {
          const training::AdamScalars s = training::MakePreviewAdamScalars(r, t, a_, b_, epsilon_, norm_, norm_post_);
          const float* h = ctx.input(2 + 3 * groups + g)->data<float>();
          float* ho = ctx.output(2 * groups + g)->data<float>();
          for (int64_t i = 0; i < n; ++i) {
            float xv = xs[i], v = s1[i], hv = h[i];
            training::AdamUpdate(s, xv, gs[i], v, hv);
            xo[i] = xv;
            s1o[i] = v;
            ho[i] = hv;
          }
          return Status::OK();
        }
        return ctx.Fail("Adam runs on float32 only");
      }
    }
    return Status::OK();
  }

  PreviewOptimizer op_;
  float a_, b_, epsilon_, norm_, norm_post_;
  bool nesterov_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuPreviewOptimizerKernels(KernelRegistry& registry) {
  using cpu::PreviewOptimizer;
  struct Entry {
    const char* op;
    PreviewOptimizer kind;
    std::vector<DType> types;
  };
  // T3: every input after R and T (the tensors, gradients and states; indices past the node's
  // inputs are ignored by the registry).
  std::vector<int> tensors;
  for (int i = 2; i < 4096; ++i) tensors.push_back(i);
  for (const Entry& e : {Entry{"Adagrad", PreviewOptimizer::kAdagrad, {DType::kFloat32, DType::kFloat64}},
                         Entry{"Momentum", PreviewOptimizer::kMomentum, {DType::kFloat32, DType::kFloat64}},
                         Entry{"Adam", PreviewOptimizer::kAdam, {DType::kFloat32}}}) {
    const PreviewOptimizer kind = e.kind;
    KernelDef def = Def(e.op)
                        .Domain(kPreviewTrainingDomain)
                        .Versions(1)
                        .Constraint("T1", {0}, {DType::kFloat32, DType::kFloat64})
                        .Constraint("T2", {1}, {DType::kInt64})
                        .Constraint("T3", tensors, e.types)
                        .Factory([kind](const Node& n) { return cpu::PreviewOptimizerKernel::Create(n, kind); });
    registry.Register(std::move(def));
  }
}

}  // namespace tob
