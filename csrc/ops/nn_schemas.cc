#include "ops/nn_schemas.h"

namespace tob {

void RegisterNnSchemas(OpSchemaRegistry& registry) {
  RegisterNnMatMulSchemas(registry);
  RegisterNnWindowSchemas(registry);
  RegisterNnNormalizationSchemas(registry);
}

}  // namespace tob
