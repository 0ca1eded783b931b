// QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear: the output has the input's shape;
// its element type comes from the zero point, 'output_dtype' or the scale. The scale / zero point
// layout (per tensor, per axis, blocked) is checked where the shapes are known
// (ops/quantize_attributes.h; the kernels check it again on the concrete shapes).
#include <algorithm>

#include "ops/elementwise_schema_utils.h"
#include "ops/quantize_attributes.h"

namespace tob {

namespace {

bool Contains(const std::vector<DType>& v, DType t) { return std::find(v.begin(), v.end(), t) != v.end(); }

std::string TypeNames(const std::vector<DType>& v) {
  std::string r;
  for (DType t : v) r += (r.empty() ? "" : ", ") + std::string(DTypeName(t));
  return r;
}

// Known dims as values, unknown and symbolic ones as -1; nullopt for an unknown rank.
std::optional<std::vector<int64_t>> KnownDims(const ValueType& t) {
  if (!t.has_rank()) return std::nullopt;
  std::vector<int64_t> r;
  for (const Dim& d : *t.shape) r.push_back(d.is_known() ? d.value : -1);
  return r;
}

// The layout check on what is known of the shapes.
Status CheckLayout(InferenceContext& ctx, const QuantAttributes& attrs) {
  auto x = KnownDims(*ctx.input_type(0));
  auto scale = KnownDims(*ctx.input_type(1));
  std::optional<std::vector<int64_t>> zp;
  if (ctx.has_input(2)) {
    zp = KnownDims(*ctx.input_type(2));
    if (!zp) return Status::OK();
  }
  if (!x || !scale) return Status::OK();
  return ResolveQuantLayout(*x, *scale, zp ? &*zp : nullptr, attrs, ctx.node().Describe()).status();
}

Status InferQuantizeLinear(InferenceContext& ctx) {
  TOB_ASSIGN_OR_RETURN(QuantAttributes attrs, QuantAttributes::Read(ctx.node(), ctx.opset(), true));
  const DType x = ctx.input_type(0)->dtype, scale = ctx.input_type(1)->dtype;
  if (ctx.opset() < 23 && ctx.opset() >= 19 && x != scale)
    return ctx.Fail("x (", DTypeName(x), ") and y_scale (", DTypeName(scale), ") must share one type before opset 23");
  DType out = DType::kUInt8;
  if (ctx.has_input(2)) {
    out = ctx.input_type(2)->dtype;
    if (attrs.output_dtype != DType::kUndefined && attrs.output_dtype != out)
      return ctx.Fail("output_dtype ", DTypeName(attrs.output_dtype), " differs from the zero point's type ",
                      DTypeName(out));
  } else if (attrs.output_dtype != DType::kUndefined) {
    out = attrs.output_dtype;
  }
  const std::vector<DType> allowed = QuantizedTypesAt(ctx.opset());
  if (!Contains(allowed, out))
    return ctx.Fail("cannot quantize to ", DTypeName(out), " at opset ", ctx.opset(), " (the types are ",
                    TypeNames(allowed), ")");
  TOB_RETURN_IF_ERROR(CheckLayout(ctx, attrs));
  return InferUnaryWithType(ctx, out);
}

Status InferDequantizeLinear(InferenceContext& ctx) {
  TOB_ASSIGN_OR_RETURN(QuantAttributes attrs, QuantAttributes::Read(ctx.node(), ctx.opset(), false));
  const DType x = ctx.input_type(0)->dtype, scale = ctx.input_type(1)->dtype;
  std::vector<DType> inputs = QuantizedTypesAt(ctx.opset());
  inputs.push_back(DType::kInt32);
  if (!Contains(inputs, x))
    return ctx.Fail("cannot dequantize ", DTypeName(x), " at opset ", ctx.opset(), " (the types are ",
                    TypeNames(inputs), ")");
  if (ctx.has_input(2) && ctx.input_type(2)->dtype != x)
    return ctx.Fail("the zero point's type ", DTypeName(ctx.input_type(2)->dtype), " differs from x's ", DTypeName(x));
  const std::vector<DType> floats{DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const DType out = attrs.output_dtype != DType::kUndefined ? attrs.output_dtype : scale;
  if (!Contains(floats, out))
    return ctx.Fail("the output type ", DTypeName(out),
                    attrs.output_dtype != DType::kUndefined ? " (output_dtype)" : " (the scale's)",
                    " must be float32, float16 or bfloat16",
                    scale == DType::kFloat8E8M0 ? "; a float8e8m0 scale needs output_dtype" : "");
  TOB_RETURN_IF_ERROR(CheckLayout(ctx, attrs));
  return InferUnaryWithType(ctx, out);
}

// x -> y (uint8, x's shape), y_scale (float32 scalar), y_zero_point (uint8 scalar).
Status InferDynamicQuantizeLinear(InferenceContext& ctx) {
  if (ctx.input_type(0)->dtype != DType::kFloat32)
    return ctx.Fail("x must be float32, got ", DTypeName(ctx.input_type(0)->dtype));
  ctx.set_output(0, ValueType(DType::kUInt8, ctx.input_type(0)->shape));
  ctx.set_output(1, ValueType(DType::kFloat32, Dims{}));
  ctx.set_output(2, ValueType(DType::kUInt8, Dims{}));
  return Status::OK();
}

}  // namespace

void RegisterElementwiseQuantizeSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "QuantizeLinear", 2, 3, 1, 1, InferQuantizeLinear});
  registry.Register(OpSchema{"", "DequantizeLinear", 2, 3, 1, 1, InferDequantizeLinear});
  registry.Register(OpSchema{"", "DynamicQuantizeLinear", 1, 1, 3, 3, InferDynamicQuantizeLinear});
}

}  // namespace tob
