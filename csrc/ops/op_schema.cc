#include "ops/op_schema.h"

#include <mutex>

namespace tob {

OpSchemaRegistry& OpSchemaRegistry::Global() {
  static OpSchemaRegistry* registry = [] {
    auto* r = new OpSchemaRegistry();
    RegisterAllOpSchemas(*r);
    return r;
  }();
  return *registry;
}

void OpSchemaRegistry::Register(OpSchema schema) {
  auto key = std::make_pair(Graph::NormalizeDomain(schema.domain), schema.op_type);
  TOB_ENFORCE(schemas_.count(key) == 0, "schema registered twice: ", schema.op_type);
  if (schema.family.empty()) schema.family = family_;
  schemas_[key] = std::move(schema);
}

const OpSchema* OpSchemaRegistry::Find(const std::string& domain, const std::string& op_type) const {
  auto it = schemas_.find({Graph::NormalizeDomain(domain), op_type});
  return it == schemas_.end() ? nullptr : &it->second;
}

std::vector<const OpSchema*> OpSchemaRegistry::All() const {
  std::vector<const OpSchema*> r;
  for (const auto& [k, s] : schemas_) r.push_back(&s);
  return r;
}

Status OpSchemaRegistry::Infer(InferenceContext& ctx) const {
  const Node& node = ctx.node();
  const OpSchema* schema = Find(node.domain(), node.op_type());
  if (schema == nullptr)
    return NotImplemented(node.Describe(), ": no schema for op '", node.op_type(), "' in domain '",
                          node.domain().empty() ? "ai.onnx" : node.domain(), "' (opset ", ctx.opset(), ")");
  int n_in = static_cast<int>(node.inputs().size());
  int n_out = static_cast<int>(node.outputs().size());
  if (n_in < schema->min_inputs || n_in > schema->max_inputs)
    return ctx.Fail("expects ", schema->min_inputs, "..",
                    schema->max_inputs == INT_MAX ? std::string("n") : std::to_string(schema->max_inputs),
                    " inputs, got ", n_in);
  if (n_out < schema->min_outputs || n_out > schema->max_outputs)
    return ctx.Fail("expects ", schema->min_outputs, "..", schema->max_outputs, " outputs, got ", n_out);
  for (int i = 0; i < schema->min_inputs && i < n_in; ++i)
    if (!ctx.has_input(i)) return ctx.Fail("required input ", i, " is missing");
  if (!schema->non_tensor_values)
    for (int i = 0; i < n_in; ++i)
      if (ctx.has_input(i) && !ctx.input_type(i)->is_tensor())
        return ctx.Fail("input ", i, " '", node.inputs()[i]->name(), "' is a ", ctx.input_type(i)->KindName(), " (",
                        ctx.input_type(i)->ToString(), "); ", node.op_type(), " takes tensors");
  return schema->infer(ctx);
}

Status InferenceContext::InferSubgraph(const std::string& name, const std::vector<ValueType>& input_types,
                                       std::vector<ValueType>* output_types) const {
  Graph* sub = node_.subgraph(name);
  if (sub == nullptr) return Fail("required GRAPH attribute '", name, "' is missing");
  if (input_types.size() != sub->inputs().size())
    return Fail("subgraph '", name, "' takes ", sub->inputs().size(), " inputs, but ", node_.op_type(), " gives it ",
                input_types.size());
  if (subgraph_inference_ != nullptr) return subgraph_inference_->Infer(*sub, input_types, output_types);
  output_types->clear();
  for (const Value* out : sub->outputs()) output_types->push_back(out->type());
  return Status::OK();
}

Status NormalizeAxis(const InferenceContext& ctx, int64_t axis, int64_t rank, int64_t* out) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) return ctx.Fail("axis ", axis, " is out of range for rank ", rank);
  *out = a;
  return Status::OK();
}

StatusOr<Dims> BroadcastDims(const InferenceContext& ctx, const Dims& a, const Dims& b) {
  size_t rank = std::max(a.size(), b.size());
  Dims out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const Dim* da = i < rank - a.size() ? nullptr : &a[i - (rank - a.size())];
    const Dim* db = i < rank - b.size() ? nullptr : &b[i - (rank - b.size())];
    if (!da) {
      out[i] = *db;
      continue;
    }
    if (!db) {
      out[i] = *da;
      continue;
    }
    if (da->is_known() && db->is_known()) {
      if (da->value == db->value || db->value == 1) out[i] = *da;
      else if (da->value == 1) out[i] = *db;
      else
        return ctx.Fail("shapes ", DimsToString(a), " and ", DimsToString(b), " cannot be broadcast (dimension ", i,
                        ": ", da->value, " vs ", db->value, ")");
    } else if (da->is_known() && da->value == 1) {
      out[i] = *db;
    } else if (db->is_known() && db->value == 1) {
      out[i] = *da;
    } else if (*da == *db) {
      out[i] = *da;
    } else if (da->is_known()) {
      out[i] = *da;  // the symbol must equal it (or be 1) for the model to be valid
    } else if (db->is_known()) {
      out[i] = *db;
    } else {
      out[i] = Dim::Unknown();
    }
  }
  return out;
}

Status PropagateType(InferenceContext& ctx, int input_index, int output_index) {
  const ValueType* t = ctx.input_type(input_index);
  if (t == nullptr) return ctx.Fail("input ", input_index, " is missing");
  ctx.set_output(output_index, *t);
  return Status::OK();
}

}  // namespace tob
