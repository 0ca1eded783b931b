// Optimizer and gradient-management ops of a training graph (com.microsoft, opset 1), with the
// inputs, outputs and attributes onnxruntime-training gave them: SGDOptimizer, AdamOptimizer,
// LambOptimizer (variadic weight groups), InPlaceAccumulator, ZeroGradient, ReduceAllL2.
// Semantics: docs/architecture.md, "Training ops"; arithmetic: training/optimizer_math.h.
#include "ops/training_schema_utils.h"

namespace tob {

using namespace training_schema;

namespace {

// A one-element tensor of one of `allowed` dtypes (a learning rate, a step count, a signal).
Status CheckScalarInput(const InferenceContext& ctx, int i, const char* name, std::initializer_list<DType> allowed) {
  const ValueType* t = ctx.input_type(i);
  if (t == nullptr) return Status::OK();
  bool ok = false;
  std::string names;
  for (DType d : allowed) {
    ok = ok || t->dtype == d;
    names += (names.empty() ? "" : " or ") + std::string(DTypeName(d));
  }
  if (!ok) return ctx.Fail("input ", i, " (", name, ") must be ", names, ", got ", t->ToString());
  if (t->has_rank())
    for (const Dim& d : *t->shape)
      if (d.is_known() && d.value != 1)
        return ctx.Fail("input ", i, " (", name, ") must hold one value, got ", t->ToString());
  return Status::OK();
}

// Input i has `like`'s shape (known dims equal) and a float dtype.
Status CheckLike(const InferenceContext& ctx, int i, const char* name, int like, const char* like_name) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, i, name));
  const ValueType* t = ctx.input_type(i);
  const ValueType* l = ctx.input_type(like);
  if (t == nullptr || l == nullptr || !t->has_rank() || !l->has_rank()) return Status::OK();
  bool same = t->rank() == l->rank();
  for (int64_t d = 0; same && d < t->rank(); ++d)
    same = !((*t->shape)[d].is_known() && (*l->shape)[d].is_known() && (*t->shape)[d].value != (*l->shape)[d].value);
  if (!same)
    return ctx.Fail("input ", i, " (", name, ") ", t->ToString(), " must have the shape of ", like_name, " ",
                    l->ToString());
  return Status::OK();
}

Status CheckMixedPrecision(const InferenceContext& ctx, int i, int weights) {
  const ValueType* t = ctx.input_type(i);
  if (t == nullptr) return Status::OK();
  if (t->dtype != DType::kFloat16 && t->dtype != DType::kBFloat16)
    return ctx.Fail("input ", i, " (mixed_precision_weights) must be float16 or bfloat16, got ", t->ToString());
  return CheckLike(ctx, i, "mixed_precision_weights", weights, "weights");
}

// Output o takes input i's type. When input i is omitted, output o is not computed: an error
// when something reads it, else it gets `placeholder`'s type (never allocated: the kernels skip
// unread outputs).
Status OutputLike(InferenceContext& ctx, int o, int i, const char* what, int placeholder = -1) {
  if (o >= ctx.num_outputs()) return Status::OK();
  if (const ValueType* t = ctx.input_type(i); t != nullptr) {
    ctx.set_output(o, *t);
    return Status::OK();
  }
  const Value* v = ctx.node().output(o);
  if (!v->uses().empty() || v->is_graph_output() || ctx.input_type(placeholder) == nullptr)
    return ctx.Fail("output ", o, " (", what, ") needs input ", i, ", which is omitted");
  ctx.set_output(o, *ctx.input_type(placeholder));
  return Status::OK();
}

// SGDOptimizer (ETA, W, G) -> (NW?, NG?)
Status InferSgd(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 0, "ETA", {DType::kFloat32}));
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 1, "W"));
  TOB_ASSIGN_OR_RETURN(std::optional<Dims> shape, SameShape(ctx, 1, 2));
  for (int o = 0; o < ctx.num_outputs(); ++o) ctx.set_output(o, ValueType(ctx.input_type(1)->dtype, shape));
  return Status::OK();
}

// AdamOptimizer (R, T, weights, gradients, moment_1, moment_2, mixed_precision_weights?,
// loss_scale?, global_gradient_norm?, update_signal?) -> (new_T, new_moment_1, new_moment_2,
// new_weights?, new_gradients?, new_mixed_precision_weights?)
Status InferAdam(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 0, "R", {DType::kFloat32}));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 1, "T", {DType::kInt64}));
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 2, "weights"));
  TOB_RETURN_IF_ERROR(CheckLike(ctx, 3, "gradients", 2, "weights"));
  TOB_RETURN_IF_ERROR(CheckLike(ctx, 4, "moment_1", 2, "weights"));
  TOB_RETURN_IF_ERROR(CheckLike(ctx, 5, "moment_2", 2, "weights"));
  TOB_RETURN_IF_ERROR(CheckMixedPrecision(ctx, 6, 2));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 7, "loss_scale", {DType::kFloat32}));
  TOB_RETURN_IF_ERROR(
      CheckScalarInput(ctx, 8, "global_gradient_norm", {DType::kFloat32, DType::kFloat16, DType::kBFloat16}));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 9, "update_signal", {DType::kBool}));
  TOB_RETURN_IF_ERROR(OutputLike(ctx, 0, 1, "new_T"));
  TOB_RETURN_IF_ERROR(OutputLike(ctx, 1, 4, "new_moment_1"));
  TOB_RETURN_IF_ERROR(OutputLike(ctx, 2, 5, "new_moment_2"));
  TOB_RETURN_IF_ERROR(OutputLike(ctx, 3, 2, "new_weights"));
  TOB_RETURN_IF_ERROR(OutputLike(ctx, 4, 3, "new_gradients"));
  return OutputLike(ctx, 5, 6, "new_mixed_precision_weights", 2);
}

// LambOptimizer (update_signal?, loss_scale?, gradient_norm?, R, step?, then per weight group
// weights, gradients, moment1, moment2, mixed_precision_weights?) -> (new_step?, then per group
// new_weights?, new_gradients?, new_moment_1, new_moment_2, new_mixed_precision_weights?).
// The last group may leave its optional last input / output off.
Status InferLamb(InferenceContext& ctx) {
  if (ctx.num_inputs() < 9 || ctx.num_outputs() < 5)
    return ctx.Fail(
        "expects 5 + 5 k inputs and 1 + 5 k outputs for k >= 1 weight groups (the last mixed-precision "
        "input and output may be left off), got ",
        ctx.num_inputs(), " inputs and ", ctx.num_outputs(), " outputs");
  const int groups = (ctx.num_inputs() - 5 + 4) / 5;
  if ((ctx.num_outputs() - 1 + 4) / 5 != groups)
    return ctx.Fail("has ", groups, " weight groups (5 + 5 k inputs) but ", ctx.num_outputs(),
                    " outputs; expected 1 + 5 k (the last mixed-precision output may be left off)");
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 0, "update_signal", {DType::kBool}));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 1, "loss_scale", {DType::kFloat32}));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 2, "gradient_norm", {DType::kFloat32, DType::kFloat16, DType::kBFloat16}));
  if (!ctx.has_input(3)) return ctx.Fail("input 3 (R, the learning rate) is required");
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 3, "R", {DType::kFloat32}));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 4, "step", {DType::kInt64}));
  if (ctx.has_input(4)) {
    TOB_RETURN_IF_ERROR(OutputLike(ctx, 0, 4, "new_step"));
  } else if (const Value* v = ctx.node().output(0); !v->uses().empty() || v->is_graph_output()) {
    return ctx.Fail("output 0 (new_step) is read but input 4 (step) is omitted");
  }
  for (int k = 0; k < groups; ++k) {
    const int in = 5 + 5 * k, out = 1 + 5 * k;
    const char* names[] = {"weights", "gradients", "moment1", "moment2"};
    for (int j = 0; j < 4; ++j)
      if (!ctx.has_input(in + j))
        return ctx.Fail("weight group ", k, ": input ", in + j, " (", names[j], ") is required");
    TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, in, "weights"));
    for (int j = 1; j < 4; ++j) TOB_RETURN_IF_ERROR(CheckLike(ctx, in + j, names[j], in, "weights"));
    TOB_RETURN_IF_ERROR(CheckMixedPrecision(ctx, in + 4, in));
    const char* out_names[] = {"new_weights", "new_gradients", "new_moment_1", "new_moment_2",
                               "new_mixed_precision_weights"};
    for (int j = 0; j < 5; ++j) TOB_RETURN_IF_ERROR(OutputLike(ctx, out + j, in + j, out_names[j], in));
  }
  return Status::OK();
}

// InPlaceAccumulator (old_sum, value, update_signal?) -> new_sum
Status InferAccumulator(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "old_sum"));
  TOB_RETURN_IF_ERROR(CheckLike(ctx, 1, "value", 0, "old_sum"));
  TOB_RETURN_IF_ERROR(CheckScalarInput(ctx, 2, "update_signal", {DType::kBool}));
  return PropagateType(ctx, 0, 0);
}

// ZeroGradient (old_gradient, reset_signal) -> zeros of old_gradient's type. reset_signal is
// only read for ordering (it makes the reset wait for the value it names).
Status InferZeroGradient(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "old_gradient"));
  return PropagateType(ctx, 0, 0);
}

// ReduceAllL2 (X...) -> Y, the L2 norm of all inputs together, a scalar. Its dtype is the one
// the model declares for Y; undeclared, float32 (float64 for float64 inputs).
Status InferReduceAllL2(InferenceContext& ctx) {
  DType in = DType::kUndefined;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) return ctx.Fail("input ", i, " is omitted; every input is a tensor to reduce");
    TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, i, "X"));
    const DType d = ctx.input_type(i)->dtype;
    if (in != DType::kUndefined && d != in)
      return ctx.Fail("inputs must share one dtype, got ", DTypeName(in), " and ", DTypeName(d), " (input ", i, ")");
    in = d;
  }
  DType out = ctx.node().output(0)->type().dtype;
  if (out == DType::kUndefined) out = in == DType::kFloat64 ? DType::kFloat64 : DType::kFloat32;
  if (!IsFloatingPoint(out)) return ctx.Fail("output Y must be a float type, got ", DTypeName(out));
  ctx.set_output(0, ValueType(out, Dims{}));
  return Status::OK();
}

}  // namespace

void RegisterTrainingOptimizerSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{kMicrosoftDomain, "SGDOptimizer", 3, 3, 1, 2, InferSgd});
  registry.Register(OpSchema{kMicrosoftDomain, "AdamOptimizer", 6, 10, 3, 6, InferAdam});
  // Its leading inputs are optional: InferLamb checks the counts (9 inputs and 5 outputs at least).
  registry.Register(OpSchema{kMicrosoftDomain, "LambOptimizer", 0, INT_MAX, 0, INT_MAX, InferLamb});
  registry.Register(OpSchema{kMicrosoftDomain, "InPlaceAccumulator", 2, 3, 1, 1, InferAccumulator});
  registry.Register(OpSchema{kMicrosoftDomain, "ZeroGradient", 2, 2, 1, 1, InferZeroGradient});
  registry.Register(OpSchema{kMicrosoftDomain, "ReduceAllL2", 1, INT_MAX, 1, 1, InferReduceAllL2});
}

}  // namespace tob
