// Shape-function building blocks shared by the elementwise schema files.
#pragma once

#include <optional>

#include "ops/op_schema.h"

namespace tob {

// Output 0: input 0's type and shape.
Status InferUnary(InferenceContext& ctx);
// Output 0: input 0's shape with element type `dtype`.
Status InferUnaryWithType(InferenceContext& ctx, DType dtype);
// Numpy broadcast of the shapes of every present input from `first` on; nullopt when some rank
// is unknown. InvalidModel when known dims conflict.
StatusOr<std::optional<Dims>> BroadcastAll(const InferenceContext& ctx, int first);
// Output 0: the broadcast of all inputs, typed `dtype` (input 0's type when nullopt). With
// same_type, every input must share input 0's type.
Status InferBroadcast(InferenceContext& ctx, std::optional<DType> dtype, bool same_type);

}  // namespace tob
