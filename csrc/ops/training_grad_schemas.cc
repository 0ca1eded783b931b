// Gradient ops of activations, softmax, LayerNormalization, Gather and BatchNormalization, and the
// training-mode BatchNormInternal (com.microsoft, opset 1).
#include "ops/training_schema_utils.h"

#include <algorithm>

namespace tob {

using namespace training_schema;

namespace {

// (dY, X or Y) -> dX of an elementwise activation: one dtype, one shape.
Status InferElementwiseGrad(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "dY"));
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> shape, SameShape(ctx, 0, 1));
  ctx.set_output(0, ValueType(ctx.input_type(0)->dtype, std::move(shape)));
  return Status::OK();
}

// SoftmaxGrad_13 / LogSoftmaxGrad_13 (default axis -1) and the opset-1 forms (default axis 1).
Status InferSoftmaxGrad(InferenceContext& ctx, int64_t default_axis) {
  TOB_RETURN_IF_ERROR(InferElementwiseGrad(ctx));
  int64_t axis = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, default_axis));
  const ValueType& out = ctx.output_types()[0];
  if (out.has_rank()) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, std::max<int64_t>(1, out.rank()), &a));
  }
  return Status::OK();
}

// Number of elements of `dims` when all are known, -1 otherwise.
int64_t KnownNumel(const Dims& dims) {
  int64_t n = 1;
  for (const Dim& d : dims) {
    if (!d.is_known()) return -1;
    n *= d.value;
  }
  return n;
}

// LayerNormalizationGrad (Y_grad, X, scale, mean, inv_std_dev) -> X_grad, scale_grad, bias_grad.
Status InferLayerNormGrad(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "Y_grad"));
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> x_shape, SameShape(ctx, 0, 1));
  const DType dtype = ctx.input_type(0)->dtype;
  const ValueType& scale = *ctx.input_type(2);
  if (scale.dtype != dtype)
    return ctx.Fail("scale has dtype ", DTypeName(scale.dtype), ", Y_grad has ", DTypeName(dtype));
  for (int i : {3, 4}) {
    const DType t = ctx.input_type(i)->dtype;
    if (t != DType::kFloat32 && t != DType::kFloat64)
      return ctx.Fail(i == 3 ? "mean" : "inv_std_dev",
                      " must be float32 or float64 (LayerNormalization's stash_type), got ", DTypeName(t));
  }
  int64_t axis = -1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{-1}));
  if (x_shape) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, static_cast<int64_t>(x_shape->size()), &a));
    const int64_t norm = KnownNumel(Dims(x_shape->begin() + a, x_shape->end()));
    const int64_t rows = KnownNumel(Dims(x_shape->begin(), x_shape->begin() + a));
    if (scale.has_rank() && norm >= 0 && KnownNumel(*scale.shape) >= 0 && KnownNumel(*scale.shape) != norm)
      return ctx.Fail("scale ", scale.ToString(), " must have the ", norm, " elements of the normalized dims");
    for (int i : {3, 4}) {
      const ValueType& stat = *ctx.input_type(i);
      if (stat.has_rank() && rows >= 0 && KnownNumel(*stat.shape) >= 0 && KnownNumel(*stat.shape) != rows)
        return ctx.Fail(i == 3 ? "mean " : "inv_std_dev ", stat.ToString(), " must have one value per normalized row (",
                        rows, ")");
    }
  }
  ctx.set_output(0, ValueType(dtype, std::move(x_shape)));
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, scale);
  return Status::OK();
}

// GatherGrad (shape, indices, dY) -> dX = zeros(shape) with dY scatter-added along axis.
Status InferGatherGrad(InferenceContext& ctx) {
  const ValueType& shape_t = *ctx.input_type(0);
  const ValueType& idx = *ctx.input_type(1);
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 2, "dY"));
  const ValueType& dy = *ctx.input_type(2);
  if (shape_t.dtype != DType::kInt64) return ctx.Fail("shape must be int64, got ", DTypeName(shape_t.dtype));
  if (shape_t.has_rank() && shape_t.rank() != 1) return ctx.Fail("shape must be 1-D, got ", shape_t.ToString());
  if (idx.dtype != DType::kInt32 && idx.dtype != DType::kInt64)
    return ctx.Fail("indices must be int32 or int64, got ", DTypeName(idx.dtype));
  int64_t axis = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{0}));
  std::optional<Dims> out;
  if (const Tensor* v = ctx.input_value(0); v != nullptr) {
    Dims d;
    for (int64_t s : v->ToInt64Vector()) {
      if (s < 0) return ctx.Fail("shape has a negative dim ", s);
      d.push_back(Dim(s));
    }
    out = std::move(d);
  } else if (shape_t.has_rank() && (*shape_t.shape)[0].is_known()) {
    out = Dims(static_cast<size_t>((*shape_t.shape)[0].value), Dim::Unknown());
  }
  if (out) {
    const int64_t r = static_cast<int64_t>(out->size());
    if (r == 0) return ctx.Fail("shape must name at least one dim");
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, r, &a));
    if (idx.has_rank() && dy.has_rank()) {
      Dims expected(out->begin(), out->begin() + a);
      expected.insert(expected.end(), idx.shape->begin(), idx.shape->end());
      expected.insert(expected.end(), out->begin() + a + 1, out->end());
      bool ok = expected.size() == dy.shape->size();
      for (size_t i = 0; ok && i < expected.size(); ++i)
        ok = !(expected[i].is_known() && (*dy.shape)[i].is_known() && expected[i].value != (*dy.shape)[i].value);
      if (!ok)
        return ctx.Fail("dY ", dy.ToString(), " is not the Gather output shape ", DimsToString(expected), " of shape ",
                        DimsToString(*out), ", indices ", idx.ToString(), " and axis ", axis);
    }
  }
  ctx.set_output(0, ValueType(dy.dtype, std::move(out)));
  return Status::OK();
}

// [C] statistics and per-channel parameters of a batch-norm op (input i).
Status CheckChannelInput(const InferenceContext& ctx, int i, const char* name, const Dim& channels) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, i, name));
  const ValueType& t = *ctx.input_type(i);
  if (!t.has_rank()) return Status::OK();
  if (t.rank() != 1) return ctx.Fail("input ", name, " must be 1-D [C], got ", t.ToString());
  const Dim& d = (*t.shape)[0];
  if (d.is_known() && channels.is_known() && d.value != channels.value)
    return ctx.Fail("input ", name, " has ", d.value, " values, X has ", channels.value, " channels");
  return Status::OK();
}

Dim Channels(const ValueType& x) { return x.has_rank() && x.rank() >= 2 ? (*x.shape)[1] : Dim::Unknown(); }

// BatchNormInternal (X, scale, B, input_mean, input_var) -> Y, running_mean, running_var,
// saved_mean, saved_inv_std.
Status InferBatchNormInternal(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "X"));
  const ValueType& x = *ctx.input_type(0);
  if (x.has_rank() && x.rank() < 2) return ctx.Fail("X must be [N, C, ...], got ", x.ToString());
  const Dim c = Channels(x);
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) TOB_RETURN_IF_ERROR(CheckChannelInput(ctx, i, names[i], c));
  ctx.set_output(0, x);
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ValueType(ctx.input_type(3)->dtype, Dims{c}));
  return Status::OK();
}

// BatchNormalizationGrad (dY, X, scale, saved_mean, saved_inv_std) -> dX, dScale, dBias.
Status InferBatchNormGrad(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "dY"));
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> x_shape, SameShape(ctx, 0, 1));
  const ValueType x(ctx.input_type(1)->dtype, x_shape);
  if (x.has_rank() && x.rank() < 2) return ctx.Fail("X must be [N, C, ...], got ", x.ToString());
  const Dim c = Channels(x);
  const char* names[] = {"dY", "X", "scale", "saved_mean", "saved_inv_std"};
  for (int i = 2; i < 5; ++i) TOB_RETURN_IF_ERROR(CheckChannelInput(ctx, i, names[i], c));
  ctx.set_output(0, x);
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ValueType(ctx.input_type(2)->dtype, Dims{c}));
  return Status::OK();
}

}  // namespace

void RegisterTrainingGradSchemas(OpSchemaRegistry& registry) {
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad", "GeluGrad", "FastGeluGrad"})
    registry.Register(OpSchema{kMicrosoftDomain, op, 2, 2, 1, 1, InferElementwiseGrad});
  for (const char* op : {"SoftmaxGrad_13", "LogSoftmaxGrad_13"})
    registry.Register(
        OpSchema{kMicrosoftDomain, op, 2, 2, 1, 1, [](InferenceContext& c) { return InferSoftmaxGrad(c, -1); }});
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"})
    registry.Register(
        OpSchema{kMicrosoftDomain, op, 2, 2, 1, 1, [](InferenceContext& c) { return InferSoftmaxGrad(c, 1); }});
  registry.Register(OpSchema{kMicrosoftDomain, "LayerNormalizationGrad", 5, 5, 1, 3, InferLayerNormGrad});
  registry.Register(OpSchema{kMicrosoftDomain, "GatherGrad", 3, 3, 1, 1, InferGatherGrad});
  registry.Register(OpSchema{kMicrosoftDomain, "BatchNormInternal", 5, 5, 1, 5, InferBatchNormInternal});
  registry.Register(OpSchema{kMicrosoftDomain, "BatchNormalizationGrad", 5, 5, 1, 3, InferBatchNormGrad});
}

}  // namespace tob
