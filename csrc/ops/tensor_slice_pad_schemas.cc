// Shape functions of Slice, Pad and CenterCropPad, whose output shapes depend on the values of
// their starts/ends/axes/steps, pads and shape inputs.
#include <climits>

#include "ops/tensor_params.h"
#include "ops/tensor_schema_utils.h"

namespace tob {

using namespace tensor_schema;

namespace {

// Reads an optional integer list input; `known` turns false when it is given but not known.
std::vector<int64_t> OptionalInts(const InferenceContext& ctx, int i, bool* known) {
  if (!ctx.has_input(i)) return {};
  auto v = InputInts(ctx, i);
  if (!v) {
    *known = false;
    return {};
  }
  return *v;
}

Status InferSlice(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  SliceArgs args;
  bool known = true, axes_known = true;
  if (ctx.opset() < 10) {
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("starts", &args.starts));
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("ends", &args.ends));
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axes", &args.axes, std::vector<int64_t>{}));
  } else {
    if (ctx.num_inputs() < 3) return ctx.Fail("expects data, starts and ends inputs");
    args.starts = OptionalInts(ctx, 1, &known);
    args.ends = OptionalInts(ctx, 2, &known);
    args.axes = OptionalInts(ctx, 3, &axes_known);
    args.steps = OptionalInts(ctx, 4, &known);
    known = known && axes_known;
  }
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t rank = static_cast<int64_t>(in->size());
  if (!known) {
    Dims out = *in;
    std::optional<std::vector<int64_t>> sliced;
    if (axes_known && ctx.has_input(3)) {
      sliced = args.axes;
    } else if (axes_known) {
      if (auto n = InputLength(ctx, 1)) {
        sliced.emplace();
        for (int64_t i = 0; i < *n && i < rank; ++i) sliced->push_back(i);
      }
    }
    if (!sliced) {
      out = UnknownDims(rank);
    } else {
      for (int64_t a : *sliced) {
        int64_t n;
        TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, a, rank, &n));
        out[n] = Dim::Unknown();
      }
    }
    ctx.set_output(0, ValueType(dtype, std::move(out)));
    return Status::OK();
  }
  std::vector<int64_t> axes;
  Status s = NormalizeSliceArgs(args, rank, &axes);
  if (!s.ok()) return ctx.Fail(s.message());
  Dims out = *in;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i];
    int64_t start = args.starts[i], end = args.ends[i];
    int64_t step = args.steps.empty() ? 1 : args.steps[i];
    if (step == 0) return ctx.Fail("slice step cannot be 0");
    const Dim& d = (*in)[a];
    if (d.is_known()) {
      int64_t first, length;
      s = ResolveSliceAxis(d.value, start, end, step, &first, &length);
      if (!s.ok()) return ctx.Fail(s.message());
      out[a] = Dim(length);
    } else if (!(start == 0 && step == 1 && end >= INT_MAX)) {
      out[a] = Dim::Unknown();  // a whole symbolic dim ([0:INT_MAX]) keeps its symbol
    }
  }
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

Status InferPad(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  std::string mode_name;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("mode", &mode_name, std::string("constant")));
  PadMode mode;
  Status s = ParsePadMode(mode_name, &mode);
  if (!s.ok()) return ctx.Fail(s.message());
  std::optional<std::vector<int64_t>> pads, axes;
  bool axes_known = true;
  if (ctx.opset() < 11) {
    std::vector<int64_t> p;
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("pads", &p));
    pads = std::move(p);
  } else {
    if (!ctx.has_input(1)) return ctx.Fail("the pads input is required");
    pads = InputInts(ctx, 1);
    if (ctx.has_input(3)) {
      if (ctx.opset() < 18) return ctx.Fail("the axes input needs opset 18");
      axes = InputInts(ctx, 3);
      axes_known = axes.has_value();
    }
  }
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  int64_t rank = static_cast<int64_t>(in->size());
  if (!pads || !axes_known) {
    ctx.set_output(0, ValueType(dtype, UnknownDims(rank)));
    return Status::OK();
  }
  std::vector<int64_t> begin, end;
  s = ResolvePads(rank, *pads, axes, &begin, &end);
  if (!s.ok()) return ctx.Fail(s.message());
  Dims out = *in;
  for (int64_t i = 0; i < rank; ++i) {
    if (begin[i] == 0 && end[i] == 0) continue;
    const Dim& d = (*in)[i];
    if (!d.is_known()) {
      out[i] = Dim::Unknown();
      continue;
    }
    int64_t n = d.value + begin[i] + end[i];
    if (n < 0)
      return ctx.Fail("pads ", begin[i], " and ", end[i], " on axis ", i, " of size ", d.value,
                      " give a negative size");
    if (mode != PadMode::kConstant && d.value == 0 && (begin[i] > 0 || end[i] > 0))
      return ctx.Fail("cannot pad the empty axis ", i, " in ", mode_name, " mode");
    out[i] = Dim(n);
  }
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

// CenterCropPad: the dims named by 'axes' (all when absent) become the values of the shape input.
Status InferCenterCropPad(InferenceContext& ctx) {
  DType dtype = InputDType(ctx, 0);
  const Dims* in = InputDims(ctx, 0);
  DType shape_type = InputDType(ctx, 1);
  if (shape_type != DType::kInt32 && shape_type != DType::kInt64)
    return ctx.Fail("shape must be int32 or int64, got ", DTypeName(shape_type));
  std::vector<int64_t> axes;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("axes", &axes, std::vector<int64_t>{}));
  if (in == nullptr) {
    ctx.set_output(0, ValueType(dtype, std::nullopt));
    return Status::OK();
  }
  const int64_t rank = static_cast<int64_t>(in->size());
  std::vector<int64_t> resolved;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) resolved.push_back(i);
  } else {
    TOB_RETURN_IF_ERROR(NormalizeAxes(ctx, axes, rank, &resolved));
  }
  auto shape = InputInts(ctx, 1);
  if (!shape) {
    Dims out = *in;
    for (int64_t a : resolved) out[a] = Dim::Unknown();
    ctx.set_output(0, ValueType(dtype, std::move(out)));
    return Status::OK();
  }
  if (shape->size() != resolved.size())
    return ctx.Fail("shape has ", shape->size(), " values for ", resolved.size(), " axes");
  Dims out = *in;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if ((*shape)[i] < 0) return ctx.Fail("shape values must be non-negative, got ", (*shape)[i]);
    out[resolved[i]] = Dim((*shape)[i]);
  }
  ctx.set_output(0, ValueType(dtype, std::move(out)));
  return Status::OK();
}

}  // namespace

void RegisterTensorSlicePadSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "Slice", 1, 5, 1, 1, InferSlice});
  registry.Register(OpSchema{"", "Pad", 1, 4, 1, 1, InferPad});
  registry.Register(OpSchema{"", "CenterCropPad", 2, 2, 1, 1, InferCenterCropPad});
}

}  // namespace tob
