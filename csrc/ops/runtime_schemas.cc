// Schemas of the runtime's own ops (domain com.microsoft): the copies the partitioner inserts
// where an edge crosses devices.
#include "ops/op_schema.h"

namespace tob {

void RegisterRuntimeSchemas(OpSchemaRegistry& registry) {
  for (const char* op : {"MemcpyFromHost", "MemcpyToHost"}) {
    OpSchema s;
    s.domain = kMicrosoftDomain;
    s.op_type = op;
    s.min_inputs = s.max_inputs = 1;
    s.min_outputs = s.max_outputs = 1;
    s.infer = [](InferenceContext& ctx) { return PropagateType(ctx); };
    registry.Register(std::move(s));
  }
}

}  // namespace tob
