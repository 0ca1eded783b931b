// Shape functions of the ops that rearrange or replicate elements: Transpose, Expand, Tile,
// Concat, Split, DepthToSpace, SpaceToDepth, ReverseSequence.
#include <algorithm>

#include "ops/tensor_params.h"
#include "ops/tensor_schema_utils.h"

namespace tob {

using namespace tensor_schema;

namespace {

Status InferTranspose(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  std::vector<int64_t> perm;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("perm", &perm, std::vector<int64_t>{}));
  const Dims* in = InputDims(ctx, 0);
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, perm.empty() ? std::nullopt : std::optional<Dims>(UnknownDims(perm.size()))));
    return Status::OK();
  }
  std::vector<int64_t> p;
  Status s = ResolvePerm(perm, static_cast<int64_t>(in->size()), &p);
  if (!s.ok()) return ctx.Fail(s.message());
  Dims out(in->size());
  for (size_t i = 0; i < p.size(); ++i) out[i] = (*in)[p[i]];
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

// Expand broadcasts both ways: a target dim of 1 keeps the input's dim.
Status InferExpand(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  auto target = InputInts(ctx, 1);
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  if (!target) {
    auto n = InputLength(ctx, 1);
    if (!n) {
      ctx.set_output(0, ValueType(dtype, std::nullopt));
      return Status::OK();
    }
    size_t rank = std::max(in->size(), static_cast<size_t>(*n));
    Dims out(rank);
    for (size_t i = 0; i < in->size(); ++i) {
      const Dim& d = (*in)[i];
      if (d.is_known() && d.value != 1) out[rank - in->size() + i] = d;
    }
    ctx.set_output(0, ValueType(dtype, std::move(out)));
    return Status::OK();
  }
  Dims t;
  for (int64_t v : *target) {
    if (v < 0) return ctx.Fail("the target shape has a negative dim ", v);
    t.emplace_back(v);
  }
  TOB_ASSIGN_OR_RETURN(Dims out, BroadcastDims(ctx, *in, t));
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferTile(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  auto repeats = InputInts(ctx, 1);
  if (in == nullptr) {
    auto n = InputLength(ctx, 1);
    ctx.set_output(0, ValueType(dtype, n ? std::optional<Dims>(UnknownDims(*n)) : std::nullopt));
    return Status::OK();
  }
  if (!repeats) {
    ctx.set_output(0, ValueType(dtype, UnknownDims(in->size())));
    return Status::OK();
  }
  if (repeats->size() != in->size())
    return ctx.Fail("repeats has ", repeats->size(), " entries but the input has rank ", in->size());
  Dims out(in->size());
  for (size_t i = 0; i < in->size(); ++i) {
    if ((*repeats)[i] < 0) return ctx.Fail("repeats must be >= 0, got ", (*repeats)[i]);
    out[i] = MulDim((*in)[i], Dim((*repeats)[i]));
  }
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferConcat(InferenceContext& ctx) {
  int64_t axis;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis));
  DType dtype = InputDType(ctx, 0);
  const Dims* first = nullptr;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Fail("input ", i, " is missing");
    if (InputDType(ctx, i) != dtype)
      return ctx.Fail("all inputs must have one dtype; input ", i, " is ", DTypeName(InputDType(ctx, i)),
                      ", input 0 is ", DTypeName(dtype));
    if (first == nullptr) first = InputDims(ctx, i);
  }
  if (first == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t rank = static_cast<int64_t>(first->size());
  int64_t a;
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, rank, &a));
  Dims out = *first;
  Dim total(0);
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Dims* d = InputDims(ctx, i);
    if (d == nullptr) {
      total = Dim::Unknown();
      continue;
    }
    if (static_cast<int64_t>(d->size()) != rank)
      return ctx.Fail("all inputs must have the same rank; input ", i, " is ", DimsToString(*d), ", input 0 is ",
                      DimsToString(*first));
    for (int64_t k = 0; k < rank; ++k) {
      if (k == a) continue;
      const Dim& x = (*d)[k];
      if (x.is_known() && out[k].is_known() && x.value != out[k].value)
        return ctx.Fail("input ", i, " has shape ", DimsToString(*d), ", incompatible with ", DimsToString(out),
                        " outside axis ", a);
      if (x.is_known() && !out[k].is_known()) out[k] = x;
    }
    const Dim& x = (*d)[a];
    total = total.is_known() && x.is_known()       ? Dim(total.value + x.value)
            : total.is_known() && total.value == 0 ? x
            : x.is_known() && x.value == 0         ? total
                                                   : Dim::Unknown();
  }
  out[a] = total;
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferSplit(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  int64_t axis;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axis", &axis, 0));
  int64_t n = ctx.num_outputs();
  std::optional<std::vector<int64_t>> split;
  bool split_given = false;
  if (ctx.opset() >= 13) {
    split_given = ctx.has_input(1);
    if (split_given) split = InputInts(ctx, 1);
  } else if (ctx.node().FindAttribute("split") != nullptr) {
    std::vector<int64_t> s;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("split", &s));
    split_given = true;
    split = std::move(s);
  }
  if (ctx.opset() >= 18 && ctx.node().FindAttribute("num_outputs") != nullptr) {
    if (split_given) return ctx.Fail("give either the split input or num_outputs, not both");
    int64_t num_outputs;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("num_outputs", &num_outputs));
    if (num_outputs != n) return ctx.Fail("num_outputs is ", num_outputs, " but the node has ", n, " outputs");
  }
  const Dims* in = InputDims(ctx, 0);
  if (in == nullptr) {
    for (int i = 0; i < n; ++i) ctx.set_output(i, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t a;
  TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, axis, static_cast<int64_t>(in->size()), &a));
  const Dim& dim = (*in)[a];
  std::vector<Dim> sizes(static_cast<size_t>(n));
  if (split) {
    if (static_cast<int64_t>(split->size()) != n)
      return ctx.Fail("split has ", split->size(), " entries for ", n, " outputs");
    for (int64_t s : *split)
      if (s < 0) return ctx.Fail("split sizes must be >= 0, got ", s);
  }
  if (dim.is_known() && (split || !split_given)) {
    std::vector<int64_t> resolved;
    Status s = ResolveSplit(dim.value, split, n, &resolved);
    if (!s.ok()) return ctx.Fail(s.message());
    for (int64_t i = 0; i < n; ++i) sizes[i] = Dim(resolved[i]);
  } else if (split) {
    for (int64_t i = 0; i < n; ++i) sizes[i] = Dim((*split)[i]);
  } else if (n == 1) {
    sizes[0] = dim;
  }
  for (int64_t i = 0; i < n; ++i) {
    Dims out = *in;
    out[a] = sizes[i];
    ctx.set_output(static_cast<int>(i), ValueType(dtype, std::move(out)));
  }
  return Status::OK();
}

Dim DivDim(const Dim& a, int64_t b) { return a.is_known() ? Dim(a.value / b) : Dim::Unknown(); }

Status ReadBlocksize(const InferenceContext& ctx, int64_t* b) {
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("blocksize", b));
  if (*b <= 0) return ctx.Fail("blocksize must be > 0, got ", *b);
  return Status::OK();
}

Status InferDepthToSpace(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  int64_t b;
  TOB_RETURN_IF_ERROR(ReadBlocksize(ctx, &b));
  const Dims* in = InputDims(ctx, 0);
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, UnknownDims(4)));
    return Status::OK();
  }
  if (in->size() != 4) return ctx.Fail("expects a 4-D input, got ", DimsToString(*in));
  const Dim& c = (*in)[1];
  if (c.is_known() && c.value % (b * b) != 0)
    return ctx.Fail("channels (", c.value, ") must be a multiple of blocksize^2 (", b * b, ")");
  ctx.set_output(
      0, ValueType(dtype, Dims{(*in)[0], DivDim(c, b * b), MulDim((*in)[2], Dim(b)), MulDim((*in)[3], Dim(b))}));
  return Status::OK();
}

Status InferSpaceToDepth(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  int64_t b;
  TOB_RETURN_IF_ERROR(ReadBlocksize(ctx, &b));
  const Dims* in = InputDims(ctx, 0);
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, UnknownDims(4)));
    return Status::OK();
  }
  if (in->size() != 4) return ctx.Fail("expects a 4-D input, got ", DimsToString(*in));
  for (int k = 2; k < 4; ++k) {
    const Dim& d = (*in)[k];
    if (d.is_known() && d.value % b != 0)
      return ctx.Fail("spatial dim ", k, " (", d.value, ") must be a multiple of blocksize ", b);
  }
  ctx.set_output(
      0, ValueType(dtype, Dims{(*in)[0], MulDim((*in)[1], Dim(b * b)), DivDim((*in)[2], b), DivDim((*in)[3], b)}));
  return Status::OK();
}

// ReverseSequence(input [T, B, ...] or [B, T, ...], sequence_lens int64 [B]): the input's type.
Status InferReverseSequence(InferenceContext& ctx) {
  int64_t batch_axis = 1, time_axis = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("batch_axis", &batch_axis, int64_t{1}));
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("time_axis", &time_axis, int64_t{0}));
  if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) || batch_axis == time_axis)
    return ctx.Fail("batch_axis and time_axis must be 0 and 1 in some order, got ", batch_axis, " and ", time_axis);
  const DType lens_type = InputDType(ctx, 1);
  if (lens_type != DType::kUndefined && lens_type != DType::kInt64)
    return ctx.Fail("sequence_lens must be int64, got ", DTypeName(lens_type));
  const Dims* in = InputDims(ctx, 0);
  const Dims* lens = InputDims(ctx, 1);
  if (in != nullptr && in->size() < 2) return ctx.Fail("input must have rank >= 2, got ", DimsToString(*in));
  if (lens != nullptr && lens->size() != 1) return ctx.Fail("sequence_lens must be 1-D, got ", DimsToString(*lens));
  if (in != nullptr && lens != nullptr && (*in)[batch_axis].is_known() && (*lens)[0].is_known() &&
      (*in)[batch_axis].value != (*lens)[0].value)
    return ctx.Fail("sequence_lens has ", (*lens)[0].value, " lengths for a batch of ", (*in)[batch_axis].value);
  return PropagateType(ctx);
}

}  // namespace

void RegisterTensorLayoutSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "Transpose", 1, 1, 1, 1, InferTranspose});
  registry.Register(OpSchema{"", "Expand", 2, 2, 1, 1, InferExpand});
  registry.Register(OpSchema{"", "Tile", 2, 2, 1, 1, InferTile});
  registry.Register(OpSchema{"", "Concat", 1, INT_MAX, 1, 1, InferConcat});
  registry.Register(OpSchema{"", "Split", 1, 2, 1, INT_MAX, InferSplit});
  registry.Register(OpSchema{"", "DepthToSpace", 1, 1, 1, 1, InferDepthToSpace});
  registry.Register(OpSchema{"", "SpaceToDepth", 1, 1, 1, 1, InferSpaceToDepth});
  registry.Register(OpSchema{"", "ReverseSequence", 2, 2, 1, 1, InferReverseSequence});
}

}  // namespace tob
