// Schemas of the elementwise ops: unary maps (same type and shape), broadcasting binary and
// variadic ops, comparisons (bool results), bitwise integer ops, Where, Clip, PRelu and the
// com.microsoft GELU forms.
// Cast and CastLike live in elementwise_cast_schemas.cc.
#include <optional>
#include <string>
#include <vector>

#include "ops/elementwise_schema_utils.h"

namespace tob {

namespace {

Status CheckLegacyBroadcastAttrs(InferenceContext& ctx) {
  // Opset <= 6 arithmetic: broadcast=1 matches B against A's dims at `axis`; the output is A's.
  int64_t broadcast = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("broadcast", &broadcast, 0));
  if (broadcast != 0 && broadcast != 1) return ctx.Fail("attribute 'broadcast' must be 0 or 1, got ", broadcast);
  const ValueType& a = *ctx.input_type(0);
  const ValueType& b = *ctx.input_type(1);
  if (a.dtype != b.dtype)
    return ctx.Fail("inputs must have the same type, got ", DTypeName(a.dtype), " and ", DTypeName(b.dtype));
  if (a.has_rank() && b.has_rank()) {
    int64_t ra = a.rank(), rb = b.rank();
    if (broadcast == 0) {
      if (ra != rb) return ctx.Fail("without broadcast=1 the inputs must have the same shape");
      for (int64_t i = 0; i < ra; ++i) {
        const Dim& da = (*a.shape)[i];
        const Dim& db = (*b.shape)[i];
        if (da.is_known() && db.is_known() && da.value != db.value)
          return ctx.Fail("without broadcast=1 the inputs must have the same shape, got ", DimsToString(*a.shape),
                          " and ", DimsToString(*b.shape));
      }
    } else {
      int64_t axis = ra - rb;
      if (ctx.node().FindAttribute("axis") != nullptr) {
        TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis));
        if (axis < 0) axis += ra;
      }
      if (axis < 0 || axis + rb > ra)
        return ctx.Fail("B ", DimsToString(*b.shape), " does not fit A ", DimsToString(*a.shape), " at axis ", axis);
    }
  }
  ctx.set_output(0, a);
  return Status::OK();
}

// Add/Sub/Mul/Div: numpy broadcasting from opset 7, the legacy form before.
Status InferArithmetic(InferenceContext& ctx) {
  if (ctx.opset() < 7) return CheckLegacyBroadcastAttrs(ctx);
  return InferBroadcast(ctx, std::nullopt, /*same_type=*/true);
}

Status InferMod(InferenceContext& ctx) {
  int64_t fmod = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("fmod", &fmod, 0));
  if (fmod != 0 && fmod != 1) return ctx.Fail("attribute 'fmod' must be 0 or 1, got ", fmod);
  return InferBroadcast(ctx, std::nullopt, true);
}

Status InferPow(InferenceContext& ctx) {
  // Before opset 12 base and exponent shared one type; the result always has the base's type.
  return InferBroadcast(ctx, std::nullopt, /*same_type=*/ctx.opset() < 12);
}

// PRelu and the biased GELUs: the second input broadcasts onto the first, whose type is the result's.
Status InferUnidirectional(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const ValueType& s = *ctx.input_type(i);
    if (s.dtype != x.dtype)
      return ctx.Fail("input ", i, " has type ", DTypeName(s.dtype), ", expected ", DTypeName(x.dtype));
    if (x.has_rank() && s.has_rank()) {
      TOB_ASSIGN_OR_RETURN(Dims b, BroadcastDims(ctx, *x.shape, *s.shape));
      if (b.size() != x.shape->size())
        return ctx.Fail("input ", i, " ", DimsToString(*s.shape), " does not broadcast onto ", DimsToString(*x.shape));
      for (size_t d = 0; d < b.size(); ++d) {
        const Dim& xd = (*x.shape)[d];
        if (xd.is_known() && b[d].is_known() && xd.value != b[d].value)
          return ctx.Fail("input ", i, " ", DimsToString(*s.shape), " does not broadcast onto ",
                          DimsToString(*x.shape));
      }
    }
  }
  ctx.set_output(0, x);
  return Status::OK();
}

// SwiGLU: gate and value of one type and one shape (the op does not broadcast).
Status InferSameShapePair(InferenceContext& ctx) {
  const ValueType& a = *ctx.input_type(0);
  const ValueType& b = *ctx.input_type(1);
  if (a.dtype != b.dtype)
    return ctx.Fail("A and B must have the same type, got ", DTypeName(a.dtype), " and ", DTypeName(b.dtype));
  if (a.has_rank() && b.has_rank()) {
    bool same = a.shape->size() == b.shape->size();
    for (size_t d = 0; same && d < a.shape->size(); ++d) {
      const Dim& x = (*a.shape)[d];
      const Dim& y = (*b.shape)[d];
      same = !(x.is_known() && y.is_known() && x.value != y.value);
    }
    if (!same)
      return ctx.Fail("A ", DimsToString(*a.shape), " and B ", DimsToString(*b.shape),
                      " must have the same shape (no broadcasting)");
  }
  ctx.set_output(0, a);
  return Status::OK();
}

Status InferWhere(InferenceContext& ctx) {
  if (ctx.input_type(0)->dtype != DType::kBool)
    return ctx.Fail("condition must be bool, got ", DTypeName(ctx.input_type(0)->dtype));
  if (ctx.input_type(1)->dtype != ctx.input_type(2)->dtype)
    return ctx.Fail("X and Y must have the same type, got ", DTypeName(ctx.input_type(1)->dtype), " and ",
                    DTypeName(ctx.input_type(2)->dtype));
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> dims, BroadcastAll(ctx, 0));
  ctx.set_output(0, ValueType(ctx.input_type(1)->dtype, std::move(dims)));
  return Status::OK();
}

Status InferClip(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  if (ctx.opset() < 11) {
    float lo = 0.f, hi = 0.f;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("min", &lo, -3.402823466e+38f));
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("max", &hi, 3.402823466e+38f));
    if (ctx.num_inputs() > 1) return ctx.Fail("before opset 11 min and max are attributes, not inputs");
  }
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const ValueType& b = *ctx.input_type(i);
    if (b.dtype != x.dtype)
      return ctx.Fail(i == 1 ? "min" : "max", " has type ", DTypeName(b.dtype), ", expected ", DTypeName(x.dtype));
    if (b.has_rank() && b.rank() > 1)
      return ctx.Fail(i == 1 ? "min" : "max", " must be a scalar, got shape ", DimsToString(*b.shape));
    if (b.has_rank() && b.rank() == 1 && (*b.shape)[0].is_known() && (*b.shape)[0].value != 1)
      return ctx.Fail(i == 1 ? "min" : "max", " must be a scalar, got shape ", DimsToString(*b.shape));
  }
  ctx.set_output(0, x);
  return Status::OK();
}

Status InferIsInf(InferenceContext& ctx) {
  int64_t pos = 1, neg = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("detect_positive", &pos, 1));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("detect_negative", &neg, 1));
  return InferUnaryWithType(ctx, DType::kBool);
}

Status InferBitShift(InferenceContext& ctx) {
  std::string direction;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("direction", &direction));
  if (direction != "LEFT" && direction != "RIGHT")
    return ctx.Fail("attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"", direction, "\"");
  return InferBroadcast(ctx, std::nullopt, /*same_type=*/true);
}

Status InferGelu(InferenceContext& ctx) {
  std::string approximate;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("approximate", &approximate, std::string("none")));
  if (approximate != "none" && approximate != "tanh")
    return ctx.Fail("attribute 'approximate' must be 'none' or 'tanh', got '", approximate, "'");
  return InferUnary(ctx);
}

Status InferVariadic(InferenceContext& ctx) {
  const ValueType& first = *ctx.input_type(0);
  for (int i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.input_type(i)->dtype != first.dtype)
      return ctx.Fail("input ", i, " has type ", DTypeName(ctx.input_type(i)->dtype), ", expected ",
                      DTypeName(first.dtype));
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> dims, BroadcastAll(ctx, 0));
  ctx.set_output(0, ValueType(first.dtype, std::move(dims)));
  return Status::OK();
}

void Add(OpSchemaRegistry& registry, const std::string& domain, const std::string& op, int min_in, int max_in,
         ShapeFunction fn) {
  OpSchema s;
  s.domain = domain;
  s.op_type = op;
  s.min_inputs = min_in;
  s.max_inputs = max_in;
  s.infer = std::move(fn);
  registry.Register(std::move(s));
}

}  // namespace

void RegisterElementwiseSchemas(OpSchemaRegistry& registry) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) Add(registry, "", op, 2, 2, InferArithmetic);
  Add(registry, "", "Mod", 2, 2, InferMod);
  Add(registry, "", "Pow", 2, 2, InferPow);
  Add(registry, "", "PRelu", 2, 2, InferUnidirectional);

  for (const char* op : {"Neg",  "Abs",       "Sqrt", "Reciprocal", "Exp",      "Log",      "Tanh",        "Sigmoid",
                         "Relu", "LeakyRelu", "Elu",  "Selu",       "Softplus", "Softsign", "HardSigmoid", "HardSwish",
                         "Erf",  "Floor",     "Ceil", "Round",      "Sign",     "Sin",      "Cos"})
    Add(registry, "", op, 1, 1, InferUnary);
  for (const char* op : {"Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Celu", "Shrink",
                         "ThresholdedRelu", "Mish", "Swish"})
    Add(registry, "", op, 1, 1, InferUnary);
  Add(registry, "", "SwiGLU", 2, 2, InferSameShapePair);
  Add(registry, "", "Gelu", 1, 1, InferGelu);

  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    Add(registry, "", op, 2, 2, [](InferenceContext& ctx) { return InferBroadcast(ctx, DType::kBool, true); });
  for (const char* op : {"And", "Or", "Xor"})
    Add(registry, "", op, 2, 2, [](InferenceContext& ctx) { return InferBroadcast(ctx, DType::kBool, true); });
  Add(registry, "", "Not", 1, 1, InferUnary);
  // The integer (bitwise) forms: the result has the inputs' type.
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    Add(registry, "", op, 2, 2, [](InferenceContext& ctx) { return InferBroadcast(ctx, std::nullopt, true); });
  Add(registry, "", "BitwiseNot", 1, 1, InferUnary);
  Add(registry, "", "BitShift", 2, 2, InferBitShift);
  Add(registry, "", "IsNaN", 1, 1, [](InferenceContext& ctx) { return InferUnaryWithType(ctx, DType::kBool); });
  Add(registry, "", "IsInf", 1, 1, InferIsInf);
  Add(registry, "", "Where", 3, 3, InferWhere);
  Add(registry, "", "Clip", 1, 3, InferClip);
  for (const char* op : {"Min", "Max", "Mean", "Sum"}) Add(registry, "", op, 1, INT_MAX, InferVariadic);

  Add(registry, kMicrosoftDomain, "Gelu", 1, 1, InferUnary);
  Add(registry, kMicrosoftDomain, "FastGelu", 1, 2, InferUnidirectional);
  Add(registry, kMicrosoftDomain, "BiasGelu", 2, 2, InferUnidirectional);
}

}  // namespace tob
