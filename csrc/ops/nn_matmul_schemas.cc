// MatMul, Gemm, MatMulInteger, QLinearMatMul and com.microsoft FusedMatMul.
#include <utility>

#include "core/domain.h"
#include "ops/gemm_attributes.h"
#include "ops/op_schema.h"

namespace tob {

namespace {

Status CheckSameDType(InferenceContext& ctx, int i, int j) {
  const ValueType* a = ctx.input_type(i);
  const ValueType* b = ctx.input_type(j);
  if (a && b && a->dtype != DType::kUndefined && b->dtype != DType::kUndefined && a->dtype != b->dtype)
    return ctx.Fail("inputs ", i, " and ", j, " must have the same dtype, got ", DTypeName(a->dtype), " and ",
                    DTypeName(b->dtype));
  return Status::OK();
}

// numpy matmul of inputs a_i and b_i, the output typed `out_dtype`; trans_a / trans_b swap the
// last two axes of an operand of rank >= 2 first (FusedMatMul; a vector has none to swap).
Status InferMatMulShape(InferenceContext& ctx, int a_i, int b_i, DType out_dtype, bool trans_a = false,
                        bool trans_b = false) {
  const ValueType& a = *ctx.input_type(a_i);
  const ValueType& b = *ctx.input_type(b_i);
  if (!a.has_rank() || !b.has_rank()) {
    ctx.set_output(0, ValueType(out_dtype, std::nullopt));
    return Status::OK();
  }
  if (a.rank() == 0 || b.rank() == 0)
    return ctx.Fail("operands must have rank >= 1, got ", a.ToString(), " and ", b.ToString());
  Dims ad = *a.shape, bd = *b.shape;
  const bool a_vector = ad.size() == 1, b_vector = bd.size() == 1;
  if (trans_a && !a_vector) std::swap(ad[ad.size() - 2], ad[ad.size() - 1]);
  if (trans_b && !b_vector) std::swap(bd[bd.size() - 2], bd[bd.size() - 1]);
  if (a_vector) ad.insert(ad.begin(), Dim(1));
  if (b_vector) bd.push_back(Dim(1));
  const Dim& ka = ad.back();
  const Dim& kb = bd[bd.size() - 2];
  if (ka.is_known() && kb.is_known() && ka.value != kb.value)
    return ctx.Fail("inner dimensions do not match: ", a.ToString(), " x ", b.ToString(), " (K = ", ka.value, " vs ",
                    kb.value, ")");
  Dims a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  TOB_ASSIGN_OR_RETURN(Dims out, BroadcastDims(ctx, a_batch, b_batch));
  if (!a_vector) out.push_back(ad[ad.size() - 2]);
  if (!b_vector) out.push_back(bd.back());
  ctx.set_output(0, ValueType(out_dtype, out));
  return Status::OK();
}

Status InferMatMul(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 1));
  return InferMatMulShape(ctx, 0, 1, ctx.input_type(0)->dtype);
}

// com.microsoft FusedMatMul (onnxruntime's contrib op, which MatMulTransposeFusion emits for batched
// products): Y = alpha * op(A) @ op(B), op swapping the last two axes when transA / transB is 1.
// transBatchA / transBatchB (the first axis moved next to the last) are not implemented: refused.
Status InferFusedMatMul(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 1));
  TOB_ASSIGN_OR_RETURN(FusedMatMulAttributes attrs, ParseFusedMatMulAttributes(ctx.node()));
  return InferMatMulShape(ctx, 0, 1, ctx.input_type(0)->dtype, attrs.trans_a, attrs.trans_b);
}

// MatMulInteger (A, B, a_zero_point?, b_zero_point?) -> int32; QLinearMatMul (a, a_scale,
// a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point) -> y_zero_point's type. A zero
// point has its operand's type; their shapes are checked by the kernels.
Status InferMatMulInteger(InferenceContext& ctx) {
  if (ctx.has_input(2)) TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 2));
  if (ctx.has_input(3)) TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 1, 3));
  return InferMatMulShape(ctx, 0, 1, DType::kInt32);
}
Status InferQLinearMatMul(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 2));
  TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 3, 5));
  return InferMatMulShape(ctx, 0, 3, ctx.input_type(7)->dtype);
}

Status InferGemm(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 1));
  if (ctx.has_input(2)) TOB_RETURN_IF_ERROR(CheckSameDType(ctx, 0, 2));
  if (!ctx.has_input(2) && ctx.opset() < 11) return ctx.Fail("input C is required before opset 11");
  TOB_ASSIGN_OR_RETURN(GemmAttributes attrs, ParseGemmAttributes(ctx.node()));
  const bool trans_a = attrs.trans_a, trans_b = attrs.trans_b;
  const ValueType& a = *ctx.input_type(0);
  const ValueType& b = *ctx.input_type(1);
  if (!a.has_rank() || !b.has_rank()) {
    ctx.set_output(0, ValueType(a.dtype, Dims{Dim::Unknown(), Dim::Unknown()}));
    return Status::OK();
  }
  if (a.rank() != 2 || b.rank() != 2) return ctx.Fail("A and B must be 2-D, got ", a.ToString(), " and ", b.ToString());
  const Dims& ad = *a.shape;
  const Dims& bd = *b.shape;
  Dim m = trans_a ? ad[1] : ad[0], ka = trans_a ? ad[0] : ad[1];
  Dim kb = trans_b ? bd[1] : bd[0], n = trans_b ? bd[0] : bd[1];
  if (ka.is_known() && kb.is_known() && ka.value != kb.value)
    return ctx.Fail("inner dimensions do not match: op(A) has K = ", ka.value, ", op(B) has K = ", kb.value);
  if (const ValueType* c = ctx.input_type(2); c && c->has_rank()) {
    if (c->rank() > 2) return ctx.Fail("C must have rank <= 2, got ", c->ToString());
    const Dims& cd = *c->shape;
    Dims target{m, n};
    for (size_t i = 0; i < cd.size(); ++i) {
      const Dim& cdim = cd[i];
      const Dim& t = target[target.size() - cd.size() + i];
      if (cdim.is_known() && t.is_known() && cdim.value != 1 && cdim.value != t.value)
        return ctx.Fail("C of shape ", c->ToString(), " cannot be broadcast to [", m.ToString(), ", ", n.ToString(),
                        "]");
    }
  }
  ctx.set_output(0, ValueType(a.dtype, Dims{m, n}));
  return Status::OK();
}

}  // namespace

void RegisterNnMatMulSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "MatMul", 2, 2, 1, 1, InferMatMul});
  registry.Register(OpSchema{"", "Gemm", 2, 3, 1, 1, InferGemm});
  registry.Register(OpSchema{"", "MatMulInteger", 2, 4, 1, 1, InferMatMulInteger});
  registry.Register(OpSchema{"", "QLinearMatMul", 8, 8, 1, 1, InferQLinearMatMul});
  registry.Register(OpSchema{kMicrosoftDomain, "FusedMatMul", 2, 2, 1, 1, InferFusedMatMul});
}

}  // namespace tob
