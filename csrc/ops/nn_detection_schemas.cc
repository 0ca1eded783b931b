// Object-detection ops: NonMaxSuppression and RoiAlign. NonMaxSuppression's output row count
// depends on the data (the kernel allocates it), so its shape function gives [unknown, 3].
#include "ops/op_schema.h"

namespace tob {

namespace {

Status InferNonMaxSuppression(InferenceContext& ctx) {
  const ValueType& boxes = *ctx.input_type(0);
  const ValueType& scores = *ctx.input_type(1);
  if (boxes.has_rank() && (boxes.rank() != 3 || ((*boxes.shape)[2].is_known() && (*boxes.shape)[2].value != 4)))
    return ctx.Fail("boxes must be [num_batches, spatial_dimension, 4], got ", boxes.ToString());
  if (scores.has_rank() && scores.rank() != 3)
    return ctx.Fail("scores must be [num_batches, num_classes, spatial_dimension], got ", scores.ToString());
  if (boxes.has_rank() && scores.has_rank()) {
    const Dim &nb = (*boxes.shape)[0], &ns = (*scores.shape)[0];
    const Dim &bb = (*boxes.shape)[1], &sb = (*scores.shape)[2];
    if (nb.is_known() && ns.is_known() && nb.value != ns.value)
      return ctx.Fail("boxes has ", nb.value, " batches but scores has ", ns.value);
    if (bb.is_known() && sb.is_known() && bb.value != sb.value)
      return ctx.Fail("boxes has ", bb.value, " boxes per batch but scores has ", sb.value);
  }
  for (int i : {2, 3, 4}) {
    const ValueType* t = ctx.input_type(i);
    if (t != nullptr && t->has_rank() && t->rank() > 1)
      return ctx.Fail("input ", i, " must be a scalar or a 1-element tensor, got ", t->ToString());
  }
  ctx.set_output(0, ValueType(DType::kInt64, Dims{Dim::Unknown(), Dim(3)}));
  return Status::OK();
}

// RoiAlign: X [N, C, H, W], rois [num_rois, 4], batch_indices [num_rois] (int64) ->
// [num_rois, C, output_height, output_width].
Status InferRoiAlign(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& rois = *ctx.input_type(1);
  const ValueType& batch = *ctx.input_type(2);
  if (rois.dtype != x.dtype) return ctx.Fail("rois must have X's dtype ", DTypeName(x.dtype));
  if (batch.dtype != DType::kInt64) return ctx.Fail("batch_indices must be int64, got ", DTypeName(batch.dtype));
  if (x.has_rank() && x.rank() != 4) return ctx.Fail("X must be [N, C, H, W], got ", x.ToString());
  if (rois.has_rank() && (rois.rank() != 2 || ((*rois.shape)[1].is_known() && (*rois.shape)[1].value != 4)))
    return ctx.Fail("rois must be [num_rois, 4], got ", rois.ToString());
  if (batch.has_rank() && batch.rank() != 1) return ctx.Fail("batch_indices must be 1-D, got ", batch.ToString());
  Dim num_rois = rois.has_rank() ? (*rois.shape)[0] : Dim::Unknown();
  if (batch.has_rank()) {
    const Dim& b = (*batch.shape)[0];
    if (b.is_known() && num_rois.is_known() && b.value != num_rois.value)
      return ctx.Fail("batch_indices has ", b.value, " entries for ", num_rois.value, " rois");
    if (!num_rois.is_known()) num_rois = b;
  }
  int64_t height = 1, width = 1, sampling_ratio = 0;
  std::string mode, transform;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("output_height", &height, int64_t{1}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("output_width", &width, int64_t{1}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("sampling_ratio", &sampling_ratio, int64_t{0}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("mode", &mode, std::string("avg")));
  if (height <= 0 || width <= 0) return ctx.Fail("output_height and output_width must be positive");
  if (sampling_ratio < 0) return ctx.Fail("sampling_ratio must be >= 0, got ", sampling_ratio);
  if (mode != "avg" && mode != "max") return ctx.Fail("mode must be 'avg' or 'max', got '", mode, "'");
  if (ctx.node().FindAttribute("coordinate_transformation_mode") != nullptr) {
    if (ctx.opset() < 16)
      return ctx.Fail("attribute 'coordinate_transformation_mode' exists from opset 16 (the model's opset is ",
                      ctx.opset(), ")");
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("coordinate_transformation_mode", &transform));
    if (transform != "half_pixel" && transform != "output_half_pixel")
      return ctx.Fail("coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', got '", transform,
                      "'");
  }
  const Dim channels = x.has_rank() ? (*x.shape)[1] : Dim::Unknown();
  ctx.set_output(0, ValueType(x.dtype, Dims{num_rois, channels, Dim(height), Dim(width)}));
  return Status::OK();
}

}  // namespace

void RegisterNnDetectionSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "NonMaxSuppression", 2, 5, 1, 1, InferNonMaxSuppression});
  registry.Register(OpSchema{"", "RoiAlign", 3, 3, 1, 1, InferRoiAlign});
}

}  // namespace tob
