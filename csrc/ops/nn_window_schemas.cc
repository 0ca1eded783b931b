// Sliding-window ops: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, MaxPool, AveragePool,
// LpPool, the global pools, MaxUnpool and Col2Im.
#include <optional>
#include <string>

#include "ops/fused_elementwise_program.h"  // kTobDomain
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

// The convolutions' output: X (input x_i) [N, C, spatial...], W (input w_i), the optional bias
// (input b_i, -1 for none); the output typed `out_dtype`. X and W share one type unless the op
// allows mixed ones (the integer convolutions).
Status InferConvShape(InferenceContext& ctx, int x_i, int w_i, int b_i, DType out_dtype, bool transposed,
                      bool same_type) {
  const ValueType& x = *ctx.input_type(x_i);
  const ValueType& w = *ctx.input_type(w_i);
  if (same_type && w.dtype != x.dtype)
    return ctx.Fail("W has dtype ", DTypeName(w.dtype), ", X has ", DTypeName(x.dtype));
  TOB_RETURN_IF_ERROR(CheckImageRank(ctx, x));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (!x.has_rank() || !w.has_rank()) {
    ctx.set_output(
        0, ValueType(out_dtype, x.has_rank() ? std::optional<Dims>(Dims(x.rank(), Dim::Unknown())) : std::nullopt));
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
  if (const ValueType* b = b_i >= 0 ? ctx.input_type(b_i) : nullptr; b && b->has_rank()) {
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
  ctx.set_output(0, ValueType(out_dtype, out));
  return Status::OK();
}

Status InferConvLike(InferenceContext& ctx, bool transposed) {
  return InferConvShape(ctx, 0, 1, 2, ctx.input_type(0)->dtype, transposed, true);
}

// ConvInteger (x, w, x_zero_point?, w_zero_point?) -> int32; QLinearConv (x, x_scale, x_zero_point,
// w, w_scale, w_zero_point, y_scale, y_zero_point, B?) -> y_zero_point's type. Zero points and
// scales are checked by the kernels (one value, or one per output channel for w's).
Status InferConvInteger(InferenceContext& ctx) { return InferConvShape(ctx, 0, 1, -1, DType::kInt32, false, false); }
Status InferQLinearConv(InferenceContext& ctx) {
  if (ctx.input_type(8) != nullptr && ctx.input_type(8)->dtype != DType::kInt32)
    return ctx.Fail("the bias B must be int32, got ", DTypeName(ctx.input_type(8)->dtype));
  return InferConvShape(ctx, 0, 3, 8, ctx.input_type(7)->dtype, false, false);
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

// MaxUnpool: X and I (MaxPool's indices) [N, C, D...] -> [N, C, (D - 1) * stride - pads + kernel...],
// or the shape the optional output_shape input gives (at least that size along every dim).
Status InferMaxUnpool(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& indices = *ctx.input_type(1);
  TOB_RETURN_IF_ERROR(CheckImageRank(ctx, x));
  if (indices.dtype != DType::kInt64) return ctx.Fail("I must be int64, got ", DTypeName(indices.dtype));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (attrs.kernel_shape.empty()) return ctx.Fail("attribute kernel_shape is required");
  if (!x.has_rank()) {
    ctx.set_output(0, ValueType(x.dtype, std::nullopt));
    return Status::OK();
  }
  const Dims& xd = *x.shape;
  if (indices.has_rank() && indices.rank() != x.rank())
    return ctx.Fail("I must have X's shape ", x.ToString(), ", got ", indices.ToString());
  TOB_ASSIGN_OR_RETURN(WindowAttributes a, attrs.Resolve(ctx.node(), x.rank() - 2, {}));
  Dims out{xd[0], xd[1]};
  const size_t r = a.kernel_shape.size();
  for (size_t i = 0; i < r; ++i) {
    const Dim& in = xd[i + 2];
    out.push_back(in.is_known() ? Dim((in.value - 1) * a.strides[i] - (a.pads[i] + a.pads[i + r]) + a.kernel_shape[i])
                                : Dim::Unknown());
  }
  if (const ValueType* shape = ctx.input_type(2); shape != nullptr) {
    if (shape->dtype != DType::kInt64) return ctx.Fail("output_shape must be int64, got ", DTypeName(shape->dtype));
    const Tensor* v = ctx.input_value(2);
    if (v == nullptr) {
      ctx.set_output(0, ValueType(x.dtype, Dims(static_cast<size_t>(x.rank()), Dim::Unknown())));
      return Status::OK();
    }
    if (v->numel() != x.rank())
      return ctx.Fail("output_shape has ", v->numel(), " values, expected X's rank ", x.rank());
    for (int64_t d = 0; d < x.rank(); ++d) {
      const int64_t want = v->ElementAsInt64(d);
      if (out[d].is_known() && want < out[d].value)
        return ctx.Fail("output_shape[", d, "] = ", want, " is smaller than the unpooled size ", out[d].value);
      out[d] = Dim(want);
    }
  }
  ctx.set_output(0, ValueType(x.dtype, out));
  return Status::OK();
}

// DeformConv (2-D): X [N, C, H, W], W [M, C / group, kH, kW], offset [N, offset_group * kH * kW * 2,
// oH, oW], B? [M], mask? [N, offset_group * kH * kW, oH, oW] -> [N, M, oH, oW], oH and oW as Conv's.
Status InferDeformConv(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& w = *ctx.input_type(1);
  for (int i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.input_type(i) != nullptr && ctx.input_type(i)->dtype != x.dtype)
      return ctx.Fail("input ", i, " has dtype ", DTypeName(ctx.input_type(i)->dtype), ", expected X's ",
                      DTypeName(x.dtype));
  if (x.has_rank() && x.rank() != 4)
    return ctx.Fail("X must be [N, C, H, W] (2-D deformable convolution), got ", x.ToString());
  if (w.has_rank() && w.rank() != 4) return ctx.Fail("W must be [M, C / group, kH, kW], got ", w.ToString());
  int64_t offset_group = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("offset_group", &offset_group, int64_t{1}));
  if (offset_group <= 0) return ctx.Fail("attribute 'offset_group' must be positive, got ", offset_group);
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (!x.has_rank() || !w.has_rank()) {
    ctx.set_output(0, ValueType(x.dtype, Dims(4, Dim::Unknown())));
    return Status::OK();
  }
  const Dims &xd = *x.shape, &wd = *w.shape;
  const int64_t group = attrs.group;
  if (xd[1].is_known() && wd[1].is_known() && wd[1].value * group != xd[1].value)
    return ctx.Fail("X has ", xd[1].value, " channels but W ", w.ToString(), " expects ", wd[1].value * group,
                    " (group = ", group, ")");
  if (wd[0].is_known() && wd[0].value % group != 0)
    return ctx.Fail("W output channels (", wd[0].value, ") are not divisible by group (", group, ")");
  if (xd[1].is_known() && xd[1].value % offset_group != 0)
    return ctx.Fail("X channels (", xd[1].value, ") are not divisible by offset_group (", offset_group, ")");
  TOB_ASSIGN_OR_RETURN(WindowAttributes a, attrs.Resolve(ctx.node(), 2, WeightKernelDims(wd)));
  if (a.auto_pad != AutoPad::kNotSet) return ctx.Fail("DeformConv has no auto_pad");
  TOB_ASSIGN_OR_RETURN(Dims spatial, SpatialOutputDims(ctx, a, xd, false));
  const int64_t taps = a.kernel_shape[0] * a.kernel_shape[1];
  auto check = [&](int i, const char* name, int64_t channels) -> Status {
    const ValueType* t = ctx.input_type(i);
    if (t == nullptr || !t->has_rank()) return Status::OK();
    const Dims want{xd[0], Dim(channels), spatial[0], spatial[1]};
    bool ok = t->rank() == 4;
    for (size_t d = 0; ok && d < 4; ++d)
      ok = !(*t->shape)[d].is_known() || !want[d].is_known() || (*t->shape)[d].value == want[d].value;
    if (!ok) return ctx.Fail(name, " must be ", DimsToString(want), ", got ", t->ToString());
    return Status::OK();
  };
  TOB_RETURN_IF_ERROR(check(2, "offset", offset_group * taps * 2));
  TOB_RETURN_IF_ERROR(check(4, "mask", offset_group * taps));
  if (const ValueType* b = ctx.input_type(3); b != nullptr && b->has_rank()) {
    if (b->rank() != 1 || ((*b->shape)[0].is_known() && wd[0].is_known() && (*b->shape)[0].value != wd[0].value))
      return ctx.Fail("B must be [M] (", wd[0].ToString(), "), got ", b->ToString());
  }
  ctx.set_output(0, ValueType(x.dtype, Dims{xd[0], wd[0], spatial[0], spatial[1]}));
  return Status::OK();
}

// The blocked layout's ops (ai.tob, optimizer/nchwc_layout.cc; providers/cpu/nn/conv_nchwc.cc):
// a blocked activation is [N, ceil(C / 16), H, W, 16].
constexpr int64_t kNchwcBlock = 16;

Dim BlocksOf(const Dim& channels) {
  return channels.is_known() ? Dim((channels.value + kNchwcBlock - 1) / kNchwcBlock) : Dim::Unknown();
}

Status CheckFloat32(InferenceContext& ctx, int i, const char* what) {
  const ValueType* t = ctx.input_type(i);
  if (t->dtype != DType::kFloat32) return ctx.Fail(what, " must be float32, got ", DTypeName(t->dtype));
  return Status::OK();
}

// A blocked X: rank 5 with 16 lanes; false (no shape) when X's rank is unknown.
StatusOr<bool> CheckBlocked(InferenceContext& ctx, int i, const char* what) {
  const ValueType& x = *ctx.input_type(i);
  if (!x.has_rank()) return false;
  const Dims& d = *x.shape;
  if (d.size() != 5 || (d[4].is_known() && d[4].value != kNchwcBlock))
    return ctx.Fail(what, " must be blocked [N, Cb, H, W, 16], got ", x.ToString());
  return true;
}

Status InferReorderToNchwc(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloat32(ctx, 0, "X"));
  const ValueType& x = *ctx.input_type(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims(5, Dim::Unknown())));
    return Status::OK();
  }
  if (x.rank() != 4) return ctx.Fail("X must be [N, C, H, W], got ", x.ToString());
  const Dims& d = *x.shape;
  ctx.set_output(0, ValueType(DType::kFloat32, Dims{d[0], BlocksOf(d[1]), d[2], d[3], Dim(kNchwcBlock)}));
  return Status::OK();
}

Status InferReorderFromNchwc(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloat32(ctx, 0, "X"));
  int64_t channels = -1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("channels", &channels, int64_t{-1}));
  if (channels < 1) return ctx.Fail("attribute channels must be positive, got ", channels);
  TOB_ASSIGN_OR_RETURN(bool known, CheckBlocked(ctx, 0, "X"));
  if (!known) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims(4, Dim::Unknown())));
    return Status::OK();
  }
  const Dims& d = *ctx.input_type(0)->shape;
  if (d[1].is_known() && d[1].value != (channels + kNchwcBlock - 1) / kNchwcBlock)
    return ctx.Fail("X has ", d[1].value, " blocks, ", channels, " channels need ",
                    (channels + kNchwcBlock - 1) / kNchwcBlock);
  ctx.set_output(0, ValueType(DType::kFloat32, Dims{d[0], Dim(channels), d[2], d[3]}));
  return Status::OK();
}

// NchwcConv(X blocked, W [M, C, KH, KW], B?, Z blocked?) -> [N, Mb, OH, OW, 16]; group 1,
// activation "" or Relu.
Status InferNchwcConv(InferenceContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) TOB_RETURN_IF_ERROR(CheckFloat32(ctx, i, "every input"));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (attrs.group != 1) return ctx.Fail("group must be 1, got ", attrs.group);
  std::string activation;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("activation", &activation, std::string()));
  if (!activation.empty() && activation != "Relu")
    return ctx.Fail("activation must be empty or Relu, got '", activation, "'");
  TOB_ASSIGN_OR_RETURN(bool known, CheckBlocked(ctx, 0, "X"));
  const ValueType& w = *ctx.input_type(1);
  if (!known || !w.has_rank()) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims(5, Dim::Unknown())));
    return Status::OK();
  }
  if (w.rank() != 4) return ctx.Fail("W must be [M, C, KH, KW], got ", w.ToString());
  const Dims& xd = *ctx.input_type(0)->shape;
  const Dims& wd = *w.shape;
  if (xd[1].is_known() && wd[1].is_known() && BlocksOf(wd[1]).value != xd[1].value)
    return ctx.Fail("W ", w.ToString(), " has ", wd[1].value, " input channels, X has ", xd[1].value, " blocks");
  TOB_ASSIGN_OR_RETURN(WindowAttributes resolved, attrs.Resolve(ctx.node(), 2, WeightKernelDims(wd)));
  TOB_ASSIGN_OR_RETURN(Dims spatial,
                       SpatialOutputDims(ctx, resolved, Dims{xd[0], Dim::Unknown(), xd[2], xd[3]}, false));
  Dims out{xd[0], BlocksOf(wd[0]), spatial[0], spatial[1], Dim(kNchwcBlock)};
  if (const ValueType* b = ctx.has_input(2) ? ctx.input_type(2) : nullptr; b != nullptr && b->has_rank()) {
    if (b->rank() != 1 || ((*b->shape)[0].is_known() && wd[0].is_known() && (*b->shape)[0].value != wd[0].value))
      return ctx.Fail("B must be [M] (", wd[0].ToString(), "), got ", b->ToString());
  }
  if (const ValueType* z = ctx.has_input(3) ? ctx.input_type(3) : nullptr; z != nullptr && z->has_rank()) {
    TOB_RETURN_IF_ERROR(CheckBlocked(ctx, 3, "Z").status());
    const Dims& zd = *z->shape;
    for (size_t i = 0; i < 5; ++i)
      if (zd[i].is_known() && out[i].is_known() && zd[i].value != out[i].value)
        return ctx.Fail("Z ", z->ToString(), " must have the output's blocked shape");
  }
  ctx.set_output(0, ValueType(DType::kFloat32, out));
  return Status::OK();
}

// NchwcConvNchwInput(X [N, C, H, W], W [M, C, KH, KW], B?) -> [N, Mb, OH, OW, 16]: the blocked
// conv that reads a plain NCHW image (a network's stem); group 1, activation "" or Relu.
Status InferNchwcConvNchwInput(InferenceContext& ctx) {
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) TOB_RETURN_IF_ERROR(CheckFloat32(ctx, i, "every input"));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (attrs.group != 1) return ctx.Fail("group must be 1, got ", attrs.group);
  std::string activation;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("activation", &activation, std::string()));
  if (!activation.empty() && activation != "Relu")
    return ctx.Fail("activation must be empty or Relu, got '", activation, "'");
  const ValueType& x = *ctx.input_type(0);
  const ValueType& w = *ctx.input_type(1);
  if (x.has_rank() && x.rank() != 4) return ctx.Fail("X must be [N, C, H, W], got ", x.ToString());
  if (w.has_rank() && w.rank() != 4) return ctx.Fail("W must be [M, C, KH, KW], got ", w.ToString());
  if (!x.has_rank() || !w.has_rank()) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims(5, Dim::Unknown())));
    return Status::OK();
  }
  const Dims& xd = *x.shape;
  const Dims& wd = *w.shape;
  if (xd[1].is_known() && wd[1].is_known() && xd[1].value != wd[1].value)
    return ctx.Fail("W ", w.ToString(), " has ", wd[1].value, " input channels, X has ", xd[1].value);
  if (const ValueType* b = ctx.has_input(2) ? ctx.input_type(2) : nullptr; b != nullptr && b->has_rank()) {
    if (b->rank() != 1 || ((*b->shape)[0].is_known() && wd[0].is_known() && (*b->shape)[0].value != wd[0].value))
      return ctx.Fail("B must be [M] (", wd[0].ToString(), "), got ", b->ToString());
  }
  TOB_ASSIGN_OR_RETURN(WindowAttributes resolved, attrs.Resolve(ctx.node(), 2, WeightKernelDims(wd)));
  TOB_ASSIGN_OR_RETURN(Dims spatial, SpatialOutputDims(ctx, resolved, xd, false));
  ctx.set_output(0, ValueType(DType::kFloat32, Dims{xd[0], BlocksOf(wd[0]), spatial[0], spatial[1], Dim(kNchwcBlock)}));
  return Status::OK();
}

// NchwcMaxPool(X [N, Cb, H, W, 16]) -> [N, Cb, OH, OW, 16]: MaxPool's 2-D windows on a blocked
// activation, no Indices.
Status InferNchwcMaxPool(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloat32(ctx, 0, "X"));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (attrs.kernel_shape.size() != 2) return ctx.Fail("kernel_shape must have 2 dims, got ", attrs.kernel_shape.size());
  TOB_ASSIGN_OR_RETURN(bool known, CheckBlocked(ctx, 0, "X"));
  if (!known) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims(5, Dim::Unknown())));
    return Status::OK();
  }
  const Dims& xd = *ctx.input_type(0)->shape;
  TOB_ASSIGN_OR_RETURN(WindowAttributes resolved, attrs.Resolve(ctx.node(), 2, {}));
  TOB_ASSIGN_OR_RETURN(Dims spatial,
                       SpatialOutputDims(ctx, resolved, Dims{xd[0], Dim::Unknown(), xd[2], xd[3]}, false));
  ctx.set_output(0, ValueType(DType::kFloat32, Dims{xd[0], xd[1], spatial[0], spatial[1], Dim(kNchwcBlock)}));
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
  registry.Register(OpSchema{"", "ConvInteger", 2, 4, 1, 1, InferConvInteger});
  registry.Register(OpSchema{"", "QLinearConv", 8, 9, 1, 1, InferQLinearConv});
  registry.Register(OpSchema{"", "MaxPool", 1, 1, 1, 2, InferPool});
  registry.Register(OpSchema{"", "AveragePool", 1, 1, 1, 1, InferPool});
  registry.Register(OpSchema{"", "GlobalAveragePool", 1, 1, 1, 1, InferGlobalPool});
  registry.Register(OpSchema{"", "GlobalMaxPool", 1, 1, 1, 1, InferGlobalPool});
  registry.Register(OpSchema{"", "LpPool", 1, 1, 1, 1, InferPool});
  registry.Register(OpSchema{"", "GlobalLpPool", 1, 1, 1, 1, InferGlobalPool});
  registry.Register(OpSchema{"", "Col2Im", 3, 3, 1, 1, InferCol2Im});
  registry.Register(OpSchema{"", "MaxUnpool", 2, 3, 1, 1, InferMaxUnpool});
  registry.Register(OpSchema{"", "DeformConv", 3, 5, 1, 1, InferDeformConv});
  registry.Register(OpSchema{kTobDomain, "NchwcConv", 2, 4, 1, 1, InferNchwcConv});
  registry.Register(OpSchema{kTobDomain, "ReorderToNchwc", 1, 1, 1, 1, InferReorderToNchwc});
  registry.Register(OpSchema{kTobDomain, "ReorderFromNchwc", 1, 1, 1, 1, InferReorderFromNchwc});
  registry.Register(OpSchema{kTobDomain, "NchwcConvNchwInput", 2, 3, 1, 1, InferNchwcConvNchwInput});
  registry.Register(OpSchema{kTobDomain, "NchwcMaxPool", 1, 1, 1, 1, InferNchwcMaxPool});
}

}  // namespace tob
