#include "ops/op_schema.h"

namespace tob {

void RegisterNnSchemas(OpSchemaRegistry& registry) { (void)registry; }

}  // namespace tob
