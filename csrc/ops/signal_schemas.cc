// Schemas of the spectral ops: DFT (ai.onnx 17, 20), STFT (17) and MelWeightMatrix (17). Their
// output sizes follow from input values (dft_length, the axis, frame_step, num_mel_bins, ...):
// exact when the values are known (always at run time), partly unknown otherwise.
#include <optional>

#include "ops/op_schema.h"
#include "ops/signal_attributes.h"

namespace tob {
namespace {

Status CheckFloat(const InferenceContext& ctx, const char* name, DType d) {
  if (!IsFloatingPoint(d)) return ctx.Fail(name, " must be float32, float64, float16 or bfloat16, got ", DTypeName(d));
  return Status::OK();
}

Status CheckIntegerScalar(const InferenceContext& ctx, int i, const char* name) {
  const ValueType* t = ctx.input_type(i);
  if (t == nullptr) return Status::OK();
  if (t->dtype != DType::kInt32 && t->dtype != DType::kInt64)
    return ctx.Fail(name, " must be int32 or int64, got ", DTypeName(t->dtype));
  if (t->has_rank() && !(t->rank() == 0 || (t->rank() == 1 && (*t->shape)[0] == Dim(1))))
    return ctx.Fail(name, " must be a scalar, got ", t->ToString());
  return Status::OK();
}

// input: [signal dims..., 1 or 2]; dft_length and axis optional scalars.
Status InferDft(InferenceContext& ctx) {
  const ValueType& in = *ctx.input_type(0);
  TOB_RETURN_IF_ERROR(CheckFloat(ctx, "input", in.dtype));
  TOB_RETURN_IF_ERROR(CheckIntegerScalar(ctx, 1, "dft_length"));
  TOB_ASSIGN_OR_RETURN(DftAttributes attrs, DftAttributes::Read(ctx.node(), ctx.opset()));
  if (!attrs.axis_is_input && ctx.num_inputs() > 2)
    return ctx.Fail("DFT-", ctx.opset(), " takes 2 inputs (the axis input came with opset 20), got ", ctx.num_inputs());
  if (attrs.axis_is_input && ctx.has_input(2) && ctx.input_type(2)->dtype != DType::kInt64)
    return ctx.Fail("axis must be int64, got ", DTypeName(ctx.input_type(2)->dtype));
  if (!in.has_rank()) {
    ctx.set_output(0, ValueType(in.dtype, std::nullopt));
    return Status::OK();
  }
  const int64_t rank = in.rank();
  if (rank < 2) return ctx.Fail("input must have a signal dimension and the complex dimension, got ", in.ToString());
  const Dims& dims = *in.shape;
  const Dim& parts = dims[rank - 1];
  if (parts.is_known() && parts.value != 1 && parts.value != 2)
    return ctx.Fail("the last dimension must be 1 (real) or 2 (complex), got ", parts.value);
  if (attrs.inverse && attrs.onesided && parts.is_known() && parts.value != 2)
    return ctx.Fail("the inverse one-sided transform (IRFFT) takes a complex input [..., 2], got ", in.ToString());

  Dims out = dims;
  out[rank - 1] = Dim(DftOutputComponents(attrs));
  const Tensor* axis_value = attrs.axis_is_input && ctx.has_input(2) ? ctx.input_value(2) : nullptr;
  if (attrs.axis_is_input && ctx.has_input(2) && axis_value == nullptr) {
    // The axis is not known before run time: every signal dimension may change.
    for (int64_t i = 0; i + 1 < rank; ++i) out[i] = Dim::Unknown();
    ctx.set_output(0, ValueType(in.dtype, out));
    return Status::OK();
  }
  TOB_ASSIGN_OR_RETURN(int64_t axis, ResolveDftAxis(ctx.node(), attrs, rank, axis_value));
  out[axis] = Dim::Unknown();
  const Tensor* length_value = ctx.has_input(1) ? ctx.input_value(1) : nullptr;
  if (length_value != nullptr || (!ctx.has_input(1) && dims[axis].is_known())) {
    TOB_ASSIGN_OR_RETURN(int64_t length, ResolveDftLength(ctx.node(), attrs, dims[axis].value, length_value));
    out[axis] = Dim(DftOutputLength(attrs, length));
  }
  ctx.set_output(0, ValueType(in.dtype, out));
  return Status::OK();
}

// signal [batch, length, 1 or 2], frame_step, window [frame_length]?, frame_length?
//   -> [batch, frames, bins, 2]
Status InferStft(InferenceContext& ctx) {
  const ValueType& signal = *ctx.input_type(0);
  TOB_RETURN_IF_ERROR(CheckFloat(ctx, "signal", signal.dtype));
  TOB_RETURN_IF_ERROR(CheckIntegerScalar(ctx, 1, "frame_step"));
  TOB_RETURN_IF_ERROR(CheckIntegerScalar(ctx, 3, "frame_length"));
  if (ctx.has_input(3) && ctx.input_type(3)->dtype != ctx.input_type(1)->dtype)
    return ctx.Fail("frame_step and frame_length must share one type, got ", DTypeName(ctx.input_type(1)->dtype),
                    " and ", DTypeName(ctx.input_type(3)->dtype));
  TOB_ASSIGN_OR_RETURN(bool onesided, ReadStftOnesided(ctx.node()));
  if (signal.has_rank() && signal.rank() != 3)
    return ctx.Fail("signal must be [batch, length, 1 or 2], got ", signal.ToString());
  if (signal.has_rank()) {
    const Dim& parts = (*signal.shape)[2];
    if (parts.is_known() && parts.value != 1 && parts.value != 2)
      return ctx.Fail("the signal's last dimension must be 1 (real) or 2 (complex), got ", parts.value);
  }
  int64_t window_length = -1;
  Dim window_dim = Dim::Unknown();
  if (ctx.has_input(2)) {
    const ValueType& window = *ctx.input_type(2);
    if (window.dtype != signal.dtype)
      return ctx.Fail("window has dtype ", DTypeName(window.dtype), ", the signal ", DTypeName(signal.dtype));
    if (window.has_rank() && window.rank() != 1) return ctx.Fail("window must be 1-D, got ", window.ToString());
    if (window.has_rank()) window_dim = (*window.shape)[0];
    if (window_dim.is_known()) window_length = window_dim.value;
  }
  const Dim batch = signal.has_rank() ? (*signal.shape)[0] : Dim::Unknown();
  const Dim length = signal.has_rank() ? (*signal.shape)[1] : Dim::Unknown();
  const Tensor* step = ctx.input_value(1);
  const Tensor* frame_length = ctx.has_input(3) ? ctx.input_value(3) : nullptr;
  const bool length_known = !ctx.has_input(3) || frame_length != nullptr;
  const bool window_known = !ctx.has_input(2) || window_length >= 0;
  if (step != nullptr && length.is_known() && length_known && (window_known || frame_length != nullptr)) {
    TOB_ASSIGN_OR_RETURN(StftPlan plan,
                         PlanStft(ctx.node(), onesided, length.value, *step, window_length, frame_length));
    ctx.set_output(0, ValueType(signal.dtype, Dims{batch, Dim(plan.frames), Dim(plan.bins), Dim(2)}));
    return Status::OK();
  }
  ctx.set_output(0, ValueType(signal.dtype, Dims{batch, Dim::Unknown(), Dim::Unknown(), Dim(2)}));
  return Status::OK();
}

// num_mel_bins, dft_length, sample_rate (integers), lower_edge_hertz, upper_edge_hertz (floats)
//   -> [dft_length / 2 + 1, num_mel_bins] of output_datatype.
Status InferMelWeightMatrix(InferenceContext& ctx) {
  const char* kInts[] = {"num_mel_bins", "dft_length", "sample_rate"};
  for (int i = 0; i < 3; ++i) {
    TOB_RETURN_IF_ERROR(CheckIntegerScalar(ctx, i, kInts[i]));
    if (ctx.input_type(i)->dtype != ctx.input_type(0)->dtype)
      return ctx.Fail("num_mel_bins, dft_length and sample_rate must share one type, got ",
                      DTypeName(ctx.input_type(0)->dtype), " and ", DTypeName(ctx.input_type(i)->dtype));
  }
  for (int i = 3; i < 5; ++i) {
    const ValueType& t = *ctx.input_type(i);
    TOB_RETURN_IF_ERROR(CheckFloat(ctx, i == 3 ? "lower_edge_hertz" : "upper_edge_hertz", t.dtype));
    if (t.dtype != ctx.input_type(3)->dtype)
      return ctx.Fail("lower_edge_hertz and upper_edge_hertz must share one type");
    if (t.has_rank() && !(t.rank() == 0 || (t.rank() == 1 && (*t.shape)[0] == Dim(1))))
      return ctx.Fail(i == 3 ? "lower_edge_hertz" : "upper_edge_hertz", " must be a scalar, got ", t.ToString());
  }
  int64_t code = 1;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("output_datatype", &code, int64_t{1}));
  const DType dtype = DTypeFromOnnx(static_cast<int32_t>(code));
  if (!(IsFloatingPoint(dtype) || IsSignedInteger(dtype) || IsUnsignedInteger(dtype)))
    return ctx.Fail("output_datatype ", code, " is not a numeric tensor type");
  Dims out{Dim::Unknown(), Dim::Unknown()};
  if (const Tensor* n = ctx.input_value(1)) {
    TOB_ASSIGN_OR_RETURN(int64_t dft_length, ReadScalarInput(ctx.node(), "dft_length", *n));
    if (dft_length < 1) return ctx.Fail("dft_length must be positive, got ", dft_length);
    out[0] = Dim(dft_length / 2 + 1);
  }
  if (const Tensor* n = ctx.input_value(0)) {
    TOB_ASSIGN_OR_RETURN(int64_t bins, ReadScalarInput(ctx.node(), "num_mel_bins", *n));
    if (bins < 1) return ctx.Fail("num_mel_bins must be positive, got ", bins);
    out[1] = Dim(bins);
  }
  ctx.set_output(0, ValueType(dtype, out));
  return Status::OK();
}

}  // namespace

void RegisterSignalSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "DFT", 1, 3, 1, 1, InferDft});
  registry.Register(OpSchema{"", "STFT", 2, 4, 1, 1, InferStft});
  registry.Register(OpSchema{"", "MelWeightMatrix", 5, 5, 1, 1, InferMelWeightMatrix});
}

}  // namespace tob
