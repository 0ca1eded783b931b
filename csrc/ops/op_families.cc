// Declares and calls every function of the schema list (op_families.inc).
#include "ops/op_schema.h"

namespace tob {

#define TOB_SCHEMAS(family, function) void function(OpSchemaRegistry& registry);
#include "ops/op_families.inc"
#undef TOB_SCHEMAS

void RegisterAllOpSchemas(OpSchemaRegistry& registry) {
#define TOB_SCHEMAS(family, function) \
  registry.BeginFamily(#family);      \
  function(registry);
#include "ops/op_families.inc"
#undef TOB_SCHEMAS
  registry.BeginFamily("");
}

}  // namespace tob
