// Schemas of the sequence and optional ops. Each declares non_tensor_values: its shape function
// sees sequence and optional types (ValueType::kind, ::optional); a sequence's type carries its
// element type and the shape its tensors share, when known.
#include "ops/op_schema.h"

namespace tob {

namespace {

Status RequireSequence(const InferenceContext& ctx, int i) {
  const ValueType& t = *ctx.input_type(i);
  if (!t.is_sequence() || t.optional)
    return ctx.Fail("input ", i, " '", ctx.node().inputs()[i]->name(), "' must be a sequence, got ", t.KindName(), " ",
                    t.ToString());
  return Status::OK();
}

Status RequireTensor(const InferenceContext& ctx, int i) {
  const ValueType& t = *ctx.input_type(i);
  if (!t.is_tensor())
    return ctx.Fail("input ", i, " '", ctx.node().inputs()[i]->name(), "' must be a tensor, got ", t.KindName(), " ",
                    t.ToString());
  return Status::OK();
}

// A position input: an int32 or int64 scalar (or a one-element 1-D tensor, which onnx's own
// tests and onnxruntime take too).
Status RequirePosition(const InferenceContext& ctx, int i) {
  if (!ctx.has_input(i)) return Status::OK();
  TOB_RETURN_IF_ERROR(RequireTensor(ctx, i));
  const ValueType& t = *ctx.input_type(i);
  if (t.dtype != DType::kUndefined && t.dtype != DType::kInt32 && t.dtype != DType::kInt64)
    return ctx.Fail("position must be int32 or int64, got ", DTypeName(t.dtype));
  const bool one_element =
      t.shape &&
      (t.shape->empty() || (t.shape->size() == 1 && (!(*t.shape)[0].is_known() || (*t.shape)[0].value == 1)));
  if (t.shape && !one_element) return ctx.Fail("position must be a scalar, got shape ", DimsToString(*t.shape));
  return Status::OK();
}

std::optional<Dims> CommonShape(const std::optional<Dims>& a, const std::optional<Dims>& b) {
  if (!a || !b || *a != *b) return std::nullopt;
  return a;
}

Status InferSequenceEmpty(InferenceContext& ctx) {
  int64_t code = static_cast<int64_t>(DType::kFloat32);
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("dtype", &code, code));
  const DType dtype = DTypeFromOnnx(static_cast<int32_t>(code));
  if (dtype == DType::kUndefined) return ctx.Fail("dtype ", code, " is not a supported element type");
  ctx.set_output(0, ValueType::Sequence(dtype));
  return Status::OK();
}

Status InferSequenceConstruct(InferenceContext& ctx) {
  std::optional<Dims> shape;
  DType dtype = DType::kUndefined;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Fail("input ", i, " is missing");
    TOB_RETURN_IF_ERROR(RequireTensor(ctx, i));
    const ValueType& t = *ctx.input_type(i);
    if (i == 0) {
      dtype = t.dtype;
      shape = t.shape;
    } else {
      if (t.dtype != dtype)
        return ctx.Fail("input ", i, " is ", DTypeName(t.dtype), " but input 0 is ", DTypeName(dtype),
                        ": a sequence holds one element type");
      shape = CommonShape(shape, t.shape);
    }
  }
  ctx.set_output(0, ValueType::Sequence(dtype, shape));
  return Status::OK();
}

Status InferSequenceAt(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireSequence(ctx, 0));
  TOB_RETURN_IF_ERROR(RequirePosition(ctx, 1));
  const ValueType& s = *ctx.input_type(0);
  ctx.set_output(0, ValueType(s.dtype, s.shape));
  return Status::OK();
}

Status InferSequenceInsert(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireSequence(ctx, 0));
  TOB_RETURN_IF_ERROR(RequireTensor(ctx, 1));
  TOB_RETURN_IF_ERROR(RequirePosition(ctx, 2));
  const ValueType& s = *ctx.input_type(0);
  const ValueType& t = *ctx.input_type(1);
  if (s.dtype != DType::kUndefined && t.dtype != s.dtype)
    return ctx.Fail("tensor is ", DTypeName(t.dtype), " but the sequence holds ", DTypeName(s.dtype));
  // An inserted tensor of the sequence's shape keeps it (an empty sequence has no common shape).
  ctx.set_output(0, ValueType::Sequence(t.dtype, CommonShape(s.shape, t.shape)));
  return Status::OK();
}

Status InferSequenceErase(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireSequence(ctx, 0));
  TOB_RETURN_IF_ERROR(RequirePosition(ctx, 1));
  ctx.set_output(0, *ctx.input_type(0));
  return Status::OK();
}

Status InferSequenceLength(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireSequence(ctx, 0));
  ctx.set_output(0, ValueType(DType::kInt64, Dims{}));
  return Status::OK();
}

Status InferSplitToSequence(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireTensor(ctx, 0));
  const ValueType& x = *ctx.input_type(0);
  int64_t axis = 0, keepdims = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{0}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("keepdims", &keepdims, int64_t{1}));
  if (ctx.has_input(1)) {
    TOB_RETURN_IF_ERROR(RequireTensor(ctx, 1));
    const DType t = ctx.input_type(1)->dtype;
    if (t != DType::kUndefined && t != DType::kInt32 && t != DType::kInt64)
      return ctx.Fail("split must be int32 or int64, got ", DTypeName(t));
  }
  if (x.shape) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, x.rank(), &a));
  }
  ctx.set_output(0, ValueType::Sequence(x.dtype));
  return Status::OK();
}

Status InferConcatFromSequence(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireSequence(ctx, 0));
  const ValueType& s = *ctx.input_type(0);
  int64_t axis = 0, new_axis = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("new_axis", &new_axis, int64_t{0}));
  if (new_axis != 0 && new_axis != 1) return ctx.Fail("new_axis must be 0 or 1, got ", new_axis);
  std::optional<Dims> dims;
  if (s.shape) {
    const int64_t rank = s.rank() + new_axis;
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, rank, &a));
    dims = Dims(static_cast<size_t>(rank), Dim::Unknown());  // the count of tensors is a run-time fact
    for (int64_t d = 0, k = 0; d < rank; ++d)
      if (d != a) (*dims)[d] = (*s.shape)[k++];
      else if (!new_axis) ++k;
  }
  ctx.set_output(0, ValueType(s.dtype, dims));
  return Status::OK();
}

// Optional(input?): optional(input's type); with no input, an empty optional of the type its
// 'type' attribute names (which must then be present; with an input it must agree).
Status InferOptional(InferenceContext& ctx) {
  const Attribute* attr = ctx.node().FindAttribute("type");
  if (attr != nullptr && attr->type != AttrType::kTypeProto)
    return ctx.Fail("attribute 'type' must be a type proto, got ", AttrTypeName(attr->type));
  if (attr != nullptr && (attr->type_proto.optional || attr->type_proto.dtype == DType::kUndefined))
    return ctx.Fail("attribute 'type' must be a tensor or sequence type, got ", attr->type_proto.ToString());
  if (!ctx.has_input(0)) {
    if (attr == nullptr) return ctx.Fail("needs an input or a 'type' attribute");
    ctx.set_output(0, attr->type_proto.AsOptional());
    return Status::OK();
  }
  ValueType t = *ctx.input_type(0);
  if (t.optional) return ctx.Fail("input is already optional (", t.ToString(), ")");
  if (attr != nullptr && (attr->type_proto.kind != t.kind || attr->type_proto.dtype != t.dtype))
    return ctx.Fail("attribute 'type' is ", attr->type_proto.ToString(), " but the input is ", t.ToString());
  ctx.set_output(0, t.AsOptional());
  return Status::OK();
}

Status InferOptionalHasElement(InferenceContext& ctx) {
  if (ctx.has_input(0) && ctx.opset() < 18 && !ctx.input_type(0)->optional)
    return ctx.Fail("input must be an optional before opset 18, got ", ctx.input_type(0)->ToString());
  ctx.set_output(0, ValueType(DType::kBool, Dims{}));
  return Status::OK();
}

Status InferOptionalGetElement(InferenceContext& ctx) {
  const ValueType& t = *ctx.input_type(0);
  if (ctx.opset() < 18 && !t.optional) return ctx.Fail("input must be an optional before opset 18, got ", t.ToString());
  ctx.set_output(0, t.Element());
  return Status::OK();
}

OpSchema ValueSchema(const char* op, int min_in, int max_in, ShapeFunction infer) {
  OpSchema s{"", op, min_in, max_in, 1, 1, std::move(infer)};
  s.non_tensor_values = true;
  return s;
}

}  // namespace

void RegisterSequenceSchemas(OpSchemaRegistry& registry) {
  registry.Register(ValueSchema("SequenceEmpty", 0, 0, InferSequenceEmpty));
  registry.Register(ValueSchema("SequenceConstruct", 1, INT_MAX, InferSequenceConstruct));
  registry.Register(ValueSchema("SequenceAt", 2, 2, InferSequenceAt));
  registry.Register(ValueSchema("SequenceInsert", 2, 3, InferSequenceInsert));
  registry.Register(ValueSchema("SequenceErase", 1, 2, InferSequenceErase));
  registry.Register(ValueSchema("SequenceLength", 1, 1, InferSequenceLength));
  registry.Register(ValueSchema("SplitToSequence", 1, 2, InferSplitToSequence));
  registry.Register(ValueSchema("ConcatFromSequence", 1, 1, InferConcatFromSequence));
  registry.Register(ValueSchema("Optional", 0, 1, InferOptional));
  registry.Register(ValueSchema("OptionalHasElement", 0, 1, InferOptionalHasElement));
  registry.Register(ValueSchema("OptionalGetElement", 1, 1, InferOptionalGetElement));
}

}  // namespace tob
