// The helpers the shape functions of the training schema files share.
#pragma once

#include <optional>

#include "ops/op_schema.h"

namespace tob::training_schema {

// Inputs a and b must have one dtype and compatible shapes (same rank, equal known dims).
// Returns the merged shape (known dims preferred), nullopt when neither rank is known.
StatusOr<std::optional<Dims>> SameShape(const InferenceContext& ctx, int a, int b);

// Input i must be float16/bfloat16/float32/float64.
Status CheckFloatInput(const InferenceContext& ctx, int i, const char* name);

}  // namespace tob::training_schema
