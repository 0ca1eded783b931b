#include "ops/op_schema.h"

namespace tob {

void RegisterReductionSchemas(OpSchemaRegistry& registry) { (void)registry; }

}  // namespace tob
