#include "ops/op_schema.h"

namespace tob {

void RegisterTensorSchemas(OpSchemaRegistry& registry) { (void)registry; }

}  // namespace tob
