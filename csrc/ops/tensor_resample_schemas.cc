// Resampling ops: Resize and its predecessor Upsample (output dims from the values of their scales
// or sizes input), GridSample
// (sampling positions from a grid input) and AffineGrid (the grid of an affine transform).
#include <optional>
#include <vector>

#include "ops/op_schema.h"
#include "ops/tensor_resize_attributes.h"
#include "ops/tensor_schema_utils.h"

namespace tob {

using namespace tensor_schema;

namespace {

Status InferResize(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  TOB_ASSIGN_OR_RETURN(ResizeAttributes attrs, ResizeAttributes::Read(ctx.node(), ctx.opset()));
  // Opset 10 has (X, scales); from 11 (X, roi, scales, sizes).
  const int roi_input = ctx.opset() < 11 ? -1 : 1;
  const int scales_input = ctx.opset() < 11 ? 1 : 2;
  const int sizes_input = ctx.opset() < 11 ? -1 : 3;
  if (!x.has_rank()) {
    ctx.set_output(0, ValueType(x.dtype, std::nullopt));
    return Status::OK();
  }
  auto value_of = [&](int i, bool* unknown) -> const Tensor* {
    if (i < 0 || !ctx.has_input(i)) return nullptr;
    const Tensor* v = ctx.input_value(i);
    if (v == nullptr) *unknown = true;
    return v;
  };
  bool unknown = false;
  const Tensor* scales = value_of(scales_input, &unknown);
  const Tensor* sizes = value_of(sizes_input, &unknown);
  bool roi_unknown = false;
  const Tensor* roi = value_of(roi_input, &roi_unknown);
  std::vector<int64_t> dims;
  for (const Dim& d : *x.shape) {
    if (!d.is_known()) unknown = true;
    dims.push_back(d.value);
  }
  if (unknown) {
    ctx.set_output(0, ValueType(x.dtype, UnknownDims(x.rank())));
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(ResizePlan plan, PlanResize(ctx.node(), attrs, dims, roi, scales, sizes));
  Dims out;
  for (int64_t d : plan.output) out.push_back(Dim(d));
  ctx.set_output(0, ValueType(x.dtype, std::move(out)));
  return Status::OK();
}

// Upsample: scales from the attribute (opset 7) or the second input (9); output floor(dim * scale).
Status InferUpsample(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  TOB_ASSIGN_OR_RETURN(ResizeAttributes attrs, ResizeAttributes::ReadUpsample(ctx.node()));
  std::optional<Tensor> attribute_scales;
  const Tensor* scales = nullptr;
  if (ctx.opset() < 9) {
    std::vector<float> values;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("scales", &values));
    attribute_scales = Tensor::FromVector<float>(values, {static_cast<int64_t>(values.size())});
    scales = &*attribute_scales;
  } else {
    if (!ctx.has_input(1)) return ctx.Fail("input scales is required from opset 9");
    scales = ctx.input_value(1);
  }
  bool unknown = scales == nullptr || !x.has_rank();
  std::vector<int64_t> dims;
  if (x.has_rank())
    for (const Dim& d : *x.shape) {
      unknown = unknown || !d.is_known();
      dims.push_back(d.value);
    }
  if (unknown) {
    ctx.set_output(0, ValueType(x.dtype, x.has_rank() ? std::optional<Dims>(UnknownDims(x.rank())) : std::nullopt));
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(ResizePlan plan, PlanResize(ctx.node(), attrs, dims, nullptr, scales, nullptr));
  Dims out;
  for (int64_t d : plan.output) out.push_back(Dim(d));
  ctx.set_output(0, ValueType(x.dtype, std::move(out)));
  return Status::OK();
}

// GridSample: X [N, C, D1..Dr], grid [N, O1..Or, r] -> [N, C, O1..Or].
Status InferGridSample(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& grid = *ctx.input_type(1);
  if (!IsFloatingPoint(grid.dtype)) return ctx.Fail("grid must be a float tensor, got ", DTypeName(grid.dtype));
  if (x.has_rank() && x.rank() < 3) return ctx.Fail("X must be [N, C, D1, ...], got ", x.ToString());
  if (!x.has_rank() || !grid.has_rank()) {
    ctx.set_output(0, ValueType(x.dtype, x.has_rank() ? std::optional<Dims>(UnknownDims(x.rank())) : std::nullopt));
    return Status::OK();
  }
  const Dims& xd = *x.shape;
  const Dims& gd = *grid.shape;
  const int64_t r = x.rank() - 2;
  if (grid.rank() != r + 2)
    return ctx.Fail("grid must be [N, ", r == 2 ? "H_out, W_out" : "D1_out, ...", ", ", r, "] for X of rank ", x.rank(),
                    ", got ", grid.ToString());
  if (gd.back().is_known() && gd.back().value != r)
    return ctx.Fail("grid's last dim must be ", r, " (one coordinate per spatial dim of X), got ", gd.back().value);
  if (xd[0].is_known() && gd[0].is_known() && xd[0].value != gd[0].value)
    return ctx.Fail("X has batch ", xd[0].value, " but grid has ", gd[0].value);
  Dims out{xd[0], xd[1]};
  for (int64_t i = 1; i <= r; ++i) out.push_back(gd[i]);
  ctx.set_output(0, ValueType(x.dtype, std::move(out)));
  return Status::OK();
}

// AffineGrid: theta [N, 2, 3] with size (N, C, H, W) -> [N, H, W, 2]; theta [N, 3, 4] with size
// (N, C, D, H, W) -> [N, D, H, W, 3].
Status InferAffineGrid(InferenceContext& ctx) {
  const ValueType& theta = *ctx.input_type(0);
  const ValueType& size_type = *ctx.input_type(1);
  if (size_type.dtype != DType::kInt64) return ctx.Fail("size must be int64, got ", DTypeName(size_type.dtype));
  if (theta.has_rank() && theta.rank() != 3)
    return ctx.Fail("theta must be [N, 2, 3] or [N, 3, 4], got ", theta.ToString());
  auto size = InputInts(ctx, 1);
  if (!size) {
    std::optional<Dims> out;
    if (auto n = InputLength(ctx, 1)) out = UnknownDims(*n);
    ctx.set_output(0, ValueType(theta.dtype, out));
    return Status::OK();
  }
  if (size->size() != 4 && size->size() != 5)
    return ctx.Fail("size must hold (N, C, H, W) or (N, C, D, H, W), got ", size->size(), " values");
  const int64_t r = static_cast<int64_t>(size->size()) - 2;
  if (theta.has_rank()) {
    const Dims& t = *theta.shape;
    if ((t[1].is_known() && t[1].value != r) || (t[2].is_known() && t[2].value != r + 1))
      return ctx.Fail("theta must be [N, ", r, ", ", r + 1, "] for a size of ", size->size(), " values, got ",
                      theta.ToString());
    if (t[0].is_known() && t[0].value != (*size)[0])
      return ctx.Fail("theta has batch ", t[0].value, " but size says ", (*size)[0]);
  }
  Dims out{Dim((*size)[0])};
  for (int64_t i = 2; i < static_cast<int64_t>(size->size()); ++i) {
    if ((*size)[i] < 0) return ctx.Fail("size values must be non-negative, got ", (*size)[i]);
    out.push_back(Dim((*size)[i]));
  }
  out.push_back(Dim(r));
  ctx.set_output(0, ValueType(theta.dtype, std::move(out)));
  return Status::OK();
}

}  // namespace

void RegisterTensorResampleSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "Resize", 1, 4, 1, 1, InferResize});
  registry.Register(OpSchema{"", "Upsample", 1, 2, 1, 1, InferUpsample});
  registry.Register(OpSchema{"", "GridSample", 2, 2, 1, 1, InferGridSample});
  registry.Register(OpSchema{"", "AffineGrid", 2, 2, 1, 1, InferAffineGrid});
}

}  // namespace tob
