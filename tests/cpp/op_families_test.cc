// The one family vocabulary (ops/op_families.inc, providers/cpu/cpu_kernel_families.inc): every
// schema and every kernel belongs to a family, and an op's kernels are in its schema's family, so
// the file of each piece of an op follows from its family and name.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "framework/kernel_registry.h"
#include "ops/op_schema.h"

namespace tob {
namespace {

const std::set<std::string> kFamilies = {"elementwise", "tensor",      "nn",        "reduction", "signal",
                                         "runtime",     "controlflow", "generator", "aten",      "python",
                                         "training",    "string",      "sequence",  "ml"};

TEST(OpFamilies, EverySchemaHasAKnownFamily) {
  for (const OpSchema* schema : OpSchemaRegistry::Global().All())
    EXPECT_TRUE(kFamilies.count(schema->family)) << schema->op_type << ": family '" << schema->family << "'";
}

TEST(OpFamilies, EveryKernelIsInItsSchemasFamily) {
  int checked = 0;
  for (const KernelDef& def : KernelRegistry::Global().defs()) {
    EXPECT_TRUE(kFamilies.count(def.family)) << def.Describe() << ": family '" << def.family << "'";
    const OpSchema* schema = OpSchemaRegistry::Global().Find(def.domain, def.op_type);
    ASSERT_NE(schema, nullptr) << def.Describe() << " has no schema";
    EXPECT_EQ(def.family, schema->family) << def.Describe();
    ++checked;
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace tob
