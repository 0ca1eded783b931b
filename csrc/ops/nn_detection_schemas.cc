// Object-detection ops: NonMaxSuppression. Its output row count depends on the data (the kernel
// allocates it), so the shape function gives [unknown, 3].
#include "ops/op_schema.h"

namespace tob {

namespace {

Status InferNonMaxSuppression(InferenceContext& ctx) {
  const ValueType& boxes = *ctx.input_type(0);
  const ValueType& scores = *ctx.input_type(1);
  if (boxes.has_rank() && (boxes.rank() != 3 || ((*boxes.shape)[2].is_known() && (*boxes.shape)[2].value != 4)))
    return ctx.Fail("boxes must be [num_batches, spatial_dimension, 4], got ", boxes.ToString());
  if (scores.has_rank() && scores.rank() != 3)
    return ctx.Fail("scores must be [num_batches, num_classes, spatial_dimension], got ", scores.ToString());
  if (boxes.has_rank() && scores.has_rank()) {
    const Dim &nb = (*boxes.shape)[0], &ns = (*scores.shape)[0];
    const Dim &bb = (*boxes.shape)[1], &sb = (*scores.shape)[2];
    if (nb.is_known() && ns.is_known() && nb.value != ns.value)
      return ctx.Fail("boxes has ", nb.value, " batches but scores has ", ns.value);
    if (bb.is_known() && sb.is_known() && bb.value != sb.value)
      return ctx.Fail("boxes has ", bb.value, " boxes per batch but scores has ", sb.value);
  }
  for (int i : {2, 3, 4}) {
    const ValueType* t = ctx.input_type(i);
    if (t != nullptr && t->has_rank() && t->rank() > 1)
      return ctx.Fail("input ", i, " must be a scalar or a 1-element tensor, got ", t->ToString());
  }
  ctx.set_output(0, ValueType(DType::kInt64, Dims{Dim::Unknown(), Dim(3)}));
  return Status::OK();
}

}  // namespace

void RegisterNnDetectionSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "NonMaxSuppression", 2, 5, 1, 1, InferNonMaxSuppression});
}

}  // namespace tob
