// Shape functions of the indexing ops: Gather, GatherElements, GatherND, Scatter(Elements),
// ScatterND, TensorScatter, and the data-dependent selections NonZero, Compress and Unique.
#include "ops/tensor_schema_utils.h"

namespace tob {

using namespace tensor_schema;

namespace {

Status CheckIndexType(const InferenceContext& ctx, int i) {
  DType t = InputDType(ctx, i);
  if (t != DType::kInt32 && t != DType::kInt64) return ctx.Fail("indices must be int32 or int64, got ", DTypeName(t));
  return Status::OK();
}

Status InferGather(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  TOB_RETURN_IF_ERROR(CheckIndexType(ctx, 1));
  int64_t axis;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, 0));
  const Dims* data = InputDims(ctx, 0);
  const Dims* idx = InputDims(ctx, 1);
  if (data == nullptr || idx == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  if (data->empty()) return ctx.Fail("data must have rank >= 1");
  int64_t a;
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, static_cast<int64_t>(data->size()), &a));
  Dims out(data->begin(), data->begin() + a);
  out.insert(out.end(), idx->begin(), idx->end());
  out.insert(out.end(), data->begin() + a + 1, data->end());
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

// Indices (and updates) of the element-wise ops have the data's rank and, off the axis, no
// larger dims than the data.
Status CheckElementwiseIndices(const InferenceContext& ctx, const Dims& data, const Dims& idx, int64_t axis,
                               int64_t* a) {
  if (data.empty()) return ctx.Fail("data must have rank >= 1");
  if (idx.size() != data.size())
    return ctx.Fail("indices ", DimsToString(idx), " must have the rank of data ", DimsToString(data));
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, static_cast<int64_t>(data.size()), a));
  for (size_t k = 0; k < data.size(); ++k) {
    if (static_cast<int64_t>(k) == *a) continue;
    if (idx[k].is_known() && data[k].is_known() && idx[k].value > data[k].value)
      return ctx.Fail("indices ", DimsToString(idx), " exceed data ", DimsToString(data), " on axis ", k);
  }
  return Status::OK();
}

Status InferGatherElements(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  TOB_RETURN_IF_ERROR(CheckIndexType(ctx, 1));
  int64_t axis;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, 0));
  const Dims* data = InputDims(ctx, 0);
  const Dims* idx = InputDims(ctx, 1);
  if (data != nullptr && idx != nullptr) {
    int64_t a;
    TOB_RETURN_IF_ERROR(CheckElementwiseIndices(ctx, *data, *idx, axis, &a));
  }
  ctx.set_output(0, ValueType(dtype, idx ? std::optional<Dims>(*idx) : std::nullopt));
  return Status::OK();
}

Status InferGatherND(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  if (InputDType(ctx, 1) != DType::kInt64) return ctx.Fail("indices must be int64");
  int64_t b = 0;
  if (ctx.opset() >= 12) TOB_RETURN_IF_ERROR(ctx.node().GetAttr("batch_dims", &b, 0));
  const Dims* data = InputDims(ctx, 0);
  const Dims* idx = InputDims(ctx, 1);
  if (data == nullptr || idx == nullptr || idx->empty() || !idx->back().is_known()) {
    if (idx != nullptr && idx->empty()) return ctx.Fail("indices must have rank >= 1");
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t r = static_cast<int64_t>(data->size()), q = static_cast<int64_t>(idx->size());
  int64_t k = idx->back().value;
  if (b < 0 || b >= std::min(r, q)) return ctx.Fail("batch_dims ", b, " must be in [0, ", std::min(r, q), ")");
  if (k < 1 || k > r - b)
    return ctx.Fail("the last dim of indices (", k, ") must be in [1, ", r - b, "] for data ", DimsToString(*data),
                    " and batch_dims ", b);
  for (int64_t i = 0; i < b; ++i)
    if ((*data)[i].is_known() && (*idx)[i].is_known() && (*data)[i].value != (*idx)[i].value)
      return ctx.Fail("batch dims of data ", DimsToString(*data), " and indices ", DimsToString(*idx), " differ");
  Dims out(idx->begin(), idx->end() - 1);
  out.insert(out.end(), data->begin() + b + k, data->end());
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status CheckReduction(const InferenceContext& ctx) {
  std::string reduction;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("reduction", &reduction, std::string("none")));
  bool ok = reduction == "none" || (ctx.opset() >= 16 && (reduction == "add" || reduction == "mul")) ||
            (ctx.opset() >= 18 && (reduction == "max" || reduction == "min"));
  if (!ok) return ctx.Fail("reduction '", reduction, "' is not valid at opset ", ctx.opset());
  return Status::OK();
}

Status InferScatterElements(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  TOB_RETURN_IF_ERROR(CheckIndexType(ctx, 1));
  TOB_RETURN_IF_ERROR(CheckReduction(ctx));
  if (InputDType(ctx, 2) != dtype)
    return ctx.Fail("updates are ", DTypeName(InputDType(ctx, 2)), " but data is ", DTypeName(dtype));
  int64_t axis;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, 0));
  const Dims* data = InputDims(ctx, 0);
  const Dims* idx = InputDims(ctx, 1);
  const Dims* upd = InputDims(ctx, 2);
  if (idx != nullptr && upd != nullptr) {
    bool same = idx->size() == upd->size();
    for (size_t k = 0; same && k < idx->size(); ++k)
      same = !((*idx)[k].is_known() && (*upd)[k].is_known() && (*idx)[k].value != (*upd)[k].value);
    if (!same) return ctx.Fail("updates ", DimsToString(*upd), " must have the shape of indices ", DimsToString(*idx));
  }
  if (data != nullptr && idx != nullptr) {
    int64_t a;
    TOB_RETURN_IF_ERROR(CheckElementwiseIndices(ctx, *data, *idx, axis, &a));
  }
  return PropagateType(ctx);
}

Status InferScatterND(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  if (InputDType(ctx, 1) != DType::kInt64) return ctx.Fail("indices must be int64");
  TOB_RETURN_IF_ERROR(CheckReduction(ctx));
  if (InputDType(ctx, 2) != dtype)
    return ctx.Fail("updates are ", DTypeName(InputDType(ctx, 2)), " but data is ", DTypeName(dtype));
  const Dims* data = InputDims(ctx, 0);
  const Dims* idx = InputDims(ctx, 1);
  const Dims* upd = InputDims(ctx, 2);
  if (data != nullptr && idx != nullptr && upd != nullptr && !idx->empty() && idx->back().is_known()) {
    int64_t k = idx->back().value, r = static_cast<int64_t>(data->size());
    if (k < 1 || k > r)
      return ctx.Fail("the last dim of indices (", k, ") must be in [1, ", r, "] for data ", DimsToString(*data));
    Dims expected(idx->begin(), idx->end() - 1);
    expected.insert(expected.end(), data->begin() + k, data->end());
    bool same = expected.size() == upd->size();
    for (size_t i = 0; same && i < upd->size(); ++i)
      same = !(expected[i].is_known() && (*upd)[i].is_known() && expected[i].value != (*upd)[i].value);
    if (!same) return ctx.Fail("updates ", DimsToString(*upd), " must have shape ", DimsToString(expected));
  }
  return PropagateType(ctx);
}

// Unique: Y (the distinct elements, or slices along `axis`; their count depends on the values),
// indices (first occurrences), inverse_indices (one per element or slice of X) and counts, int64.
Status InferUnique(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  int64_t sorted = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("sorted", &sorted, int64_t{1}));
  if (sorted != 0 && sorted != 1) return ctx.Fail("attribute 'sorted' must be 0 or 1, got ", sorted);
  const bool has_axis = ctx.node().FindAttribute("axis") != nullptr;
  std::optional<Dims> y;
  Dim slices = Dim::Unknown();
  if (x.has_rank()) {
    if (has_axis) {
      int64_t axis = 0, a = 0;
      TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis));
      TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, x.rank(), &a));
      y = *x.shape;
      slices = (*y)[a];
      (*y)[a] = Dim::Unknown();
    } else {
      y = Dims{Dim::Unknown()};
      int64_t n = 1;
      for (const Dim& d : *x.shape) n = d.is_known() && n >= 0 ? n * d.value : -1;
      if (n >= 0) slices = Dim(n);
    }
  } else if (!has_axis) {
    y = Dims{Dim::Unknown()};
  }
  ctx.set_output(0, ValueType(x.dtype, y));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(DType::kInt64, Dims{Dim::Unknown()}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, ValueType(DType::kInt64, Dims{slices}));
  if (ctx.num_outputs() > 3) ctx.set_output(3, ValueType(DType::kInt64, Dims{Dim::Unknown()}));
  return Status::OK();
}

// TensorScatter: present_cache = past_cache with `update` written along the sequence axis from
// each batch row's write index. update has the cache's shape but a sequence length <= the cache's.
Status InferTensorScatter(InferenceContext& ctx) {
  const ValueType& cache = *ctx.input_type(0);
  const ValueType& update = *ctx.input_type(1);
  if (update.dtype != cache.dtype)
    return ctx.Fail("update has dtype ", DTypeName(update.dtype), ", past_cache ", DTypeName(cache.dtype));
  std::string mode;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("mode", &mode, std::string("linear")));
  if (mode != "linear" && mode != "circular")
    return ctx.Fail("attribute 'mode' must be 'linear' or 'circular', got '", mode, "'");
  if (const ValueType* w = ctx.input_type(2); w != nullptr) {
    if (w->dtype != DType::kInt64) return ctx.Fail("write_indices must be int64, got ", DTypeName(w->dtype));
    if (w->has_rank() && w->rank() != 1) return ctx.Fail("write_indices must be 1-D [batch], got ", w->ToString());
    if (w->has_rank() && cache.has_rank() && cache.rank() > 0 && (*w->shape)[0].is_known() &&
        (*cache.shape)[0].is_known() && (*w->shape)[0].value != (*cache.shape)[0].value)
      return ctx.Fail("write_indices has ", (*w->shape)[0].value, " entries for a batch of ", (*cache.shape)[0].value);
  }
  if (cache.has_rank() && update.has_rank()) {
    if (cache.rank() != update.rank())
      return ctx.Fail("update ", update.ToString(), " must have past_cache's rank ", cache.ToString());
    int64_t axis = -2, a = 0;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{-2}));
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, cache.rank(), &a));
    if (a == 0) return ctx.Fail("axis must not be the batch axis 0");
    for (int64_t d = 0; d < cache.rank(); ++d) {
      const Dim &c = (*cache.shape)[d], &u = (*update.shape)[d];
      if (!c.is_known() || !u.is_known()) continue;
      if (d == a ? u.value > c.value : u.value != c.value)
        return ctx.Fail("update ", update.ToString(), " does not fit past_cache ", cache.ToString(), " along dim ", d);
    }
  }
  ctx.set_output(0, cache);
  return Status::OK();
}

}  // namespace

// NonZero: [rank, count] int64 indices; the count depends on the values.
Status InferNonZero(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  Dims dims{x.has_rank() ? Dim(x.rank()) : Dim::Unknown(), Dim::Unknown()};
  ctx.set_output(0, ValueType(DType::kInt64, std::move(dims)));
  return Status::OK();
}

// Compress: the input's shape with the selected axis (or, without one, the flattened input) of a
// size the condition's values decide.
Status InferCompress(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& condition = *ctx.input_type(1);
  if (condition.dtype != DType::kBool) return ctx.Fail("condition must be bool, got ", DTypeName(condition.dtype));
  if (condition.has_rank() && condition.rank() != 1)
    return ctx.Fail("condition must be 1-D, got ", condition.ToString());
  const Attribute* axis_attr = ctx.node().FindAttribute("axis");
  if (axis_attr == nullptr) {
    ctx.set_output(0, ValueType(x.dtype, Dims{Dim::Unknown()}));
    return Status::OK();
  }
  if (!x.has_rank()) {
    ctx.set_output(0, ValueType(x.dtype, std::nullopt));
    return Status::OK();
  }
  int64_t axis = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis));
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, x.rank(), &axis));
  Dims dims = *x.shape;
  dims[axis] = Dim::Unknown();
  ctx.set_output(0, ValueType(x.dtype, std::move(dims)));
  return Status::OK();
}

void RegisterTensorIndexSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "NonZero", 1, 1, 1, 1, InferNonZero});
  registry.Register(OpSchema{"", "Compress", 2, 2, 1, 1, InferCompress});
  registry.Register(OpSchema{"", "Unique", 1, 1, 1, 4, InferUnique});
  registry.Register(OpSchema{"", "TensorScatter", 2, 3, 1, 1, InferTensorScatter});
  registry.Register(OpSchema{"", "Gather", 2, 2, 1, 1, InferGather});
  registry.Register(OpSchema{"", "GatherElements", 2, 2, 1, 1, InferGatherElements});
  registry.Register(OpSchema{"", "GatherND", 2, 2, 1, 1, InferGatherND});
  registry.Register(OpSchema{"", "Scatter", 3, 3, 1, 1, InferScatterElements});
  registry.Register(OpSchema{"", "ScatterElements", 3, 3, 1, 1, InferScatterElements});
  registry.Register(OpSchema{"", "ScatterND", 3, 3, 1, 1, InferScatterND});
}

}  // namespace tob
