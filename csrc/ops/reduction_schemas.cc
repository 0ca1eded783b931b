// Schemas of the reductions: Reduce* (axes as an attribute before opset 13 for ReduceSum and 18
// for the others, as an optional input from then on), ArgMax/ArgMin, CumSum/CumProd and TopK.
#include <optional>
#include <vector>

#include "ops/op_schema.h"

namespace tob {
namespace {

// Output type of a Reduce* node whose axes are not known statically: the rank is known when
// keepdims is set, or when the length of a non-empty axes input is.
Status InferReduceUnknownAxes(InferenceContext& ctx, const ValueType& in, bool keepdims) {
  ValueType out(in.dtype, std::nullopt);
  const ValueType* axes_type = ctx.input_type(1);
  if (keepdims) {
    out.shape = Dims(static_cast<size_t>(in.rank()), Dim::Unknown());
  } else if (axes_type && axes_type->has_rank() && axes_type->rank() == 1 && (*axes_type->shape)[0].is_known() &&
             (*axes_type->shape)[0].value > 0) {
    int64_t kept = in.rank() - (*axes_type->shape)[0].value;
    if (kept < 0)
      return ctx.Fail("axes has ", (*axes_type->shape)[0].value, " entries for an input of rank ", in.rank());
    out.shape = Dims(static_cast<size_t>(kept), Dim::Unknown());
  }
  ctx.set_output(0, out);
  return Status::OK();
}

Status InferReduce(InferenceContext& ctx, int axes_input_since) {
  const ValueType& in = *ctx.input_type(0);
  int64_t keepdims = 1, noop = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("keepdims", &keepdims, 1));
  std::vector<int64_t> axes;
  if (ctx.opset() < axes_input_since) {
    if (ctx.has_input(1)) return ctx.Fail("axes is an attribute before opset ", axes_input_since, ", not an input");
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axes", &axes, std::vector<int64_t>{}));
  } else {
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("noop_with_empty_axes", &noop, 0));
    if (ctx.node().FindAttribute("axes") != nullptr)
      return ctx.Fail("axes is an input from opset ", axes_input_since, ", not an attribute");
    if (ctx.has_input(1)) {
      const ValueType* axes_type = ctx.input_type(1);
      if (axes_type->dtype != DType::kInt64) return ctx.Fail("axes must be int64, got ", DTypeName(axes_type->dtype));
      if (axes_type->has_rank() && axes_type->rank() != 1)
        return ctx.Fail("axes must be 1-D, got rank ", axes_type->rank());
      const Tensor* value = ctx.input_value(1);
      if (value == nullptr) {
        if (!in.has_rank()) {
          ctx.set_output(0, ValueType(in.dtype, std::nullopt));
          return Status::OK();
        }
        return InferReduceUnknownAxes(ctx, in, keepdims != 0);
      }
      axes = value->ToInt64Vector();
    }
  }
  if (!in.has_rank()) {
    ctx.set_output(0, ValueType(in.dtype, std::nullopt));
    return Status::OK();
  }
  const Dims& dims = *in.shape;
  const int64_t rank = in.rank();
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && noop == 0);
  for (int64_t axis : axes) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, rank, &a));
    if (reduced[a]) return ctx.Fail("axis ", axis, " appears more than once in axes");
    reduced[a] = true;
  }
  Dims out;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) out.push_back(dims[d]);
    else if (keepdims != 0) out.push_back(Dim(1));
  }
  ctx.set_output(0, ValueType(in.dtype, std::move(out)));
  return Status::OK();
}

Status InferArgReduce(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  int64_t axis = 0, keepdims = 1, select_last = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, 0));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("keepdims", &keepdims, 1));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("select_last_index", &select_last, 0));
  if (!in.has_rank()) {
    ctx.set_output(0, ValueType(DType::kInt64, std::nullopt));
    return Status::OK();
  }
  int64_t a = 0;
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, in.rank(), &a));
  Dims out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (d != a) out.push_back((*in.shape)[d]);
    else if (keepdims != 0) out.push_back(Dim(1));
  }
  ctx.set_output(0, ValueType(DType::kInt64, std::move(out)));
  return Status::OK();
}

Status InferCumSum(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  const ValueType& axis_type = *ctx.input_type(1);
  if (axis_type.dtype != DType::kInt32 && axis_type.dtype != DType::kInt64)
    return ctx.Fail("axis must be int32 or int64, got ", DTypeName(axis_type.dtype));
  if (axis_type.has_rank() && axis_type.rank() > 1)
    return ctx.Fail("axis must be a scalar, got rank ", axis_type.rank());
  const Tensor* axis_value = ctx.input_value(1);
  if (axis_value != nullptr && in.has_rank()) {
    if (axis_value->numel() != 1) return ctx.Fail("axis must hold one value, got ", axis_value->numel());
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis_value->ElementAsInt64(0), in.rank(), &a));
  }
  return PropagateType(ctx);
}

// TopK: k from the attribute before opset 10, from the second input (one int64) from then on.
Status InferTopK(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  int64_t axis = -1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, int64_t{-1}));
  for (const char* flag : {"largest", "sorted"}) {
    int64_t v = 1;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr(flag, &v, int64_t{1}));
    if (v != 0 && v != 1) return ctx.Fail("attribute '", flag, "' must be 0 or 1, got ", v);
  }
  std::optional<int64_t> k;
  if (ctx.opset() < 10) {
    int64_t attr_k = 0;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("k", &attr_k));
    k = attr_k;
  } else {
    if (!ctx.has_input(1)) return ctx.Fail("input K is required from opset 10");
    const ValueType& k_type = *ctx.input_type(1);
    if (k_type.dtype != DType::kInt64) return ctx.Fail("K must be int64, got ", DTypeName(k_type.dtype));
    if (const Tensor* value = ctx.input_value(1)) {
      if (value->numel() != 1) return ctx.Fail("K must hold one value, got ", value->numel());
      k = value->ElementAsInt64(0);
    }
  }
  if (k && *k < 0) return ctx.Fail("k must be >= 0, got ", *k);
  std::optional<Dims> out;
  if (in.has_rank()) {
    int64_t a = 0;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, in.rank(), &a));
    out = *in.shape;
    const Dim& n = (*out)[a];
    if (k && n.is_known() && *k > n.value)
      return ctx.Fail("k = ", *k, " exceeds the size ", n.value, " of axis ", axis);
    (*out)[a] = k ? Dim(*k) : Dim::Unknown();
  }
  ctx.set_output(0, ValueType(in.dtype, out));
  ctx.set_output(1, ValueType(DType::kInt64, out));
  return Status::OK();
}

OpSchema Reduce(const char* op_type, int axes_input_since) {
  OpSchema s;
  s.op_type = op_type;
  s.min_inputs = 1;
  s.max_inputs = 2;
  s.infer = [axes_input_since](InferenceContext& ctx) { return InferReduce(ctx, axes_input_since); };
  return s;
}

}  // namespace

void RegisterReductionSchemas(OpSchemaRegistry& registry) {
  registry.Register(Reduce("ReduceSum", 13));
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                         "ReduceLogSumExp", "ReduceSumSquare"})
    registry.Register(Reduce(op, 18));
  for (const char* op : {"ArgMax", "ArgMin"}) registry.Register(OpSchema{"", op, 1, 1, 1, 1, InferArgReduce});
  registry.Register(OpSchema{"", "CumSum", 2, 2, 1, 1, InferCumSum});
  registry.Register(OpSchema{"", "CumProd", 2, 2, 1, 1, InferCumSum});  // same shape rules
  registry.Register(OpSchema{"", "TopK", 1, 2, 2, 2, InferTopK});
}

}  // namespace tob
