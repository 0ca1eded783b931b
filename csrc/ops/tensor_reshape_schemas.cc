// Shape functions of the ops that only relabel a tensor's shape (Reshape, Flatten, Squeeze,
// Unsqueeze, Identity) and of the ops that report it (Shape, Size).
#include <algorithm>
#include <map>

#include "ops/tensor_schema_utils.h"

namespace tob {

using namespace tensor_schema;

namespace {

// Resolves the single -1 of a Reshape target when the input's dims allow it: either every dim
// is known, or the symbols on both sides cancel out (e.g. [batch, seq, 12, 64] -> [0, 0, -1]).
Status InferMinusOne(const InferenceContext& ctx, const Dims& in, Dims* out, size_t at) {
  int64_t in_known = 1, out_known = 1;
  std::map<std::string, int> symbols;  // input symbols minus output symbols
  for (const Dim& d : in) {
    if (d.is_known()) in_known *= d.value;
    else if (d.is_symbolic()) ++symbols[d.symbol];
    else return Status::OK();  // an unknown dim: the -1 stays unknown
  }
  for (size_t i = 0; i < out->size(); ++i) {
    if (i == at) continue;
    const Dim& d = (*out)[i];
    if (d.is_known()) out_known *= d.value;
    else if (d.is_symbolic() && symbols[d.symbol] > 0) --symbols[d.symbol];
    else return Status::OK();
  }
  std::vector<std::string> left;
  for (const auto& [s, n] : symbols)
    for (int k = 0; k < n; ++k) left.push_back(s);
  if (left.empty()) {
    if (out_known == 0) {
      if (in_known == 0)
        return ctx.Fail("cannot infer the -1 dim of a reshape to ", DimsToString(*out), " from an empty input");
      return ctx.Fail("cannot reshape ", DimsToString(in), " to ", DimsToString(*out));
    }
    if (in_known % out_known != 0)
      return ctx.Fail("cannot reshape ", DimsToString(in), " (", in_known, " elements) to ", DimsToString(*out));
    (*out)[at] = Dim(in_known / out_known);
  } else if (left.size() == 1 && in_known == out_known) {
    (*out)[at] = Dim::Symbol(left[0]);
  }
  return Status::OK();
}

Status InferReshape(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  int64_t allowzero = 0;
  if (ctx.opset() >= 14) TOB_RETURN_IF_ERROR(ctx.node().GetAttr("allowzero", &allowzero, 0));
  const Dims* in = InputDims(ctx, 0);
  auto target = InputInts(ctx, 1);
  if (!target) {
    auto n = InputLength(ctx, 1);
    ctx.set_output(0, ValueType(dtype, n ? std::optional<Dims>(UnknownDims(*n)) : std::nullopt));
    return Status::OK();
  }
  if (const Dims* sd = InputDims(ctx, 1); sd != nullptr && sd->size() != 1)
    return ctx.Fail("the shape input must be 1-D, got ", DimsToString(*sd));
  Dims out(target->size());
  int64_t minus_one = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t v = (*target)[i];
    if (v == -1) {
      if (minus_one >= 0) return ctx.Fail("the target shape has more than one -1");
      minus_one = static_cast<int64_t>(i);
    } else if (v == 0 && allowzero == 0) {
      if (in == nullptr) continue;  // copies an unknown dim
      if (i >= in->size()) return ctx.Fail("target dim ", i, " is 0 (copy) but the input has rank ", in->size());
      out[i] = (*in)[i];
    } else if (v < 0) {
      return ctx.Fail("invalid target dim ", v, " (dims must be >= -1)");
    } else {
      has_zero = has_zero || v == 0;
      out[i] = Dim(v);
    }
  }
  if (allowzero != 0 && has_zero && minus_one >= 0)
    return ctx.Fail("allowzero=1 forbids a 0 and a -1 in the same target shape");
  if (in != nullptr) {
    if (minus_one >= 0) {
      TOB_RETURN_IF_ERROR(InferMinusOne(ctx, *in, &out, static_cast<size_t>(minus_one)));
    } else {
      auto a = ConcreteShape(*in);
      auto b = ConcreteShape(out);
      if (a && b && NumElements(*a) != NumElements(*b))
        return ctx.Fail("cannot reshape ", ShapeToString(*a), " (", NumElements(*a), " elements) to ",
                        ShapeToString(*b), " (", NumElements(*b), " elements)");
    }
  }
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferFlatten(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  int64_t axis;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, 1));
  const Dims* in = InputDims(ctx, 0);
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, UnknownDims(2)));
    return Status::OK();
  }
  int64_t rank = static_cast<int64_t>(in->size());
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a > rank || (axis < 0 && ctx.opset() < 11))
    return ctx.Fail("axis ", axis, " is out of range for rank ", rank);
  ctx.set_output(0, ValueType(dtype, Dims{DimProduct(*in, 0, a), DimProduct(*in, a, in->size())}));
  return Status::OK();
}

Status InferSqueeze(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  std::optional<std::vector<int64_t>> axes;
  bool axes_given;
  if (ctx.opset() >= 13) {
    axes_given = ctx.has_input(1);
    if (axes_given) axes = InputInts(ctx, 1);
  } else {
    axes_given = ctx.node().FindAttribute("axes") != nullptr;
    if (axes_given) {
      std::vector<int64_t> a;
      TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axes", &a));
      axes = std::move(a);
    }
  }
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t rank = static_cast<int64_t>(in->size());
  Dims out;
  if (!axes_given) {
    for (const Dim& d : *in) {
      if (!d.is_known()) {  // whether a symbolic dim is 1 is only known at run time
        ctx.set_output(0, ValueType(dtype, std::nullopt));
        return Status::OK();
      }
      if (d.value != 1) out.push_back(d);
    }
  } else if (!axes) {
    auto n = InputLength(ctx, 1);
    if (n && *n > rank) return ctx.Fail(*n, " axes to squeeze from rank ", rank);
    ctx.set_output(0, ValueType(dtype, n ? std::optional<Dims>(UnknownDims(rank - *n)) : std::nullopt));
    return Status::OK();
  } else {
    std::vector<int64_t> norm;
    TOB_RETURN_IF_ERROR(NormalizeAxes(ctx, *axes, rank, &norm));
    std::vector<bool> drop(static_cast<size_t>(rank), false);
    for (int64_t a : norm) {
      if ((*in)[a].is_known() && (*in)[a].value != 1)
        return ctx.Fail("cannot squeeze axis ", a, " of size ", (*in)[a].value, " in ", DimsToString(*in));
      drop[a] = true;
    }
    for (int64_t i = 0; i < rank; ++i)
      if (!drop[i]) out.push_back((*in)[i]);
  }
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferUnsqueeze(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  std::optional<std::vector<int64_t>> axes;
  std::optional<int64_t> num_axes;
  if (ctx.opset() >= 13) {
    if (!ctx.has_input(1)) return ctx.Fail("the axes input is required");
    axes = InputInts(ctx, 1);
    num_axes = InputLength(ctx, 1);
  } else {
    std::vector<int64_t> a;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axes", &a));
    axes = std::move(a);
  }
  if (axes) num_axes = static_cast<int64_t>(axes->size());
  if (in == nullptr || !num_axes) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t out_rank = static_cast<int64_t>(in->size()) + *num_axes;
  if (!axes) {
    ctx.set_output(0, ValueType(dtype, UnknownDims(out_rank)));
    return Status::OK();
  }
  std::vector<int64_t> norm;
  TOB_RETURN_IF_ERROR(NormalizeAxes(ctx, *axes, out_rank, &norm));
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : norm) inserted[a] = true;
  Dims out;
  size_t next = 0;
  for (int64_t i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? Dim(1) : (*in)[next++]);
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferShape(InferenceContext& ctx) {
  const Dims* in = InputDims(ctx, 0);
  if (in == nullptr) {
    ctx.set_output(0, ValueType(DType::kInt64, UnknownDims(1)));
    return Status::OK();
  }
  int64_t rank = static_cast<int64_t>(in->size());
  int64_t start = 0, end = rank;
  if (ctx.opset() >= 15) {
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("start", &start, 0));
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("end", &end, rank));
  }
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  ctx.set_output(0, ValueType(DType::kInt64, Dims{Dim(std::max<int64_t>(end - start, 0))}));
  return Status::OK();
}

}  // namespace

void RegisterTensorReshapeSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "Reshape", 2, 2, 1, 1, InferReshape});
  registry.Register(OpSchema{"", "Flatten", 1, 1, 1, 1, InferFlatten});
  registry.Register(OpSchema{"", "Squeeze", 1, 2, 1, 1, InferSqueeze});
  registry.Register(OpSchema{"", "Unsqueeze", 1, 2, 1, 1, InferUnsqueeze});
  OpSchema identity{"", "Identity", 1, 1, 1, 1, [](InferenceContext& ctx) { return PropagateType(ctx); }};
  identity.non_tensor_values = true;  // sequences from opset 14, optionals from 16
  registry.Register(identity);
  registry.Register(OpSchema{"", "Shape", 1, 1, 1, 1, InferShape});
  registry.Register(OpSchema{"", "Size", 1, 1, 1, 1, [](InferenceContext& ctx) {
                               ctx.set_output(0, ValueType(DType::kInt64, Dims{}));
                               return Status::OK();
                             }});
}

}  // namespace tob
