#include "ops/op_schema.h"

namespace tob {

#define TOB_OP_FAMILY(name) void Register##name##Schemas(OpSchemaRegistry& registry);
#include "ops/op_families.inc"
#undef TOB_OP_FAMILY

void RegisterAllOpSchemas(OpSchemaRegistry& registry) {
#define TOB_OP_FAMILY(name) Register##name##Schemas(registry);
#include "ops/op_families.inc"
#undef TOB_OP_FAMILY
}

}  // namespace tob
