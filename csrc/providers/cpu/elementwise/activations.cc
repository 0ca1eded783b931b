// Activations with attributes or fused forms: LeakyRelu, Elu, Selu, Celu, HardSigmoid, HardSwish,
// Softplus, Softsign, Mish, Swish, ThresholdedRelu, Shrink, Gelu (ai.onnx opset 20), and
// com.microsoft Gelu, FastGelu, BiasGelu.
#include <cmath>
#include <string>

#include "providers/cpu/elementwise/unary_kernel.h"

namespace tob::ew {

namespace {

struct EluArrayOp {
  EluOp op;
  template <typename In, typename Out>
  void operator()(const In* x, Out* y, int64_t n) const {
    if constexpr (std::is_same_v<In, float>) EluArray(x, y, n, op.alpha);
    else
      for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
  }
};

struct SeluArrayOp {
  SeluOp op;
  template <typename In, typename Out>
  void operator()(const In* x, Out* y, int64_t n) const {
    if constexpr (std::is_same_v<In, float>) SeluArray(x, y, n, op.alpha, op.gamma);
    else
      for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
  }
};

// Exact (erf) or tanh-approximated GELU, chosen at kernel creation.
struct GeluArrayOp {
  bool tanh = false;
  template <typename In, typename Out>
  void operator()(const In* x, Out* y, int64_t n) const {
    if constexpr (std::is_same_v<In, float>) {
      if (tanh) GeluTanhArray(x, y, n);
      else GeluArray(x, y, n);
    } else if (tanh) {
      for (int64_t i = 0; i < n; ++i) y[i] = GeluTanhOp{}(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] = GeluOp{}(x[i]);
    }
  }
};

using SoftplusArrayOp = VecMapOp<SoftplusOp, SoftplusArray>;

// Celu: max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
struct CeluOp {
  float alpha = 1.0f;
  template <typename T>
  T operator()(T x) const {
    T a = static_cast<T>(alpha);
    T neg = a * (std::exp(x / a) - T(1));
    return (x > T(0) ? x : T(0)) + (neg < T(0) ? neg : T(0));
  }
};
// Mish: x * tanh(softplus(x)).
struct MishOp {
  template <typename T>
  T operator()(T x) const {
    return x * std::tanh(SoftplusOp{}(x));
  }
};
// Swish (opset 24): x * sigmoid(alpha * x).
struct SwishOp {
  float alpha = 1.0f;
  template <typename T>
  T operator()(T x) const {
    return x / (T(1) + std::exp(-static_cast<T>(alpha) * x));
  }
};
// ThresholdedRelu: x where x > alpha, else 0.
struct ThresholdedReluOp {
  float alpha = 1.0f;
  template <typename T>
  T operator()(T x) const {
    return x > static_cast<T>(alpha) ? x : T(0);
  }
};
// Shrink: x + bias below -lambd, x - bias above lambd, 0 between; integers computed in double and
// converted back, as the reference's float arithmetic on them.
struct ShrinkOp {
  float bias = 0.0f;
  float lambd = 0.5f;
  template <typename T>
  T operator()(T x) const {
    using C = std::conditional_t<std::is_floating_point_v<T>, T, double>;
    C v = static_cast<C>(x);
    if (v < -static_cast<C>(lambd)) return static_cast<T>(v + static_cast<C>(bias));
    if (v > static_cast<C>(lambd)) return static_cast<T>(v - static_cast<C>(bias));
    return T(0);
  }
};

Status ReadFloat(const Node& node, const char* name, float dflt, float* out) { return node.GetAttr(name, out, dflt); }

// GELU of (x + bias): the add and the GELU run in one pass over each span, the GELU on the
// float32 sum before it is rounded to the storage type. Without a bias (FastGelu's bias is
// optional) it is a plain GELU.
class BiasGeluKernel final : public OpKernel {
 public:
  BiasGeluKernel(const Node& node, bool tanh) : OpKernel(node), op_{tanh} {}

  static StatusOr<std::unique_ptr<OpKernel>> CreateErf(const Node& node) {
    return MakeKernel<BiasGeluKernel>(node, false);
  }
  static StatusOr<std::unique_ptr<OpKernel>> CreateTanh(const Node& node) {
    return MakeKernel<BiasGeluKernel>(node, true);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor* bias = ctx.input(1);
    Tensor& y = *ctx.output(0);
    if (bias != nullptr && bias->dtype() != x.dtype())
      return ctx.Fail("bias has type ", DTypeName(bias->dtype()), ", expected ", DTypeName(x.dtype()));
    Status status;
    bool known = Dispatch(FloatList{}, x.dtype(), [&]<typename T>() {
      if (bias == nullptr) status = RunUnary<T, T>(ctx, x, y, op_, kExpensiveGrain);
      else status = RunBinary<T, T, T>(ctx, x, *bias, y, AddOp{}, kExpensiveGrain, InPlace<GeluArrayOp>{op_});
    });
    return known ? status : UnsupportedType(ctx, x.dtype());
  }

 private:
  GeluArrayOp op_;
};

}  // namespace

template <>
struct ArrayOpFactory<MapOp<LeakyReluOp>> {
  static StatusOr<MapOp<LeakyReluOp>> Make(const Node& node) {
    MapOp<LeakyReluOp> op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 0.01f, &op.op.alpha));
    return op;
  }
};

template <>
struct ArrayOpFactory<EluArrayOp> {
  static StatusOr<EluArrayOp> Make(const Node& node) {
    EluArrayOp op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 1.0f, &op.op.alpha));
    return op;
  }
};

template <>
struct ArrayOpFactory<SeluArrayOp> {
  static StatusOr<SeluArrayOp> Make(const Node& node) {
    SeluArrayOp op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 1.67326319217681884765625f, &op.op.alpha));
    TOB_RETURN_IF_ERROR(ReadFloat(node, "gamma", 1.05070102214813232421875f, &op.op.gamma));
    return op;
  }
};

template <>
struct ArrayOpFactory<MapOp<HardSigmoidOp>> {
  static StatusOr<MapOp<HardSigmoidOp>> Make(const Node& node) {
    MapOp<HardSigmoidOp> op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 0.2f, &op.op.alpha));
    TOB_RETURN_IF_ERROR(ReadFloat(node, "beta", 0.5f, &op.op.beta));
    return op;
  }
};

template <>
struct ArrayOpFactory<MapOp<CeluOp>> {
  static StatusOr<MapOp<CeluOp>> Make(const Node& node) {
    MapOp<CeluOp> op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 1.0f, &op.op.alpha));
    if (op.op.alpha == 0.0f) return InvalidModel(node.Describe(), ": attribute 'alpha' must not be 0");
    return op;
  }
};

template <>
struct ArrayOpFactory<MapOp<SwishOp>> {
  static StatusOr<MapOp<SwishOp>> Make(const Node& node) {
    MapOp<SwishOp> op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 1.0f, &op.op.alpha));
    return op;
  }
};

template <>
struct ArrayOpFactory<MapOp<ThresholdedReluOp>> {
  static StatusOr<MapOp<ThresholdedReluOp>> Make(const Node& node) {
    MapOp<ThresholdedReluOp> op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "alpha", 1.0f, &op.op.alpha));
    return op;
  }
};

template <>
struct ArrayOpFactory<MapOp<ShrinkOp>> {
  static StatusOr<MapOp<ShrinkOp>> Make(const Node& node) {
    MapOp<ShrinkOp> op;
    TOB_RETURN_IF_ERROR(ReadFloat(node, "bias", 0.0f, &op.op.bias));
    TOB_RETURN_IF_ERROR(ReadFloat(node, "lambd", 0.5f, &op.op.lambd));
    return op;
  }
};

template <>
struct ArrayOpFactory<GeluArrayOp> {
  static StatusOr<GeluArrayOp> Make(const Node& node) {
    std::string approximate;
    TOB_RETURN_IF_ERROR(node.GetAttr("approximate", &approximate, std::string("none")));
    if (approximate != "none" && approximate != "tanh")
      return InvalidModel(node.Describe(), ": attribute 'approximate' must be 'none' or 'tanh', got '", approximate,
                          "'");
    return GeluArrayOp{approximate == "tanh"};
  }
};

}  // namespace tob::ew

namespace tob {

void RegisterCpuActivationKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  const std::vector<VersionTypes> float_6_22{{6, F3()}, {22, F4()}};
  RegisterByVersion<UnaryKernel<MapOp<LeakyReluOp>, FloatList>>(registry, "LeakyRelu", {0}, {{6, F3()}, {16, F4()}});
  RegisterByVersion<UnaryKernel<EluArrayOp, FloatList, kExpensiveGrain>>(registry, "Elu", {0}, float_6_22);
  RegisterByVersion<UnaryKernel<SeluArrayOp, FloatList, kExpensiveGrain>>(registry, "Selu", {0}, float_6_22);
  RegisterByVersion<UnaryKernel<MapOp<HardSigmoidOp>, FloatList>>(registry, "HardSigmoid", {0}, float_6_22);
  RegisterByVersion<UnaryKernel<MapOp<HardSwishOp>, FloatList>>(registry, "HardSwish", {0}, {{14, F3()}, {22, F4()}});
  RegisterByVersion<UnaryKernel<SoftplusArrayOp, FloatList, kExpensiveGrain>>(registry, "Softplus", {0},
                                                                              {{1, F3()}, {22, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<SoftsignOp>, FloatList>>(registry, "Softsign", {0}, {{1, F3()}, {22, F4()}});
  RegisterByVersion<UnaryKernel<GeluArrayOp, FloatList, kExpensiveGrain>>(registry, "Gelu", {0}, {{20, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<CeluOp>, FloatList, kExpensiveGrain>>(registry, "Celu", {0},
                                                                            {{12, {DType::kFloat32}}, {28, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<MishOp>, FloatList, kExpensiveGrain>>(registry, "Mish", {0},
                                                                            {{18, F3()}, {22, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<SwishOp>, FloatList, kExpensiveGrain>>(registry, "Swish", {0}, {{24, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<ThresholdedReluOp>, FloatList>>(registry, "ThresholdedRelu", {0},
                                                                      {{10, F3()}, {22, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<ShrinkOp>, NumericList>>(registry, "Shrink", {0}, {{9, NumericNoBf16()}});

  RegisterByVersion<UnaryKernel<GeluArrayOp, FloatList, kExpensiveGrain>>(registry, "Gelu", {0}, {{1, F4()}},
                                                                          kMicrosoftDomain);
  registry.Register(Def("FastGelu")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1}, F4())
                        .Factory(BiasGeluKernel::CreateTanh));
  registry.Register(Def("BiasGelu")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0, 1}, F4())
                        .Factory(BiasGeluKernel::CreateErf));
}

}  // namespace tob
