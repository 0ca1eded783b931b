// The Training schema family (gradient and loss ops, mostly com.microsoft as onnxruntime-training
// defines them), split by op group; RegisterTrainingSchemas (training_schemas.cc) calls each.
#pragma once

#include "ops/op_schema.h"

namespace tob {

void RegisterTrainingGradSchemas(OpSchemaRegistry& registry);    // training_schemas.cc
void RegisterTrainingLossSchemas(OpSchemaRegistry& registry);    // training_loss_schemas.cc
void RegisterTrainingWindowSchemas(OpSchemaRegistry& registry);  // training_window_schemas.cc
void RegisterTrainingOptimizerSchemas(OpSchemaRegistry& registry);  // training_optimizer_schemas.cc

namespace training_schema {

inline constexpr const char* kMsDomain = "com.microsoft";

// Inputs a and b must have one dtype and compatible shapes (same rank, equal known dims).
// Returns the merged shape (known dims preferred), nullopt when neither rank is known.
StatusOr<std::optional<Dims>> SameShape(const InferenceContext& ctx, int a, int b);

// Input i must be float16/bfloat16/float32/float64.
Status CheckFloatInput(const InferenceContext& ctx, int i, const char* name);

}  // namespace training_schema

}  // namespace tob
