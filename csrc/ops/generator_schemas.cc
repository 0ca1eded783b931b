#include "ops/op_schema.h"

namespace tob {

void RegisterGeneratorSchemas(OpSchemaRegistry& registry) { (void)registry; }

}  // namespace tob
