// PythonOp / PythonOpGrad (com.microsoft): torch.autograd.Functions, run only by the torch
// provider (providers/torch/python_op_kernel.cc); docs/architecture.md, "PythonOp nodes".
#include <string>

#include "ops/op_schema.h"

namespace tob {

namespace {

// Output types are what the model declares (a Function's outputs are known only to Python);
// PythonOp's first output is always the context, a 0-d int64.
Status InferPythonOp(InferenceContext& ctx) {
  const Attribute* name = ctx.node().FindAttribute("func_name");
  if (name == nullptr || name->type != AttrType::kString || name->s.empty())
    return ctx.Fail("needs a non-empty string attribute 'func_name' naming the torch.autograd.Function");
  for (int j = 0; j < ctx.num_outputs(); ++j) ctx.set_output(j, ctx.node().output(j)->type());
  if (ctx.node().op_type() == "PythonOp") ctx.set_output(0, ValueType{DType::kInt64, Dims{}});
  return Status::OK();
}

}  // namespace

void RegisterPythonOpSchemas(OpSchemaRegistry& registry) {
  for (const char* op_type : {"PythonOp", "PythonOpGrad"}) {
    OpSchema s;
    s.domain = kMicrosoftDomain;
    s.op_type = op_type;
    s.min_inputs = std::string(op_type) == "PythonOpGrad" ? 1 : 0;  // PythonOpGrad's context
    s.min_outputs = std::string(op_type) == "PythonOp" ? 1 : 0;     // PythonOp's context
    s.max_outputs = INT_MAX;
    s.infer = InferPythonOp;
    s.side_effects = true;  // a user's Python code
    registry.Register(std::move(s));
  }
}

}  // namespace tob
