// Unary math: Neg, Abs, Sqrt, Reciprocal, Exp, Log, Tanh, Sigmoid, Erf, Floor, Ceil, Round,
// Sign, Sin, Cos, Tan, the inverse and hyperbolic trigonometric ops, Relu, and the predicates
// Not, IsNaN, IsInf.
#include <cmath>

#include "providers/cpu/elementwise/unary_kernel.h"

namespace tob::ew {

template <>
struct ArrayOpFactory<MapOp<IsInfOp>> {
  static StatusOr<MapOp<IsInfOp>> Make(const Node& node) {
    int64_t pos = 1, neg = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("detect_positive", &pos, 1));
    TOB_RETURN_IF_ERROR(node.GetAttr("detect_negative", &neg, 1));
    MapOp<IsInfOp> op;
    op.op.detect_positive = pos != 0;
    op.op.detect_negative = neg != 0;
    return op;
  }
};

namespace {

// The trigonometric ops beyond Sin and Cos: the C library's function of the compute type (float32
// for the 16-bit types, whose values are widened first and the result rounded once).
#define TOB_LIBM_UNARY_OP(Name, fn)      \
  struct Name##Op {                      \
    template <typename T>                \
    T operator()(T x) const {            \
      return static_cast<T>(std::fn(x)); \
    }                                    \
  };
TOB_LIBM_UNARY_OP(Tan, tan)
TOB_LIBM_UNARY_OP(Asin, asin)
TOB_LIBM_UNARY_OP(Acos, acos)
TOB_LIBM_UNARY_OP(Atan, atan)
TOB_LIBM_UNARY_OP(Sinh, sinh)
TOB_LIBM_UNARY_OP(Cosh, cosh)
TOB_LIBM_UNARY_OP(Asinh, asinh)
TOB_LIBM_UNARY_OP(Acosh, acosh)
TOB_LIBM_UNARY_OP(Atanh, atanh)
#undef TOB_LIBM_UNARY_OP

using ExpArrayOp = VecMapOp<ExpOp, ExpArray>;
using LogArrayOp = VecMapOp<LogOp, LogArray>;
using TanhArrayOp = VecMapOp<TanhOp, TanhArray>;
using SigmoidArrayOp = VecMapOp<SigmoidOp, SigmoidArray>;
using ErfArrayOp = VecMapOp<ErfOp, ErfArray>;
using SqrtArrayOp = VecMapOp<SqrtOp, SqrtArray>;
using FloorArrayOp = VecMapOp<FloorOp, FloorArray>;
using CeilArrayOp = VecMapOp<CeilOp, CeilArray>;
using RoundArrayOp = VecMapOp<RoundOp, RoundHalfEvenArray>;

using SignedAndFloatList = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t>;

template <typename ArrayOp, typename Types = FloatList>
using Transcendental = UnaryKernel<ArrayOp, Types, kExpensiveGrain>;
template <typename ScalarOp, typename Types = FloatList>
using Cheap = UnaryKernel<MapOp<ScalarOp>, Types>;

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuUnaryKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  const std::vector<VersionTypes> float_6_13{{6, F3()}, {13, F4()}};
  RegisterByVersion<Transcendental<ExpArrayOp>>(registry, "Exp", {0}, float_6_13);
  RegisterByVersion<Transcendental<LogArrayOp>>(registry, "Log", {0}, float_6_13);
  RegisterByVersion<Transcendental<TanhArrayOp>>(registry, "Tanh", {0}, float_6_13);
  RegisterByVersion<Transcendental<SigmoidArrayOp>>(registry, "Sigmoid", {0}, float_6_13);
  RegisterByVersion<Transcendental<ErfArrayOp>>(registry, "Erf", {0}, {{9, F3()}, {13, F4()}});
  RegisterByVersion<Transcendental<MapOp<SinOp>>>(registry, "Sin", {0}, {{7, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<CosOp>>>(registry, "Cos", {0}, {{7, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<TanOp>>>(registry, "Tan", {0}, {{7, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<AsinOp>>>(registry, "Asin", {0}, {{7, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<AcosOp>>>(registry, "Acos", {0}, {{7, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<AtanOp>>>(registry, "Atan", {0}, {{7, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<SinhOp>>>(registry, "Sinh", {0}, {{9, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<CoshOp>>>(registry, "Cosh", {0}, {{9, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<AsinhOp>>>(registry, "Asinh", {0}, {{9, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<AcoshOp>>>(registry, "Acosh", {0}, {{9, F3()}, {22, F4()}});
  RegisterByVersion<Transcendental<MapOp<AtanhOp>>>(registry, "Atanh", {0}, {{9, F3()}, {22, F4()}});
  RegisterByVersion<UnaryKernel<SqrtArrayOp, FloatList>>(registry, "Sqrt", {0}, float_6_13);
  RegisterByVersion<UnaryKernel<FloorArrayOp, FloatList>>(registry, "Floor", {0}, float_6_13);
  RegisterByVersion<UnaryKernel<CeilArrayOp, FloatList>>(registry, "Ceil", {0}, float_6_13);
  RegisterByVersion<UnaryKernel<RoundArrayOp, FloatList>>(registry, "Round", {0}, {{11, F3()}, {22, F4()}});
  RegisterByVersion<Cheap<ReciprocalOp>>(registry, "Reciprocal", {0}, float_6_13);

  const std::vector<DType> signed_ints{DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64};
  RegisterByVersion<Cheap<NegOp, SignedAndFloatList>>(registry, "Neg", {0},
                                                      {{6, With(F3(), signed_ints)}, {13, With(F4(), signed_ints)}});
  RegisterByVersion<Cheap<AbsOp, NumericList>>(registry, "Abs", {0}, {{6, NumericNoBf16()}, {13, Numeric()}});
  RegisterByVersion<Cheap<SignOp, NumericList>>(registry, "Sign", {0}, {{9, NumericNoBf16()}, {13, Numeric()}});
  RegisterByVersion<Cheap<ReluOp, SignedAndFloatList>>(registry, "Relu", {0},
                                                       {{6, F3()}, {13, F4()}, {14, With(F4(), signed_ints)}});

  RegisterByVersion<UnaryKernel<MapOp<NotOp>, TypeList<bool>>>(registry, "Not", {0}, {{1, {DType::kBool}}});
  RegisterByVersion<UnaryKernel<MapOp<IsNanOp>, FloatList, kCheapGrain, bool>>(registry, "IsNaN", {0},
                                                                               {{9, F3()}, {13, F4()}});
  RegisterByVersion<UnaryKernel<MapOp<IsInfOp>, FloatList, kCheapGrain, bool>>(
      registry, "IsInf", {0}, {{10, {DType::kFloat32, DType::kFloat64}}, {20, F4()}});
}

}  // namespace tob
