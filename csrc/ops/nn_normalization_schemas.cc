// Normalizations and softmax: BatchNormalization, InstanceNormalization, LayerNormalization,
// com.microsoft::SkipLayerNormalization, RMSNormalization, Softmax, LogSoftmax, and the older
// LpNormalization, MeanVarianceNormalization and LRN, GroupNormalization.
#include <algorithm>

#include "ops/fused_elementwise_program.h"  // kTobDomain
#include "ops/op_schema.h"

namespace tob {

namespace {

// Input i must be 1-D with `expected` elements (when both are known).
Status CheckChannelVector(InferenceContext& ctx, int i, const char* name, const Dim& expected) {
  const ValueType* t = ctx.input_type(i);
  if (t == nullptr || !t->has_rank()) return Status::OK();
  if (t->rank() != 1) return ctx.Fail("input ", name, " must be 1-D, got ", t->ToString());
  const Dim& d = (*t->shape)[0];
  if (d.is_known() && expected.is_known() && d.value != expected.value)
    return ctx.Fail("input ", name, " has ", d.value, " values, expected ", expected.value);
  return Status::OK();
}

Dim ChannelDim(const ValueType& x) { return x.has_rank() && x.rank() >= 2 ? (*x.shape)[1] : Dim::Unknown(); }

Status InferBatchNorm(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  if (x.has_rank() && x.rank() < 2) return ctx.Fail("input X must have rank >= 2, got ", x.ToString());
  Dim c = ChannelDim(x);
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, i, names[i], c));
  ctx.set_output(0, x);
  // Running (and, before opset 14, saved) statistics: per channel, in the type of the mean.
  DType stat_type = ctx.input_type(3)->dtype;
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ValueType(stat_type, Dims{c}));
  return Status::OK();
}

Status InferInstanceNorm(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  if (x.has_rank() && x.rank() < 3) return ctx.Fail("input must have rank >= 3, got ", x.ToString());
  Dim c = ChannelDim(x);
  TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, 1, "scale", c));
  TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, 2, "B", c));
  ctx.set_output(0, x);
  return Status::OK();
}

// `t` must broadcast (numpy, one-directional) to the trailing dims `target`.
Status CheckBroadcastsTo(InferenceContext& ctx, const char* name, const ValueType* t, const Dims& target) {
  if (t == nullptr || !t->has_rank()) return Status::OK();
  const Dims& d = *t->shape;
  if (d.size() > target.size())
    return ctx.Fail("input ", name, " ", t->ToString(), " has more dims than the normalized shape ",
                    DimsToString(target));
  for (size_t i = 0; i < d.size(); ++i) {
    const Dim& want = target[target.size() - d.size() + i];
    if (d[i].is_known() && want.is_known() && d[i].value != 1 && d[i].value != want.value)
      return ctx.Fail("input ", name, " ", t->ToString(), " does not broadcast to the normalized shape ",
                      DimsToString(target));
  }
  return Status::OK();
}

Status InferLayerNorm(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  int64_t axis = -1, stash_type = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{-1}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("stash_type", &stash_type, int64_t{1}));
  DType stash = DTypeFromOnnx(static_cast<int32_t>(stash_type));
  if (stash != DType::kFloat32 && stash != DType::kFloat64)
    return ctx.Fail("stash_type ", stash_type, " is not supported (float32 or float64)");
  ctx.set_output(0, x);
  std::optional<Dims> stat_shape;
  if (x.has_rank()) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, x.rank(), &a));
    const Dims& xd = *x.shape;
    Dims normalized(xd.begin() + a, xd.end());
    TOB_RETURN_IF_ERROR(CheckBroadcastsTo(ctx, "Scale", ctx.input_type(1), normalized));
    TOB_RETURN_IF_ERROR(CheckBroadcastsTo(ctx, "B", ctx.input_type(2), normalized));
    stat_shape = Dims(xd.begin(), xd.begin() + a);
    stat_shape->resize(xd.size(), Dim(1));
  }
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, ValueType(stash, stat_shape));
  return Status::OK();
}

// X (type T) normalised over the dims from axis; Y has X's shape and Scale's type (V).
Status InferRmsNorm(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& scale = *ctx.input_type(1);
  int64_t axis = -1, stash_type = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{-1}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("stash_type", &stash_type, int64_t{1}));
  if (stash_type != 1) return ctx.Fail("stash_type ", stash_type, " is not supported (1: float32)");
  std::optional<Dims> stat_shape;
  if (x.has_rank()) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, x.rank(), &a));
    const Dims normalized(x.shape->begin() + a, x.shape->end());
    TOB_RETURN_IF_ERROR(CheckBroadcastsTo(ctx, "scale", &scale, normalized));
    stat_shape = Dims(x.shape->begin(), x.shape->begin() + a);
    stat_shape->resize(x.shape->size(), Dim(1));
  }
  ctx.set_output(0, ValueType(scale.dtype, x.shape));
  // ai.tob's optional InvStdDev: 1 / rms of each row, in the compute type (float64 for float64 X).
  if (ctx.num_outputs() > 1)
    ctx.set_output(1, ValueType(x.dtype == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32, stat_shape));
  return Status::OK();
}

Status InferSkipLayerNorm(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& skip = *ctx.input_type(1);
  if (x.has_rank() && x.rank() != 2 && x.rank() != 3) return ctx.Fail("input must be 2-D or 3-D, got ", x.ToString());
  Dim hidden = x.has_rank() ? x.shape->back() : Dim::Unknown();
  if (x.has_rank()) {
    TOB_RETURN_IF_ERROR(CheckBroadcastsTo(ctx, "skip", &skip, *x.shape));
    if (skip.has_rank() && skip.rank() < 2) return ctx.Fail("skip must have rank >= 2, got ", skip.ToString());
    if (skip.has_rank() && skip.shape->back() != hidden && skip.shape->back().is_known() && hidden.is_known())
      return ctx.Fail("skip's hidden size ", skip.shape->back().value, " differs from the input's ", hidden.value);
  }
  TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, 2, "gamma", hidden));
  TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, 3, "beta", hidden));
  TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, 4, "bias", hidden));
  ctx.set_output(0, x);
  std::optional<Dims> stat_shape;
  if (x.has_rank()) {
    stat_shape = *x.shape;
    stat_shape->back() = Dim(1);
  }
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(DType::kFloat32, stat_shape));
  if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType(DType::kFloat32, stat_shape));
  if (ctx.num_outputs() > 3) ctx.set_output(3, x);
  return Status::OK();
}

Status InferSoftmax(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  int64_t axis = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, ctx.opset() >= 13 ? int64_t{-1} : int64_t{1}));
  if (x.has_rank()) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, std::max<int64_t>(1, x.rank()), &a));
  }
  ctx.set_output(0, x);
  return Status::OK();
}

// LpNormalization, MeanVarianceNormalization, LRN: a float tensor in, the same type and shape out
// (LRN's input is [N, C, ...]).
Status InferSameAsFloatInput(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  if (!IsFloatingPoint(x.dtype)) return ctx.Fail("X must be a floating-point tensor, got ", DTypeName(x.dtype));
  if (ctx.node().op_type() == "LRN" && x.has_rank() && x.rank() < 2)
    return ctx.Fail("X must be [N, C, ...], got ", x.ToString());
  ctx.set_output(0, x);
  return Status::OK();
}

// GroupNormalization: X [N, C, ...]; scale and bias per group ([num_groups], opset 18) or per
// channel ([C], opset 21, which changed the definition).
Status InferGroupNorm(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  int64_t groups = 0, stash_type = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("num_groups", &groups));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("stash_type", &stash_type, int64_t{1}));
  if (groups <= 0) return ctx.Fail("attribute 'num_groups' must be positive, got ", groups);
  if (ctx.opset() < 21 && ctx.node().FindAttribute("stash_type") != nullptr)
    return ctx.Fail("attribute 'stash_type' exists from opset 21 (the model's opset is ", ctx.opset(), ")");
  if (stash_type != 1 && stash_type != 11)
    return ctx.Fail("stash_type ", stash_type, " is not supported (1: float32 or 11: float64)");
  if (x.has_rank() && x.rank() < 2) return ctx.Fail("input X must be [N, C, ...], got ", x.ToString());
  const Dim c = ChannelDim(x);
  if (c.is_known() && c.value % groups != 0)
    return ctx.Fail("X has ", c.value, " channels, not divisible by num_groups = ", groups);
  const Dim per = ctx.opset() >= 21 ? c : Dim(groups);
  for (int i : {1, 2}) {
    if (ctx.input_type(i)->dtype != x.dtype) return ctx.Fail("scale and bias must have X's dtype ", DTypeName(x.dtype));
    TOB_RETURN_IF_ERROR(CheckChannelVector(ctx, i, i == 1 ? "scale" : "bias", per));
  }
  ctx.set_output(0, x);
  return Status::OK();
}

}  // namespace

void RegisterNnNormalizationSchemas(OpSchemaRegistry& registry) {
  for (const char* op : {"LpNormalization", "MeanVarianceNormalization", "LRN"})
    registry.Register(OpSchema{"", op, 1, 1, 1, 1, InferSameAsFloatInput});
  registry.Register(OpSchema{"", "BatchNormalization", 5, 5, 1, 5, InferBatchNorm});
  registry.Register(OpSchema{"", "InstanceNormalization", 3, 3, 1, 1, InferInstanceNorm});
  registry.Register(OpSchema{"", "LayerNormalization", 2, 3, 1, 3, InferLayerNorm});
  // onnxruntime's contrib LayerNormalization (same attributes and outputs): what the exporter emits
  // for opsets below 17, where ai.onnx has none.
  registry.Register(OpSchema{kMicrosoftDomain, "LayerNormalization", 2, 3, 1, 3, InferLayerNorm});
  registry.Register(OpSchema{kMicrosoftDomain, "SkipLayerNormalization", 3, 5, 1, 4, InferSkipLayerNorm});
  registry.Register(OpSchema{"", "RMSNormalization", 2, 2, 1, 1, InferRmsNorm});
  // The engine's own (optimizer/rms_norm_fusion.cc): ai.onnx's op, at any opset, with an optional
  // second output InvStdDev that a training forward graph saves for the backward.
  registry.Register(OpSchema{kTobDomain, "RMSNormalization", 2, 2, 1, 2, InferRmsNorm});
  registry.Register(OpSchema{"", "GroupNormalization", 3, 3, 1, 1, InferGroupNorm});
  registry.Register(OpSchema{"", "Softmax", 1, 1, 1, 1, InferSoftmax});
  registry.Register(OpSchema{"", "LogSoftmax", 1, 1, 1, 1, InferSoftmax});
  registry.Register(OpSchema{"", "Hardmax", 1, 1, 1, 1, InferSoftmax});  // Softmax's axis rules
}

}  // namespace tob
