// Losses: the standard NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (ai.onnx 12+) and
// their gradients com.microsoft::NegativeLogLikelihoodLossGrad and SoftmaxCrossEntropyLossGrad.
#include "ops/training_schema_utils.h"

namespace tob {

using namespace training_schema;

namespace {

Status ReadReduction(const InferenceContext& ctx, std::string* reduction) {
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("reduction", reduction, std::string("mean")));
  if (*reduction != "none" && *reduction != "sum" && *reduction != "mean")
    return ctx.Fail("reduction must be 'none', 'sum' or 'mean', got '", *reduction, "'");
  return Status::OK();
}

// input [N, C, d1..dk], target [N, d1..dk] (int32/int64), weight [C]: checks what is known.
Status CheckLossOperands(const InferenceContext& ctx, int input, int target, int weight) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, input, "input"));
  const ValueType& x = *ctx.input_type(input);
  const ValueType& t = *ctx.input_type(target);
  if (t.dtype != DType::kInt32 && t.dtype != DType::kInt64)
    return ctx.Fail("target must be int32 or int64, got ", DTypeName(t.dtype));
  if (x.has_rank() && x.rank() < 2) return ctx.Fail("input must be [N, C, d1, ...], got ", x.ToString());
  if (x.has_rank() && t.has_rank()) {
    if (t.rank() != x.rank() - 1)
      return ctx.Fail("target ", t.ToString(), " must have rank ", x.rank() - 1, " for input ", x.ToString());
    for (int64_t i = 0; i < t.rank(); ++i) {
      const Dim& td = (*t.shape)[i];
      const Dim& xd = (*x.shape)[i == 0 ? 0 : i + 1];
      if (td.is_known() && xd.is_known() && td.value != xd.value)
        return ctx.Fail("target ", t.ToString(), " does not match input ", x.ToString(),
                        " ([N, d1, ...] of [N, C, d1, ...])");
    }
  }
  if (const ValueType* w = ctx.input_type(weight); w != nullptr) {
    if (w->dtype != x.dtype)
      return ctx.Fail("weight has dtype ", DTypeName(w->dtype), ", input has ", DTypeName(x.dtype));
    if (w->has_rank() && w->rank() != 1) return ctx.Fail("weight must be 1-D [C], got ", w->ToString());
    if (w->has_rank() && x.has_rank()) {
      const Dim& wc = (*w->shape)[0];
      const Dim& xc = (*x.shape)[1];
      if (wc.is_known() && xc.is_known() && wc.value != xc.value)
        return ctx.Fail("weight has ", wc.value, " values, input has ", xc.value, " classes");
    }
  }
  return Status::OK();
}

Status InferNllLoss(InferenceContext& ctx) {
  std::string reduction;
  TOB_RETURN_IF_ERROR(ReadReduction(ctx, &reduction));
  TOB_RETURN_IF_ERROR(CheckLossOperands(ctx, 0, 1, 2));
  const ValueType& x = *ctx.input_type(0);
  const ValueType& t = *ctx.input_type(1);
  std::optional<Dims> out = Dims{};
  if (reduction == "none") {
    if (t.has_rank()) {
      out = *t.shape;
    } else if (x.has_rank()) {
      Dims d{(*x.shape)[0]};
      d.insert(d.end(), x.shape->begin() + 2, x.shape->end());
      out = std::move(d);
    } else {
      out.reset();
    }
  }
  ctx.set_output(0, ValueType(x.dtype, std::move(out)));
  return Status::OK();
}

// (dY, X, target, weight?) -> dX of X's shape; X is read for its shape only.
Status InferNllLossGrad(InferenceContext& ctx) {
  std::string reduction;
  TOB_RETURN_IF_ERROR(ReadReduction(ctx, &reduction));
  TOB_RETURN_IF_ERROR(CheckLossOperands(ctx, 1, 2, 3));
  const ValueType& dy = *ctx.input_type(0);
  const ValueType& x = *ctx.input_type(1);
  if (dy.dtype != x.dtype) return ctx.Fail("dY has dtype ", DTypeName(dy.dtype), ", X has ", DTypeName(x.dtype));
  if (dy.has_rank()) {
    const ValueType& t = *ctx.input_type(2);
    if (reduction != "none" && dy.rank() != 0)
      return ctx.Fail("dY must be a scalar for reduction '", reduction, "', got ", dy.ToString());
    if (reduction == "none" && t.has_rank()) {
      bool ok = dy.rank() == t.rank();
      for (int64_t i = 0; ok && i < dy.rank(); ++i) {
        const Dim& a = (*dy.shape)[i];
        const Dim& b = (*t.shape)[i];
        ok = !(a.is_known() && b.is_known() && a.value != b.value);
      }
      if (!ok)
        return ctx.Fail("dY ", dy.ToString(), " must have the target's shape ", t.ToString(), " for reduction 'none'");
    }
  }
  ctx.set_output(0, x);
  return Status::OK();
}

// (scores, labels, weights?) -> (loss, log_prob?): the loss as NegativeLogLikelihoodLoss's, the
// log-probabilities of the scores' type and shape.
Status InferSoftmaxCrossEntropy(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(InferNllLoss(ctx));
  if (ctx.num_outputs() > 1) ctx.set_output(1, *ctx.input_type(0));
  return Status::OK();
}

}  // namespace

void RegisterTrainingLossSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "NegativeLogLikelihoodLoss", 2, 3, 1, 1, InferNllLoss});
  registry.Register(OpSchema{kMicrosoftDomain, "NegativeLogLikelihoodLossGrad", 3, 4, 1, 1, InferNllLossGrad});
  registry.Register(OpSchema{"", "SoftmaxCrossEntropyLoss", 2, 3, 1, 2, InferSoftmaxCrossEntropy});
  // (dY, log_prob, labels, weights?) -> d_logits: the same checks as NegativeLogLikelihoodLossGrad's.
  registry.Register(OpSchema{kMicrosoftDomain, "SoftmaxCrossEntropyLossGrad", 3, 4, 1, 1, InferNllLossGrad});
}

}  // namespace tob
