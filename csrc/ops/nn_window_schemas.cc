// Sliding-window ops: Conv, ConvTranspose, MaxPool, AveragePool, LpPool, the global pools and Col2Im.
#include <optional>

#include "ops/nn_window_attributes.h"
#include "ops/op_schema.h"

namespace tob {

namespace {

// X must be [N, C, spatial...] with at least one spatial dim.
Status CheckImageRank(InferenceContext& ctx, const ValueType& x) {
  if (x.has_rank() && x.rank() < 3)
    return ctx.Fail("input X must have rank >= 3 (N x C x D1 x ...), got ", x.ToString());
  return Status::OK();
}

// Output spatial dims for Conv / pooling / ConvTranspose, unknown where the input dim is.
StatusOr<Dims> SpatialOutputDims(InferenceContext& ctx, const WindowAttributes& resolved, const Dims& x,
                                 bool transposed) {
  Dims out;
  for (size_t i = 0; i < resolved.kernel_shape.size(); ++i) {
    const Dim& in = x[i + 2];
    if (!in.is_known() || resolved.kernel_shape[i] < 0) {
      out.push_back(Dim::Unknown());
      continue;
    }
    TOB_ASSIGN_OR_RETURN(WindowDim d, transposed ? TransposedWindowDim(ctx.node(), resolved, i, in.value)
                                                 : SlidingWindowDim(ctx.node(), resolved, i, in.value));
    out.push_back(Dim(d.out));
  }
  return out;
}

// Kernel dims from the weight (-1 where unknown) when the attribute is absent.
std::vector<int64_t> WeightKernelDims(const Dims& w) {
  std::vector<int64_t> k;
  for (size_t i = 2; i < w.size(); ++i) k.push_back(w[i].is_known() ? w[i].value : -1);
  return k;
}

Status InferConvLike(InferenceContext& ctx, bool transposed) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& w = *ctx.input_type(1);
  if (w.dtype != x.dtype) return ctx.Fail("W has dtype ", DTypeName(w.dtype), ", X has ", DTypeName(x.dtype));
  TOB_RETURN_IF_ERROR(CheckImageRank(ctx, x));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (!x.has_rank() || !w.has_rank()) {
    ctx.set_output(
        0, ValueType(x.dtype, x.has_rank() ? std::optional<Dims>(Dims(x.rank(), Dim::Unknown())) : std::nullopt));
    return Status::OK();
  }
  const Dims& xd = *x.shape;
  const Dims& wd = *w.shape;
  if (wd.size() != xd.size()) return ctx.Fail("W must have the rank of X (", xd.size(), "), got ", w.ToString());
  const int64_t group = attrs.group;
  Dim out_channels = Dim::Unknown();
  // Conv: W is [M, C/group, k...]; ConvTranspose: W is [C, M/group, k...].
  const Dim& c = xd[1];
  const Dim& w_in = transposed ? wd[0] : wd[1];
  const int64_t c_per_w = transposed ? 1 : group;
  if (c.is_known() && w_in.is_known() && w_in.value * c_per_w != c.value)
    return ctx.Fail("X has ", c.value, " channels but W ", w.ToString(), " expects ", w_in.value * c_per_w,
                    " (group = ", group, ")");
  if (c.is_known() && c.value % group != 0)
    return ctx.Fail("X channels (", c.value, ") are not divisible by group (", group, ")");
  if (transposed) {
    if (wd[1].is_known()) out_channels = Dim(wd[1].value * group);
  } else {
    out_channels = wd[0];
    if (wd[0].is_known() && wd[0].value % group != 0)
      return ctx.Fail("W output channels (", wd[0].value, ") are not divisible by group (", group, ")");
  }
  if (const ValueType* b = ctx.input_type(2); b && b->has_rank()) {
    if (b->rank() != 1) return ctx.Fail("bias B must be 1-D, got ", b->ToString());
    const Dim& bd = (*b->shape)[0];
    if (bd.is_known() && out_channels.is_known() && bd.value != out_channels.value)
      return ctx.Fail("bias B has ", bd.value, " values, expected ", out_channels.value, " (output channels)");
  }
  TOB_ASSIGN_OR_RETURN(WindowAttributes resolved,
                       attrs.Resolve(ctx.node(), static_cast<int64_t>(xd.size()) - 2, WeightKernelDims(wd)));
  TOB_ASSIGN_OR_RETURN(Dims spatial, SpatialOutputDims(ctx, resolved, xd, transposed));
  Dims out{xd[0], out_channels};
  out.insert(out.end(), spatial.begin(), spatial.end());
  ctx.set_output(0, ValueType(x.dtype, out));
  return Status::OK();
}

Status InferPool(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  TOB_RETURN_IF_ERROR(CheckImageRank(ctx, x));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (attrs.kernel_shape.empty()) return ctx.Fail("attribute kernel_shape is required");
  std::optional<Dims> out;
  if (x.has_rank()) {
    const Dims& xd = *x.shape;
    TOB_ASSIGN_OR_RETURN(WindowAttributes resolved, attrs.Resolve(ctx.node(), x.rank() - 2, {}));
    TOB_ASSIGN_OR_RETURN(Dims spatial, SpatialOutputDims(ctx, resolved, xd, false));
    out = Dims{xd[0], xd[1]};
    out->insert(out->end(), spatial.begin(), spatial.end());
  }
  ctx.set_output(0, ValueType(x.dtype, out));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(DType::kInt64, out));
  return Status::OK();
}

Status InferGlobalPool(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  TOB_RETURN_IF_ERROR(CheckImageRank(ctx, x));
  std::optional<Dims> out;
  if (x.has_rank()) {
    out = Dims{(*x.shape)[0], (*x.shape)[1]};
    out->resize(static_cast<size_t>(x.rank()), Dim(1));
  }
  ctx.set_output(0, ValueType(x.dtype, out));
  return Status::OK();
}

// Col2Im: X [N, C * prod(block_shape), L] -> [N, C, image_shape...]; both shapes are inputs.
Status InferCol2Im(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  for (int i : {1, 2}) {
    const ValueType& t = *ctx.input_type(i);
    if (t.dtype != DType::kInt64)
      return ctx.Fail(i == 1 ? "image_shape" : "block_shape", " must be int64, got ", DTypeName(t.dtype));
    if (t.has_rank() && t.rank() != 1)
      return ctx.Fail(i == 1 ? "image_shape" : "block_shape", " must be 1-D, got ", t.ToString());
  }
  if (x.has_rank() && x.rank() != 3) return ctx.Fail("input must be [N, C * prod(block_shape), L], got ", x.ToString());
  const Tensor* image = ctx.input_value(1);
  const Tensor* block = ctx.input_value(2);
  if (image == nullptr) {
    const ValueType& t = *ctx.input_type(1);
    std::optional<Dims> out;
    if (t.has_rank() && (*t.shape)[0].is_known())
      out = Dims(static_cast<size_t>(2 + (*t.shape)[0].value), Dim::Unknown());
    if (out && x.has_rank()) (*out)[0] = (*x.shape)[0];
    ctx.set_output(0, ValueType(x.dtype, out));
    return Status::OK();
  }
  Dims out{x.has_rank() ? (*x.shape)[0] : Dim::Unknown(), Dim::Unknown()};
  for (int64_t v : image->ToInt64Vector()) {
    if (v <= 0) return ctx.Fail("image_shape values must be positive, got ", v);
    out.push_back(Dim(v));
  }
  if (block != nullptr && x.has_rank() && (*x.shape)[1].is_known()) {
    int64_t k = 1;
    for (int64_t v : block->ToInt64Vector()) {
      if (v <= 0) return ctx.Fail("block_shape values must be positive, got ", v);
      k *= v;
    }
    if (block->numel() != image->numel())
      return ctx.Fail("block_shape has ", block->numel(), " values, image_shape ", image->numel());
    const int64_t ck = (*x.shape)[1].value;
    if (ck % k != 0)
      return ctx.Fail("input dim 1 (", ck, ") is not divisible by the block size prod(block_shape) = ", k);
    out[1] = Dim(ck / k);
  }
  ctx.set_output(0, ValueType(x.dtype, out));
  return Status::OK();
}

}  // namespace

void RegisterNnWindowSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "Conv", 2, 3, 1, 1, [](InferenceContext& c) { return InferConvLike(c, false); }});
  // onnxruntime's contrib FusedConv: Conv's inputs plus Z (added to the output), then `activation`.
  registry.Register(
      OpSchema{kMicrosoftDomain, "FusedConv", 2, 4, 1, 1, [](InferenceContext& c) { return InferConvLike(c, false); }});
  registry.Register(
      OpSchema{"", "ConvTranspose", 2, 3, 1, 1, [](InferenceContext& c) { return InferConvLike(c, true); }});
  registry.Register(OpSchema{"", "MaxPool", 1, 1, 1, 2, InferPool});
  registry.Register(OpSchema{"", "AveragePool", 1, 1, 1, 1, InferPool});
  registry.Register(OpSchema{"", "GlobalAveragePool", 1, 1, 1, 1, InferGlobalPool});
  registry.Register(OpSchema{"", "GlobalMaxPool", 1, 1, 1, 1, InferGlobalPool});
  registry.Register(OpSchema{"", "LpPool", 1, 1, 1, 1, InferPool});
  registry.Register(OpSchema{"", "GlobalLpPool", 1, 1, 1, 1, InferGlobalPool});
  registry.Register(OpSchema{"", "Col2Im", 3, 3, 1, 1, InferCol2Im});
}

}  // namespace tob
