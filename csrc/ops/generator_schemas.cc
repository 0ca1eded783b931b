// Schemas of the ops that make tensors: Constant, ConstantOfShape, Range, EyeLike, OneHot, Trilu,
// Dropout, the Random* family and the signal windows (HannWindow, HammingWindow, BlackmanWindow). ConstantOfShape,
// Range and OneHot have value-dependent shapes: exact when the values are known (always at run time), rank-only or
// unknown otherwise.
#include <cmath>
#include <vector>

#include "ops/op_schema.h"

namespace tob {
namespace {

bool IsIntegerType(DType t) { return IsSignedInteger(t) || IsUnsignedInteger(t); }

// The dtype of a "dtype" attribute; `fallback` when absent.
Status ReadDTypeAttr(const InferenceContext& ctx, DType fallback, DType* out) {
  int64_t code = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("dtype", &code, static_cast<int64_t>(fallback)));
  *out = DTypeFromOnnx(static_cast<int32_t>(code));
  if (*out == DType::kUndefined || *out == DType::kString)
    return ctx.Fail("dtype ", code, " is not a supported tensor type");
  return Status::OK();
}

Status InferConstant(InferenceContext& ctx) {
  const Node& node = ctx.node();
  static const char* kValueAttrs[] = {"value",      "value_float",  "value_floats",  "value_int",
                                      "value_ints", "value_string", "value_strings", "sparse_value"};
  const char* found = nullptr;
  for (const char* name : kValueAttrs) {
    if (node.FindAttribute(name) == nullptr) continue;
    if (found != nullptr) return ctx.Fail("has both '", found, "' and '", name, "'; exactly one is allowed");
    found = name;
  }
  if (found == nullptr) return ctx.Fail("needs one of value, value_float(s), value_int(s)");
  std::string which = found;
  if (which == "sparse_value") return NotImplemented(node.Describe(), ": Constant with '", which, "' is not supported");
  if (which == "value") {
    Tensor t;
    TOB_RETURN_IF_ERROR(node.GetAttr("value", &t));
    if (t.dtype() == DType::kUndefined)
      return NotImplemented(node.Describe(), ": Constant of dtype ", DTypeName(t.dtype()), " is not supported");
    ctx.set_output(0, ValueType::OfTensor(t));
  } else if (which == "value_string") {
    std::string text;
    TOB_RETURN_IF_ERROR(node.GetAttr("value_string", &text));
    ctx.set_output(0, ValueType(DType::kString, Dims{}));
  } else if (which == "value_strings") {
    std::vector<std::string> texts;
    TOB_RETURN_IF_ERROR(node.GetAttr("value_strings", &texts));
    ctx.set_output(0, ValueType(DType::kString, Dims{static_cast<int64_t>(texts.size())}));
  } else if (which == "value_float") {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims{}));
  } else if (which == "value_int") {
    ctx.set_output(0, ValueType(DType::kInt64, Dims{}));
  } else {
    const Attribute& a = *node.FindAttribute(which);
    bool floats = which == "value_floats";
    if (a.type != (floats ? AttrType::kFloats : AttrType::kInts))
      return ctx.Fail("attribute '", which, "' must be ", floats ? "FLOATS" : "INTS");
    int64_t n = static_cast<int64_t>(floats ? a.floats.size() : a.ints.size());
    ctx.set_output(0, ValueType(floats ? DType::kFloat32 : DType::kInt64, Dims{n}));
  }
  return Status::OK();
}

// A 1-D int64 tensor of non-negative sizes.
Status ShapeFromValue(const InferenceContext& ctx, const Tensor& value, Dims* dims) {
  if (value.dtype() != DType::kInt64 || value.rank() != 1) return ctx.Fail("shape input must be a 1-D int64 tensor");
  dims->clear();
  for (int64_t v : value.ToInt64Vector()) {
    if (v < 0) return ctx.Fail("shape entry ", v, " is negative");
    dims->push_back(Dim(v));
  }
  return Status::OK();
}

Status InferConstantOfShape(InferenceContext& ctx) {
  DType dtype = DType::kFloat32;
  if (const Attribute* a = ctx.node().FindAttribute("value")) {
    if (a->type != AttrType::kTensor) return ctx.Fail("attribute 'value' must be a tensor");
    if (a->t.numel() != 1) return ctx.Fail("attribute 'value' must hold one element, got ", a->t.numel());
    dtype = a->t.dtype();
    if (dtype == DType::kString) return NotImplemented(ctx.node().Describe(), ": string tensors are not supported");
  }
  const ValueType& shape_type = *ctx.input_type(0);
  if (shape_type.dtype != DType::kInt64) return ctx.Fail("input must be int64, got ", DTypeName(shape_type.dtype));
  if (shape_type.has_rank() && shape_type.rank() != 1)
    return ctx.Fail("input must be 1-D, got rank ", shape_type.rank());
  ValueType out(dtype, std::nullopt);
  if (const Tensor* value = ctx.input_value(0)) {
    Dims dims;
    TOB_RETURN_IF_ERROR(ShapeFromValue(ctx, *value, &dims));
    out.shape = std::move(dims);
  } else if (shape_type.has_rank() && (*shape_type.shape)[0].is_known()) {
    out.shape = Dims(static_cast<size_t>((*shape_type.shape)[0].value), Dim::Unknown());
  }
  ctx.set_output(0, out);
  return Status::OK();
}

Status InferRange(InferenceContext& ctx) {
  DType dtype = ctx.input_type(0)->dtype;
  for (int i = 0; i < 3; ++i) {
    const ValueType& t = *ctx.input_type(i);
    if (t.dtype != dtype)
      return ctx.Fail("start, limit and delta must share one dtype, got ", DTypeName(dtype), " and ",
                      DTypeName(t.dtype));
    // A one-element vector is taken as its scalar, as onnxruntime does (onnx's own function bodies,
    // AffineGrid's, feed Range such values); whether a dim of unknown size is 1 is checked on the
    // values.
    if (t.has_rank() && !(t.rank() == 0 || (t.rank() == 1 && ((*t.shape)[0] == Dim(1) || !(*t.shape)[0].is_known()))))
      return ctx.Fail("input ", i, " must be a scalar, got ", t.ToString());
  }
  const Tensor* start = ctx.input_value(0);
  const Tensor* limit = ctx.input_value(1);
  const Tensor* delta = ctx.input_value(2);
  if (!start || !limit || !delta) {
    ctx.set_output(0, ValueType(dtype, Dims{Dim::Unknown()}));
    return Status::OK();
  }
  for (const Tensor* t : {start, limit, delta})
    if (t->numel() != 1) return ctx.Fail("start, limit and delta must hold one value each");
  int64_t n = 0;
  if (IsIntegerType(dtype)) {
    int64_t s = start->ElementAsInt64(0), l = limit->ElementAsInt64(0), d = delta->ElementAsInt64(0);
    if (d == 0) return ctx.Fail("delta must not be zero");
    int64_t span = l - s;
    // ceil(span / d) in integers, for either sign.
    n = span / d + ((span % d != 0 && ((span > 0) == (d > 0))) ? 1 : 0);
  } else {
    double s = start->ElementAsDouble(0), l = limit->ElementAsDouble(0), d = delta->ElementAsDouble(0);
    if (d == 0) return ctx.Fail("delta must not be zero");
    double count = std::ceil((l - s) / d);
    if (!std::isfinite(count)) return ctx.Fail("start, limit and delta give no finite length");
    n = static_cast<int64_t>(count);
  }
  ctx.set_output(0, ValueType(dtype, Dims{std::max<int64_t>(n, 0)}));
  return Status::OK();
}

Status InferEyeLike(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  if (in.has_rank() && in.rank() != 2) return ctx.Fail("input must be 2-D, got rank ", in.rank());
  DType dtype;
  TOB_RETURN_IF_ERROR(ReadDTypeAttr(ctx, in.dtype, &dtype));
  int64_t k = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("k", &k, 0));
  ctx.set_output(0, ValueType(dtype, in.shape));
  return Status::OK();
}

Status InferOneHot(InferenceContext& ctx) {
  const ValueType& indices = *ctx.input_type(0);
  const ValueType& values = *ctx.input_type(2);
  if (values.has_rank() && !(values.rank() == 1 && (*values.shape)[0] == Dim(2)))
    return ctx.Fail("values must be a 2-element 1-D tensor [off, on], got ", values.ToString());
  const ValueType& depth_type = *ctx.input_type(1);
  if (depth_type.has_rank() && depth_type.rank() > 1)
    return ctx.Fail("depth must be a scalar, got rank ", depth_type.rank());
  int64_t axis = -1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, -1));
  if (!indices.has_rank()) {
    ctx.set_output(0, ValueType(values.dtype, std::nullopt));
    return Status::OK();
  }
  int64_t out_rank = indices.rank() + 1, a = 0;
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, out_rank, &a));
  Dim depth = Dim::Unknown();
  if (const Tensor* d = ctx.input_value(1)) {
    if (d->numel() != 1) return ctx.Fail("depth must hold one value, got ", d->numel());
    double v = d->ElementAsDouble(0);
    if (!(v >= 1)) return ctx.Fail("depth must be positive, got ", v);
    depth = Dim(static_cast<int64_t>(v));
  }
  Dims out = *indices.shape;
  out.insert(out.begin() + a, depth);
  ctx.set_output(0, ValueType(values.dtype, std::move(out)));
  return Status::OK();
}

Status InferTrilu(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  if (in.has_rank() && in.rank() < 2) return ctx.Fail("input must have rank >= 2, got ", in.rank());
  if (ctx.has_input(1)) {
    const ValueType& k = *ctx.input_type(1);
    if (k.dtype != DType::kInt64) return ctx.Fail("k must be int64, got ", DTypeName(k.dtype));
    if (const Tensor* v = ctx.input_value(1); v && v->numel() != 1)
      return ctx.Fail("k must hold one value, got ", v->numel());
  }
  int64_t upper = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("upper", &upper, 1));
  return PropagateType(ctx);
}

Status InferDropout(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  if (ctx.opset() < 12) {
    if (ctx.num_inputs() > 1) return ctx.Fail("takes one input before opset 12");
    float ratio = 0.5f;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("ratio", &ratio, 0.5f));
    if (!(ratio >= 0 && ratio < 1)) return ctx.Fail("ratio must be in [0, 1), got ", ratio);
  } else {
    if (const Tensor* r = ctx.input_value(1)) {
      if (r->numel() != 1) return ctx.Fail("ratio must hold one value, got ", r->numel());
      double ratio = r->ElementAsDouble(0);
      if (!(ratio >= 0 && ratio < 1)) return ctx.Fail("ratio must be in [0, 1), got ", ratio);
    }
    if (ctx.has_input(2) && ctx.input_type(2)->dtype != DType::kBool)
      return ctx.Fail("training_mode must be bool, got ", DTypeName(ctx.input_type(2)->dtype));
  }
  ctx.set_output(0, in);
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(ctx.opset() < 10 ? in.dtype : DType::kBool, in.shape));
  return Status::OK();
}

// Dropout draws a random mask when training: its training_mode input (opset 12+) is present and
// not a constant false. Opsets 7-11 have no training mode (the identity), 1-6 an is_test attribute.
bool DropoutIsTraining(const Node& node, int opset) {
  if (opset < 7) {
    int64_t is_test = 0;
    return !node.GetAttr("is_test", &is_test, int64_t{0}).ok() || is_test == 0;
  }
  if (opset < 12) return false;
  const Value* mode = node.input(2);
  if (mode == nullptr) return false;
  const Tensor* t = mode->initializer();
  return t == nullptr || t->numel() != 1 || t->ElementAsInt64(0) != 0;
}

Status CheckRandomDType(const InferenceContext& ctx, DType dtype) {
  if (!IsFloatingPoint(dtype)) return ctx.Fail("random values must be a floating-point type, got ", DTypeName(dtype));
  return Status::OK();
}

Status InferRandom(InferenceContext& ctx) {
  DType dtype;
  TOB_RETURN_IF_ERROR(ReadDTypeAttr(ctx, DType::kFloat32, &dtype));
  TOB_RETURN_IF_ERROR(CheckRandomDType(ctx, dtype));
  std::vector<int64_t> shape;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("shape", &shape));
  Dims dims;
  for (int64_t d : shape) {
    if (d < 0) return ctx.Fail("shape entry ", d, " is negative");
    dims.push_back(Dim(d));
  }
  ctx.set_output(0, ValueType(dtype, std::move(dims)));
  return Status::OK();
}

Status InferRandomLike(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  DType dtype;
  TOB_RETURN_IF_ERROR(ReadDTypeAttr(ctx, in.dtype, &dtype));
  TOB_RETURN_IF_ERROR(CheckRandomDType(ctx, dtype));
  ctx.set_output(0, ValueType(dtype, in.shape));
  return Status::OK();
}

// Bernoulli: 0/1 draws of X's shape, of type `dtype` (X's type by default): any numeric type or bool.
Status InferBernoulli(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  if (!IsFloatingPoint(in.dtype))
    return ctx.Fail("input must hold probabilities (floating point), got ", DTypeName(in.dtype));
  DType dtype;
  TOB_RETURN_IF_ERROR(ReadDTypeAttr(ctx, in.dtype, &dtype));
  if (dtype == DType::kUndefined || dtype == DType::kString) return ctx.Fail("dtype must be numeric or bool");
  ctx.set_output(0, ValueType(dtype, in.shape));
  return Status::OK();
}

// The windows: a 1-D tensor of `size` (an input's value) elements of type `output_datatype`.
Status InferWindow(InferenceContext& ctx) {
  const ValueType& size = *ctx.input_type(0);
  if (size.dtype != DType::kInt32 && size.dtype != DType::kInt64)
    return ctx.Fail("size must be int32 or int64, got ", DTypeName(size.dtype));
  int64_t code = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("output_datatype", &code, int64_t{1}));
  const DType dtype = DTypeFromOnnx(static_cast<int32_t>(code));
  if (dtype == DType::kUndefined || dtype == DType::kString || dtype == DType::kBool)
    return ctx.Fail("output_datatype ", code, " is not a numeric tensor type");
  ctx.set_output(0, ValueType(dtype, Dims{Dim::Unknown()}));
  return Status::OK();
}

}  // namespace

void RegisterGeneratorSchemas(OpSchemaRegistry& registry) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"})
    registry.Register(OpSchema{"", op, 1, 1, 1, 1, InferWindow});
  registry.Register(OpSchema{"", "Constant", 0, 0, 1, 1, InferConstant});
  registry.Register(OpSchema{"", "ConstantOfShape", 1, 1, 1, 1, InferConstantOfShape});
  registry.Register(OpSchema{"", "Range", 3, 3, 1, 1, InferRange});
  registry.Register(OpSchema{"", "EyeLike", 1, 1, 1, 1, InferEyeLike});
  registry.Register(OpSchema{"", "OneHot", 3, 3, 1, 1, InferOneHot});
  registry.Register(OpSchema{"", "Trilu", 1, 2, 1, 1, InferTrilu});
  OpSchema dropout{"", "Dropout", 1, 3, 1, 2, InferDropout};
  dropout.nondeterministic = DropoutIsTraining;
  registry.Register(std::move(dropout));
  for (const char* op : {"RandomNormal", "RandomUniform"}) {
    OpSchema random{"", op, 0, 0, 1, 1, InferRandom};
    random.nondeterministic = AlwaysNondeterministic;
    registry.Register(std::move(random));
  }
  OpSchema bernoulli{"", "Bernoulli", 1, 1, 1, 1, InferBernoulli};
  bernoulli.nondeterministic = AlwaysNondeterministic;
  registry.Register(std::move(bernoulli));
  for (const char* op : {"RandomNormalLike", "RandomUniformLike"}) {
    OpSchema random{"", op, 1, 1, 1, 1, InferRandomLike};
    random.nondeterministic = AlwaysNondeterministic;
    registry.Register(std::move(random));
  }
}

}  // namespace tob
