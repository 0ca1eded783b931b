// Cast, CastLike and BitCast: same shape, element type from the 'to' attribute or from the second
// input.
#include "ops/elementwise_schema_utils.h"

namespace tob {

namespace {

// 'saturate' (float8 and float8e8m0 targets) is 0 or 1; 'round_mode' (float8e8m0 targets, opset
// 24 on) is up, down or nearest.
Status CheckSaturateAndRoundMode(InferenceContext& ctx) {
  int64_t saturate = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("saturate", &saturate, 1));
  if (saturate != 0 && saturate != 1) return ctx.Fail("attribute 'saturate' must be 0 or 1, got ", saturate);
  std::string mode = "up";
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("round_mode", &mode, std::string("up")));
  if (mode != "up" && mode != "down" && mode != "nearest")
    return ctx.Fail("attribute 'round_mode' must be up, down or nearest, got '", mode, "'");
  return Status::OK();
}

// A low-precision type exists from the opset that added it (LowPrecisionTypesAt).
Status CheckTypeAtOpset(InferenceContext& ctx, DType dtype, const char* what) {
  if (!IsLowPrecision(dtype)) return Status::OK();
  for (DType t : LowPrecisionTypesAt(ctx.opset()))
    if (t == dtype) return Status::OK();
  return ctx.Fail(what, " ", DTypeName(dtype), " is not a type of opset ", ctx.opset());
}

Status InferCast(InferenceContext& ctx) {
  int64_t to = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("to", &to));
  DType dtype = DTypeFromOnnx(static_cast<int32_t>(to));
  if (dtype == DType::kUndefined) return ctx.Fail("attribute 'to' = ", to, " is not a supported element type");
  TOB_RETURN_IF_ERROR(CheckTypeAtOpset(ctx, dtype, "attribute 'to' ="));
  TOB_RETURN_IF_ERROR(CheckSaturateAndRoundMode(ctx));
  return InferUnaryWithType(ctx, dtype);
}

Status InferCastLike(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckSaturateAndRoundMode(ctx));
  return InferUnaryWithType(ctx, ctx.input_type(1)->dtype);
}

// BitCast reinterprets the bytes, so both element types must have the same width.
Status InferBitCast(InferenceContext& ctx) {
  int64_t to = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("to", &to));
  DType dtype = DTypeFromOnnx(static_cast<int32_t>(to));
  if (dtype == DType::kUndefined || dtype == DType::kString)
    return ctx.Fail("attribute 'to' = ", to, " is not a supported element type");
  const DType from = ctx.input_type(0)->dtype;
  if (DTypeSize(from) != DTypeSize(dtype))
    return ctx.Fail("BitCast needs element types of one width: ", DTypeName(from), " is ", DTypeSize(from) * 8,
                    " bits, 'to' = ", DTypeName(dtype), " is ", DTypeSize(dtype) * 8);
  return InferUnaryWithType(ctx, dtype);
}

}  // namespace

void RegisterElementwiseCastSchemas(OpSchemaRegistry& registry) {
  OpSchema cast;
  cast.op_type = "Cast";
  cast.min_inputs = cast.max_inputs = 1;
  cast.infer = InferCast;
  registry.Register(std::move(cast));

  OpSchema cast_like;
  cast_like.op_type = "CastLike";
  cast_like.min_inputs = cast_like.max_inputs = 2;
  cast_like.infer = InferCastLike;
  registry.Register(std::move(cast_like));

  registry.Register(OpSchema{"", "BitCast", 1, 1, 1, 1, InferBitCast});
}

}  // namespace tob
