#include "ops/op_schema.h"

namespace tob {

void RegisterElementwiseSchemas(OpSchemaRegistry& registry) { (void)registry; }

}  // namespace tob
