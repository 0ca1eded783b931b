// Broadcasting arithmetic: Add, Sub, Mul, Div, Mod, Pow, PRelu, and SwiGLU (same-shape gate and value).
#include <cmath>
#include <optional>

#include "providers/cpu/elementwise/elementwise_type_sets.h"

namespace tob::ew {

namespace {

// Opset <= 6 arithmetic had no numpy broadcasting: with broadcast=1, B is matched against a
// contiguous run of A's dims starting at `axis` (default: A's trailing dims).
struct LegacyBroadcast {
  bool enabled = false;
  std::optional<int64_t> axis;
};

StatusOr<LegacyBroadcast> ReadLegacyBroadcast(const Node& node) {
  LegacyBroadcast lb;
  int64_t broadcast = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("broadcast", &broadcast, 0));
  if (broadcast != 0 && broadcast != 1)
    return InvalidModel(node.Describe(), ": attribute 'broadcast' must be 0 or 1, got ", broadcast);
  lb.enabled = broadcast == 1;
  if (node.FindAttribute("axis") != nullptr) {
    int64_t axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis));
    lb.axis = axis;
  }
  return lb;
}

// B's shape padded with 1s so that numpy broadcasting lines it up the legacy way.
StatusOr<Shape> LegacyAlignedShape(const KernelContext& ctx, const Shape& a, const Shape& b,
                                   const LegacyBroadcast& lb) {
  int64_t ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(b.size());
  int64_t axis = lb.axis ? (*lb.axis < 0 ? *lb.axis + ra : *lb.axis) : ra - rb;
  if (axis < 0 || axis + rb > ra)
    return ctx.Fail("legacy broadcast of B ", ShapeToString(b), " onto A ", ShapeToString(a), " at axis ",
                    lb.axis.value_or(ra - rb), " does not fit");
  Shape s(static_cast<size_t>(ra), 1);
  for (int64_t i = 0; i < rb; ++i) s[axis + i] = b[i];
  return s;
}

template <typename Op>
StatusOr<Op> MakeOp(const Node&) {
  return Op{};
}

template <>
StatusOr<ModOp> MakeOp<ModOp>(const Node& node) {
  int64_t fmod = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("fmod", &fmod, 0));
  if (fmod != 0 && fmod != 1) return InvalidModel(node.Describe(), ": attribute 'fmod' must be 0 or 1, got ", fmod);
  ModOp op;
  op.fmod = fmod == 1;
  return op;
}

// SwiGLU (opset 28): Swish_alpha(A) * B = A * sigmoid(alpha * A) * B; the schema requires equal
// shapes, so the broadcasting loop sees none.
struct SwiGluOp {
  float alpha = 1.0f;
  template <typename T>
  T operator()(T a, T b) const {
    return a / (T(1) + std::exp(-static_cast<T>(alpha) * a)) * b;
  }
};

template <>
StatusOr<SwiGluOp> MakeOp<SwiGluOp>(const Node& node) {
  SwiGluOp op;
  TOB_RETURN_IF_ERROR(node.GetAttr("alpha", &op.alpha, 1.0f));
  return op;
}

// out = op(A, B) for ops whose two inputs and output share one type T from `Types`.
template <typename Op, typename Types>
class BinaryKernel final : public OpKernel {
 public:
  BinaryKernel(const Node& node, Op op, LegacyBroadcast legacy) : OpKernel(node), op_(op), legacy_(legacy) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(Op op, MakeOp<Op>(node));
    TOB_ASSIGN_OR_RETURN(LegacyBroadcast legacy, ReadLegacyBroadcast(node));
    return MakeKernel<BinaryKernel>(node, op, legacy);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    Tensor b = *ctx.input(1);
    if (a.dtype() != b.dtype())
      return ctx.Fail("inputs must have the same type, got ", DTypeName(a.dtype()), " and ", DTypeName(b.dtype()));
    if (legacy_.enabled) {
      TOB_ASSIGN_OR_RETURN(Shape aligned, LegacyAlignedShape(ctx, a.shape(), b.shape(), legacy_));
      b = b.Reshaped(std::move(aligned));
    }
    Status status;
    bool known = Dispatch(Types{}, a.dtype(), [&]<typename T>() {
      constexpr int64_t grain = std::is_integral_v<T> && std::is_same_v<Op, DivOp> ? kExpensiveGrain : kCheapGrain;
      status = RunBinary<T, T, T>(ctx, a, b, *ctx.output(0), op_, grain);
    });
    return known ? status : UnsupportedType(ctx, a.dtype());
  }

 private:
  Op op_;
  LegacyBroadcast legacy_;
};

// Pow: the base type T and the exponent type T1 may differ; the result has the base's type.
using PowBaseList = TypeList<float, double, Float16, BFloat16, int32_t, int64_t>;

class PowKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<PowKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& base = *ctx.input(0);
    const Tensor& exponent = *ctx.input(1);
    Status status;
    bool known = false;
    Dispatch(PowBaseList{}, base.dtype(), [&]<typename T>() {
      known = Dispatch(NumericList{}, exponent.dtype(), [&]<typename E>() {
        status = RunBinary<T, E, T>(ctx, base, exponent, *ctx.output(0), PowOp{}, kExpensiveGrain);
      });
    });
    if (!known) return ctx.Fail("unsupported types ", DTypeName(base.dtype()), " ^ ", DTypeName(exponent.dtype()));
    return status;
  }
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuBinaryKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  const std::vector<DType> arith7{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32,
                                  DType::kInt64,   DType::kUInt32,  DType::kUInt64};
  const std::vector<VersionTypes> arith{{6, arith7}, {13, With(arith7, {DType::kBFloat16})}, {14, Numeric()}};
  RegisterByVersion<BinaryKernel<AddOp, NumericList>>(registry, "Add", {0, 1}, arith);
  RegisterByVersion<BinaryKernel<SubOp, NumericList>>(registry, "Sub", {0, 1}, arith);
  RegisterByVersion<BinaryKernel<MulOp, NumericList>>(registry, "Mul", {0, 1}, arith);
  RegisterByVersion<BinaryKernel<DivOp, NumericList>>(registry, "Div", {0, 1}, arith);
  RegisterByVersion<BinaryKernel<ModOp, NumericList>>(registry, "Mod", {0, 1},
                                                      {{10, NumericNoBf16()}, {13, Numeric()}});

  const std::vector<DType> prelu9{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32,
                                  DType::kInt64,   DType::kUInt32,  DType::kUInt64};
  RegisterByVersion<BinaryKernel<PReluOp, NumericList>>(
      registry, "PRelu", {0, 1}, {{6, F3()}, {9, prelu9}, {16, With(prelu9, {DType::kBFloat16})}});

  const std::vector<DType> pow12{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32, DType::kInt64};
  RegisterByVersion<BinaryKernel<SwiGluOp, FloatList>>(registry, "SwiGLU", {0, 1}, {{28, F4()}});
  registry.Register(Def("Pow").Versions(7, 11).Constraint("T", {0, 1}, F3()).Kernel<PowKernel>());
  registry.Register(Def("Pow")
                        .Versions(12, 12)
                        .Constraint("T", {0}, pow12)
                        .Constraint("T1", {1}, NumericNoBf16())
                        .Kernel<PowKernel>());
  registry.Register(Def("Pow")
                        .Versions(13, 14)
                        .Constraint("T", {0}, With(pow12, {DType::kBFloat16}))
                        .Constraint("T1", {1}, NumericNoBf16())
                        .Kernel<PowKernel>());
  registry.Register(Def("Pow")
                        .Versions(15)
                        .Constraint("T", {0}, With(pow12, {DType::kBFloat16}))
                        .Constraint("T1", {1}, Numeric())
                        .Kernel<PowKernel>());
}

}  // namespace tob
