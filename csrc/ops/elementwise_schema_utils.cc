#include "ops/elementwise_schema_utils.h"

namespace tob {

Status InferUnary(InferenceContext& ctx) { return PropagateType(ctx, 0, 0); }

Status InferUnaryWithType(InferenceContext& ctx, DType dtype) {
  ctx.set_output(0, ValueType(dtype, ctx.input_type(0)->shape));
  return Status::OK();
}

StatusOr<std::optional<Dims>> BroadcastAll(const InferenceContext& ctx, int first) {
  std::optional<Dims> out;
  bool rank_unknown = false;
  for (int i = first; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const ValueType& t = *ctx.input_type(i);
    if (!t.has_rank()) {
      rank_unknown = true;
      continue;
    }
    if (!out) {
      out = *t.shape;
    } else {
      TOB_ASSIGN_OR_RETURN(Dims b, BroadcastDims(ctx, *out, *t.shape));
      out = std::move(b);
    }
  }
  if (rank_unknown) return std::optional<Dims>();
  return out;
}

Status InferBroadcast(InferenceContext& ctx, std::optional<DType> dtype, bool same_type) {
  DType t0 = ctx.input_type(0)->dtype;
  if (same_type) {
    for (int i = 1; i < ctx.num_inputs(); ++i)
      if (ctx.has_input(i) && ctx.input_type(i)->dtype != t0)
        return ctx.Fail("inputs must have the same type, got ", DTypeName(t0), " and ",
                        DTypeName(ctx.input_type(i)->dtype));
  }
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> dims, BroadcastAll(ctx, 0));
  ctx.set_output(0, ValueType(dtype.value_or(t0), std::move(dims)));
  return Status::OK();
}

}  // namespace tob
