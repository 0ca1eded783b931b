#include "ops/op_schema.h"

namespace tob {

void RegisterRuntimeSchemas(OpSchemaRegistry& registry) { (void)registry; }

}  // namespace tob
