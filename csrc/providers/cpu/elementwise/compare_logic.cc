// Comparisons (Equal, Less, Greater, LessOrEqual, GreaterOrEqual) and boolean logic (And, Or,
// Xor): broadcasting binary ops with bool results.
#include "providers/cpu/elementwise/elementwise_type_sets.h"

namespace tob::ew {

namespace {

template <typename Op, typename Types>
class PredicateKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<PredicateKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    if (a.dtype() != b.dtype())
      return ctx.Fail("inputs must have the same type, got ", DTypeName(a.dtype()), " and ", DTypeName(b.dtype()));
    Status status;
    bool known = Dispatch(Types{}, a.dtype(),
                          [&]<typename T>() { status = RunBinary<T, T, bool>(ctx, a, b, *ctx.output(0), Op{}); });
    return known ? status : UnsupportedType(ctx, a.dtype());
  }
};

// Equal on strings (opset 19): byte-wise equality of the two strings, broadcast like the others.
struct StringEqual {
  bool operator()(const std::string& a, const std::string& b) const { return a == b; }
};

class StringEqualKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<StringEqualKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    if (a.dtype() != DType::kString || b.dtype() != DType::kString)
      return ctx.Fail("inputs must both be string, got ", DTypeName(a.dtype()), " and ", DTypeName(b.dtype()));
    return RunBinary<std::string, std::string, bool>(ctx, a, b, *ctx.output(0), StringEqual{});
  }
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuCompareLogicKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  const std::vector<DType> numeric_bool = With(Numeric(), {DType::kBool});
  const std::vector<DType> numeric_bool_no_bf16 = With(NumericNoBf16(), {DType::kBool});
  RegisterByVersion<PredicateKernel<EqualOp, AllList>>(
      registry, "Equal", {0, 1},
      {{7, {DType::kBool, DType::kInt32, DType::kInt64}}, {11, numeric_bool_no_bf16}, {13, numeric_bool}});
  registry.Register(Def("Equal").Versions(19).Constraint("T", {0, 1}, {DType::kString}).Kernel<StringEqualKernel>());
  const std::vector<VersionTypes> order_7{{7, F3()}, {9, NumericNoBf16()}, {13, Numeric()}};
  RegisterByVersion<PredicateKernel<LessOp, NumericList>>(registry, "Less", {0, 1}, order_7);
  RegisterByVersion<PredicateKernel<GreaterOp, NumericList>>(registry, "Greater", {0, 1}, order_7);
  const std::vector<VersionTypes> order_12{{12, NumericNoBf16()}, {16, Numeric()}};
  RegisterByVersion<PredicateKernel<LessOrEqualOp, NumericList>>(registry, "LessOrEqual", {0, 1}, order_12);
  RegisterByVersion<PredicateKernel<GreaterOrEqualOp, NumericList>>(registry, "GreaterOrEqual", {0, 1}, order_12);
  const std::vector<VersionTypes> logic{{7, {DType::kBool}}};
  RegisterByVersion<PredicateKernel<AndOp, TypeList<bool>>>(registry, "And", {0, 1}, logic);
  RegisterByVersion<PredicateKernel<OrOp, TypeList<bool>>>(registry, "Or", {0, 1}, logic);
  RegisterByVersion<PredicateKernel<XorOp, TypeList<bool>>>(registry, "Xor", {0, 1}, logic);
}

}  // namespace tob
