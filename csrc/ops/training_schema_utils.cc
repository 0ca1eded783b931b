#include "ops/training_schema_utils.h"

namespace tob::training_schema {

StatusOr<std::optional<Dims>> SameShape(const InferenceContext& ctx, int a, int b) {
  const ValueType& ta = *ctx.input_type(a);
  const ValueType& tb = *ctx.input_type(b);
  if (ta.dtype != tb.dtype)
    return ctx.Fail("inputs ", a, " and ", b, " must have one dtype, got ", DTypeName(ta.dtype), " and ",
                    DTypeName(tb.dtype));
  if (!ta.has_rank()) return tb.shape;
  if (!tb.has_rank()) return ta.shape;
  if (ta.rank() != tb.rank())
    return ctx.Fail("inputs ", a, " ", ta.ToString(), " and ", b, " ", tb.ToString(), " must have one shape");
  Dims merged = *ta.shape;
  for (size_t i = 0; i < merged.size(); ++i) {
    const Dim& db = (*tb.shape)[i];
    if (merged[i].is_known() && db.is_known() && merged[i].value != db.value)
      return ctx.Fail("inputs ", a, " ", ta.ToString(), " and ", b, " ", tb.ToString(), " must have one shape");
    if (!merged[i].is_known() && (db.is_known() || db.is_symbolic())) merged[i] = db;
  }
  return std::optional<Dims>(std::move(merged));
}

Status CheckFloatInput(const InferenceContext& ctx, int i, const char* name) {
  const ValueType* t = ctx.input_type(i);
  if (t != nullptr && !IsFloatingPoint(t->dtype))
    return ctx.Fail("input ", name, " must be a float tensor, got ", DTypeName(t->dtype));
  return Status::OK();
}

}  // namespace tob::training_schema
