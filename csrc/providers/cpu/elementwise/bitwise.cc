// Bitwise integer ops: BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot (opset 18, every integer
// type) and BitShift (opset 11 unsigned types, opset 28 signed ones too). And/Or/Xor/Not are the
// logical (bool) forms and live in compare_logic.cc; an integer tensor must never reach them.
#include <string>

#include "providers/cpu/elementwise/unary_kernel.h"

namespace tob::ew {

namespace {

using UnsignedList = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;

template <typename Op>
StatusOr<Op> MakeBitwiseOp(const Node&) {
  return Op{};
}

template <>
StatusOr<BitShiftOp> MakeBitwiseOp<BitShiftOp>(const Node& node) {
  std::string direction;
  TOB_RETURN_IF_ERROR(node.GetAttr("direction", &direction));
  if (direction != "LEFT" && direction != "RIGHT")
    return InvalidModel(node.Describe(), ": attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"", direction,
                        "\"");
  BitShiftOp op;
  op.left = direction == "LEFT";
  return op;
}

// out = op(a, b), both inputs and the output of one integer type from `Types`, broadcasting.
template <typename Op, typename Types>
class BitwiseBinaryKernel final : public OpKernel {
 public:
  BitwiseBinaryKernel(const Node& node, Op op) : OpKernel(node), op_(op) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(Op op, MakeBitwiseOp<Op>(node));
    return MakeKernel<BitwiseBinaryKernel>(node, op);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    if (a.dtype() != b.dtype())
      return ctx.Fail("inputs must have the same type, got ", DTypeName(a.dtype()), " and ", DTypeName(b.dtype()));
    Status status;
    bool known = Dispatch(Types{}, a.dtype(),
                          [&]<typename T>() { status = RunBinary<T, T, T>(ctx, a, b, *ctx.output(0), op_); });
    return known ? status : UnsupportedType(ctx, a.dtype());
  }

 private:
  Op op_;
};

}  // namespace
}  // namespace tob::ew

namespace tob {

void RegisterCpuBitwiseKernels(KernelRegistry& registry) {
  using namespace ew;  // the kernels above
  const std::vector<VersionTypes> ints_18{{18, DTypes(IntList{})}};
  RegisterByVersion<BitwiseBinaryKernel<BitwiseAndOp, IntList>>(registry, "BitwiseAnd", {0, 1}, ints_18);
  RegisterByVersion<BitwiseBinaryKernel<BitwiseOrOp, IntList>>(registry, "BitwiseOr", {0, 1}, ints_18);
  RegisterByVersion<BitwiseBinaryKernel<BitwiseXorOp, IntList>>(registry, "BitwiseXor", {0, 1}, ints_18);
  RegisterByVersion<UnaryKernel<MapOp<BitwiseNotOp>, IntList>>(registry, "BitwiseNot", {0}, ints_18);
  RegisterByVersion<BitwiseBinaryKernel<BitShiftOp, IntList>>(registry, "BitShift", {0, 1},
                                                              {{11, DTypes(UnsignedList{})}, {28, DTypes(IntList{})}});
}

}  // namespace tob
