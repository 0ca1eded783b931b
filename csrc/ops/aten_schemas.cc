// Schema of com.microsoft ATen: one torch operator (attributes `operator`, `overload_name`,
// `tensor_list_lengths`; the node contract is in docs/architecture.md, "ATen nodes"), run by the
// torch execution provider. The engine cannot know what an arbitrary torch op returns, so the
// output types are the ones the model declares (the exporter writes them to value_info or the
// graph outputs), possibly with symbolic dims, and unknown otherwise. The executor runs the
// ATen kernel as one that allocates its own outputs, so it never needs concrete shapes here.
#include "ops/op_schema.h"

namespace tob {

namespace {

Status InferAten(InferenceContext& ctx) {
  const Node& node = ctx.node();
  const Attribute* op = node.FindAttribute("operator");
  if (op == nullptr || op->type != AttrType::kString || op->s.empty())
    return ctx.Fail(
        "needs a non-empty string attribute 'operator' naming the torch operator "
        "(e.g. \"native_layer_norm\" or \"prims::iota\")");
  std::string overload;
  TOB_RETURN_IF_ERROR(node.GetAttr("overload_name", &overload, std::string()));
  std::vector<int64_t> lengths;
  TOB_RETURN_IF_ERROR(node.GetAttr("tensor_list_lengths", &lengths, std::vector<int64_t>{}));
  int64_t listed = 0;
  for (int64_t n : lengths) {
    if (n < 0) return ctx.Fail("tensor_list_lengths holds a negative length ", n);
    listed += n;
  }
  if (listed > ctx.num_inputs())
    return ctx.Fail("tensor_list_lengths places ", listed, " inputs in tensor lists but the node has only ",
                    ctx.num_inputs(), " inputs");
  for (int j = 0; j < ctx.num_outputs(); ++j) ctx.set_output(j, node.output(j)->type());
  return Status::OK();
}

}  // namespace

void RegisterAtenSchemas(OpSchemaRegistry& registry) {
  OpSchema s;
  s.domain = kMicrosoftDomain;
  s.op_type = "ATen";
  s.min_inputs = 0;
  s.min_outputs = 0;
  s.max_outputs = INT_MAX;
  s.infer = InferAten;
  // An ATen node runs any torch operator (aten::bernoulli, aten::rand...): assume the worst.
  s.nondeterministic = AlwaysNondeterministic;
  registry.Register(std::move(s));
}

}  // namespace tob
