// Gradients of the elementwise activations (com.microsoft, opset 1): (dY, X or Y) -> dX.
//   ReluGrad     dX = dY where X > 0, else 0      (X: relu's input or output, same mask)
//   SigmoidGrad  dX = dY * Y * (1 - Y)            (Y: sigmoid's output)
//   TanhGrad     dX = dY * (1 - Y^2)              (Y: tanh's output)
//   GeluGrad     dX = dY * (Phi(X) + X phi(X))    (exact, erf GELU)
//   FastGeluGrad dX = dY * d/dX [0.5 X (1 + tanh(sqrt(2/pi) (X + 0.044715 X^3)))]
// Flat loops over contiguous blocks; float16/bfloat16 are widened to float32 per block, the
// transcendental parts of the GELU grads go through the vectorised ew:: array functions.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "math/activation_grad_math.h"
#include "providers/cpu/elementwise/vector_math.h"
#include "providers/cpu/float_compute.h"

namespace tob {

namespace {

// Elements per block: the stack buffers of one block stay in L1.
constexpr int64_t kBlock = 512;
constexpr int64_t kCheapGrain = 32768;
constexpr int64_t kTranscendentalGrain = 4096;

struct ReluGradOp {
  static constexpr int64_t kGrain = kCheapGrain;
  // `x <= 0 ? 0 : dy` rather than `x > 0 ? dy : 0`: a NaN input passes its gradient through,
  // as torch's threshold_backward does.
  template <typename C>
  static void Run(const C* dy, const C* x, C* dx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dx[i] = x[i] <= C(0) ? C(0) : dy[i];
  }
};

struct SigmoidGradOp {
  static constexpr int64_t kGrain = kCheapGrain;
  template <typename C>
  static void Run(const C* dy, const C* y, C* dx, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (C(1) - y[i]);
  }
};

// math/activation_grad_math.h's arithmetic, which FusedElementwise's TanhGrad instruction shares.
struct TanhGradOp {
  static constexpr int64_t kGrain = kCheapGrain;
  template <typename C>
  static void Run(const C* dy, const C* y, C* dx, int64_t n) {
    const ew::TanhGradOp op{};
    for (int64_t i = 0; i < n; ++i) dx[i] = op(dy[i], y[i]);
  }
};

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluCubic = 0.044715;

struct GeluGradOp {
  static constexpr int64_t kGrain = kTranscendentalGrain;
  template <typename C>
  static void Run(const C* dy, const C* x, C* dx, int64_t n) {
    if constexpr (std::is_same_v<C, float>) {
      float erf_part[kBlock], exp_part[kBlock];
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t m = std::min(kBlock, n - b);
        const float* xb = x + b;
        for (int64_t i = 0; i < m; ++i) {
          erf_part[i] = xb[i] * static_cast<float>(kSqrtHalf);
          exp_part[i] = -0.5f * xb[i] * xb[i];
        }
        ew::ErfArray(erf_part, erf_part, m);
        ew::ExpArray(exp_part, exp_part, m);
        for (int64_t i = 0; i < m; ++i) {
          const float cdf = 0.5f * (1.0f + erf_part[i]);
          dx[b + i] = dy[b + i] * (cdf + xb[i] * exp_part[i] * static_cast<float>(kInvSqrt2Pi));
        }
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        const C cdf = C(0.5) * (C(1) + std::erf(x[i] * C(kSqrtHalf)));
        dx[i] = dy[i] * (cdf + x[i] * std::exp(C(-0.5) * x[i] * x[i]) * C(kInvSqrt2Pi));
      }
    }
  }
};

// With t = tanh(k (x + c x^3)): d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
struct FastGeluGradOp {
  static constexpr int64_t kGrain = kTranscendentalGrain;
  template <typename C>
  static void Run(const C* dy, const C* x, C* dx, int64_t n) {
    if constexpr (std::is_same_v<C, float>) {
      constexpr float k = static_cast<float>(kSqrt2OverPi), c = static_cast<float>(kGeluCubic);
      // tanh and 1 - tanh^2 from e = exp(-2|z|): t = sign(z) (1 - e) / (1 + e) and
      // 1 - t^2 = 4 e / (1 + e)^2, which keeps 1 - t^2 accurate where t rounds to +-1.
      float z[kBlock], e[kBlock];
      for (int64_t b = 0; b < n; b += kBlock) {
        const int64_t m = std::min(kBlock, n - b);
        const float* xb = x + b;
        for (int64_t i = 0; i < m; ++i) {
          z[i] = k * (xb[i] + c * xb[i] * xb[i] * xb[i]);
          e[i] = -2.0f * std::fabs(z[i]);
        }
        ew::ExpArray(e, e, m);
        for (int64_t i = 0; i < m; ++i) {
          const float inv = 1.0f / (1.0f + e[i]);
          const float t = std::copysign((1.0f - e[i]) * inv, z[i]);
          const float sech2 = 4.0f * e[i] * inv * inv;
          const float d = 0.5f * (1.0f + t) + 0.5f * xb[i] * sech2 * k * (1.0f + 3.0f * c * xb[i] * xb[i]);
          dx[b + i] = dy[b + i] * d;
        }
      }
    } else {
      const C k = C(kSqrt2OverPi), c = C(kGeluCubic);
      for (int64_t i = 0; i < n; ++i) {
        const C x2 = x[i] * x[i];
        const C t = std::tanh(k * (x[i] + c * x2 * x[i]));
        dx[i] = dy[i] * (C(0.5) * (C(1) + t) + C(0.5) * x[i] * (C(1) - t * t) * k * (C(1) + C(3) * c * x2));
      }
    }
  }
};

template <typename Op>
class ElementwiseGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    return MakeKernel<ElementwiseGradKernel>(node);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& x = *ctx.input(1);
    Tensor& dx = *ctx.output(0);
    if (dy.shape() != x.shape() || dy.dtype() != x.dtype())
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " and the forward tensor ", ShapeToString(x.shape()),
                      " must have one shape and dtype");
    const int64_t n = dy.numel();
    return DispatchFloat(ctx, dy.dtype(), [&]<typename T>() -> Status {
      const T* dyp = dy.data<T>();
      const T* xp = x.data<T>();
      T* dxp = dx.data<T>();
      ParallelFor(ctx.thread_pool(), n, Op::kGrain, [&](int64_t begin, int64_t end) {
        if constexpr (kIs16BitFloat<T>) {
          float dyf[kBlock], xf[kBlock], dxf[kBlock];
          for (int64_t b = begin; b < end; b += kBlock) {
            const int64_t m = std::min(kBlock, end - b);
            ToFloat(dyp + b, dyf, m);
            ToFloat(xp + b, xf, m);
            Op::Run(dyf, xf, dxf, m);
            FromFloat(dxf, dxp + b, m);
          }
        } else {
          Op::Run(dyp + begin, xp + begin, dxp + begin, end - begin);
        }
      });
      return Status::OK();
    });
  }
};

template <typename Op>
void RegisterGrad(KernelRegistry& registry, const char* op) {
  registry.Register(Def(op)
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1}, FloatTypes())
                        .Kernel<ElementwiseGradKernel<Op>>());
}

}  // namespace

void RegisterCpuActivationGradKernels(KernelRegistry& registry) {
  RegisterGrad<ReluGradOp>(registry, "ReluGrad");
  RegisterGrad<SigmoidGradOp>(registry, "SigmoidGrad");
  RegisterGrad<TanhGradOp>(registry, "TanhGrad");
  RegisterGrad<GeluGradOp>(registry, "GeluGrad");
  RegisterGrad<FastGeluGradOp>(registry, "FastGeluGrad");
}

}  // namespace tob
