// The ONNX standard's optimizers, domain ai.onnx.preview.training (opset 1): Adagrad, Adam and
// Momentum. Inputs R (learning rate, a scalar), T (int64 step count, a scalar), then n tensors to
// optimize, their n gradients and their n states per kind (Adagrad: H; Momentum: V; Adam: V, H).
// Outputs: the n new tensors, then the n new states of each kind, each the shape of its tensor.
// (Gradient, the preview domain's symbolic differentiation op, is not supported:
// docs/conformance.md says why.)
#include "ops/op_schema.h"

namespace tob {

namespace {

// Per optimized tensor: the tensor, its gradient and `states` state tensors as inputs; the new
// tensor and the new states as outputs.
Status InferPreviewOptimizer(InferenceContext& ctx, int states) {
  const int per = 2 + states;
  const int groups = (ctx.num_inputs() - 2) / per;
  if (ctx.num_inputs() < 2 + per || (ctx.num_inputs() - 2) % per != 0)
    return ctx.Fail("expects R, T and ", per, " inputs per optimized tensor (the tensors, their gradients and ", states,
                    " state(s) each), got ", ctx.num_inputs(), " inputs");
  if (ctx.num_outputs() != (1 + states) * groups)
    return ctx.Fail("expects ", (1 + states) * groups, " outputs for ", groups, " optimized tensors, got ",
                    ctx.num_outputs());
  for (int i : {0, 1}) {
    const ValueType& t = *ctx.input_type(i);
    if (t.has_rank() && t.rank() > 1) return ctx.Fail(i == 0 ? "R" : "T", " must be a scalar, got ", t.ToString());
  }
  if (!IsFloatingPoint(ctx.input_type(0)->dtype)) return ctx.Fail("R must be float or double");
  if (ctx.input_type(1)->dtype != DType::kInt64) return ctx.Fail("T must be int64");
  for (int g = 0; g < groups; ++g) {
    const ValueType& x = *ctx.input_type(2 + g);
    for (int k = 1; k < per; ++k) {
      const ValueType& t = *ctx.input_type(2 + k * groups + g);
      if (t.dtype != x.dtype)
        return ctx.Fail("input ", 2 + k * groups + g, " has dtype ", DTypeName(t.dtype), ", expected ",
                        DTypeName(x.dtype), " (its tensor's)");
      if (t.has_rank() && x.has_rank()) {
        bool same = t.rank() == x.rank();
        for (int64_t d = 0; same && d < x.rank(); ++d) {
          const Dim &a = (*t.shape)[d], &b = (*x.shape)[d];
          same = !a.is_known() || !b.is_known() || a.value == b.value;
        }
        if (!same)
          return ctx.Fail("input ", 2 + k * groups + g, " ", t.ToString(), " must have the shape of its tensor ",
                          x.ToString());
      }
    }
    for (int k = 0; k <= states; ++k) ctx.set_output(k * groups + g, x);
  }
  return Status::OK();
}

}  // namespace

void RegisterTrainingPreviewSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{kPreviewTrainingDomain, "Adagrad", 5, INT_MAX, 2, INT_MAX,
                             [](InferenceContext& c) { return InferPreviewOptimizer(c, 1); }});
  registry.Register(OpSchema{kPreviewTrainingDomain, "Momentum", 5, INT_MAX, 2, INT_MAX,
                             [](InferenceContext& c) { return InferPreviewOptimizer(c, 1); }});
  registry.Register(OpSchema{kPreviewTrainingDomain, "Adam", 6, INT_MAX, 3, INT_MAX,
                             [](InferenceContext& c) { return InferPreviewOptimizer(c, 2); }});
}

}  // namespace tob
