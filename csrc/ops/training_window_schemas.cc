// Gradients of the sliding-window ops: com.microsoft::ConvGrad and MaxPoolGrad.
#include "ops/nn_window_attributes.h"
#include "ops/training_schema_utils.h"

namespace tob {

using namespace training_schema;

namespace {

// dims a and b (same rank) must agree where both are known.
bool Compatible(const Dims& a, const Dims& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].is_known() && b[i].is_known() && a[i].value != b[i].value) return false;
  return true;
}

// ConvGrad (dY, X, W; Conv's attributes) -> dX, dW, dB.
Status InferConvGrad(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "dY"));
  const ValueType& dy = *ctx.input_type(0);
  const ValueType& x = *ctx.input_type(1);
  const ValueType& w = *ctx.input_type(2);
  if (x.dtype != dy.dtype || w.dtype != dy.dtype)
    return ctx.Fail("dY, X and W must have one dtype, got ", DTypeName(dy.dtype), ", ", DTypeName(x.dtype), " and ",
                    DTypeName(w.dtype));
  TOB_ASSIGN_OR_RETURN(WindowAttributes attrs, WindowAttributes::Read(ctx.node()));
  if (x.has_rank() && x.rank() < 3) return ctx.Fail("X must be [N, C, D1, ...], got ", x.ToString());
  if (x.has_rank() && w.has_rank() && w.rank() != x.rank())
    return ctx.Fail("W ", w.ToString(), " must have the rank of X ", x.ToString());
  if (x.has_rank() && dy.has_rank() && dy.rank() != x.rank())
    return ctx.Fail("dY ", dy.ToString(), " must have the rank of X ", x.ToString());
  if (x.has_rank() && w.has_rank()) {
    const Dim& c = (*x.shape)[1];
    const Dim& wc = (*w.shape)[1];
    const Dim& m = (*w.shape)[0];
    if (c.is_known() && wc.is_known() && wc.value * attrs.group != c.value)
      return ctx.Fail("X has ", c.value, " channels but W ", w.ToString(), " expects ", wc.value * attrs.group,
                      " (group = ", attrs.group, ")");
    if (m.is_known() && m.value % attrs.group != 0)
      return ctx.Fail("W output channels (", m.value, ") are not divisible by group (", attrs.group, ")");
    std::vector<int64_t> kernel;
    for (size_t i = 2; i < w.shape->size(); ++i) kernel.push_back((*w.shape)[i].is_known() ? (*w.shape)[i].value : -1);
    TOB_ASSIGN_OR_RETURN(WindowAttributes resolved, attrs.Resolve(ctx.node(), x.rank() - 2, kernel));
    if (dy.has_rank()) {
      Dims expected{(*x.shape)[0], m};
      for (size_t i = 0; i + 2 < x.shape->size(); ++i) {
        const Dim& in = (*x.shape)[i + 2];
        if (!in.is_known() || resolved.kernel_shape[i] < 0) {
          expected.push_back(Dim::Unknown());
          continue;
        }
        TOB_ASSIGN_OR_RETURN(WindowDim d, SlidingWindowDim(ctx.node(), resolved, i, in.value));
        expected.push_back(Dim(d.out));
      }
      if (!Compatible(expected, *dy.shape))
        return ctx.Fail("dY ", dy.ToString(), " is not the Conv output shape ", DimsToString(expected));
    }
  }
  ctx.set_output(0, x);
  if (ctx.num_outputs() > 1) ctx.set_output(1, w);
  if (ctx.num_outputs() > 2)
    ctx.set_output(2, ValueType(dy.dtype, w.has_rank() ? std::optional<Dims>(Dims{(*w.shape)[0]}) : std::nullopt));
  return Status::OK();
}

// MaxPoolGrad (dY, Indices, X) -> dX of X's shape; X is read for its shape only.
Status InferMaxPoolGrad(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(CheckFloatInput(ctx, 0, "dY"));
  const ValueType& dy = *ctx.input_type(0);
  const ValueType& idx = *ctx.input_type(1);
  const ValueType& x = *ctx.input_type(2);
  if (idx.dtype != DType::kInt64) return ctx.Fail("Indices must be int64, got ", DTypeName(idx.dtype));
  if (dy.has_rank() && idx.has_rank() && !Compatible(*dy.shape, *idx.shape))
    return ctx.Fail("Indices ", idx.ToString(), " must have dY's shape ", dy.ToString());
  if (x.has_rank() && x.rank() < 3) return ctx.Fail("X must be [N, C, D1, ...], got ", x.ToString());
  if (x.has_rank() && dy.has_rank()) {
    if (dy.rank() != x.rank()) return ctx.Fail("dY ", dy.ToString(), " must have the rank of X ", x.ToString());
    if (!Compatible(Dims(dy.shape->begin(), dy.shape->begin() + 2), Dims(x.shape->begin(), x.shape->begin() + 2)))
      return ctx.Fail("dY ", dy.ToString(), " and X ", x.ToString(), " must share N and C");
  }
  ctx.set_output(0, ValueType(dy.dtype, x.shape));
  return Status::OK();
}

}  // namespace

void RegisterTrainingWindowSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{kMicrosoftDomain, "ConvGrad", 3, 3, 1, 3, InferConvGrad});
  registry.Register(OpSchema{kMicrosoftDomain, "MaxPoolGrad", 3, 3, 1, 1, InferMaxPoolGrad});
}

}  // namespace tob
