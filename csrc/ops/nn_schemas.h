// The Nn schema family, split by op group; RegisterNnSchemas (nn_schemas.cc) calls each.
#pragma once

#include "ops/op_schema.h"

namespace tob {

void RegisterNnMatMulSchemas(OpSchemaRegistry& registry);     // nn_matmul_schemas.cc
void RegisterNnWindowSchemas(OpSchemaRegistry& registry);     // nn_window_schemas.cc
void RegisterNnNormalizationSchemas(OpSchemaRegistry& registry);  // nn_normalization_schemas.cc

}  // namespace tob
