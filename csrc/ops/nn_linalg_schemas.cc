// Linear algebra beyond MatMul/Gemm: Einsum (12) and Det (11, 22).
#include "ops/nn_einsum_equation.h"
#include "ops/op_schema.h"

namespace tob {

namespace {

Status InferEinsum(InferenceContext& ctx) {
  std::string equation;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("equation", &equation));
  std::vector<int64_t> ranks;
  std::vector<std::vector<int64_t>> shapes;
  const DType dtype = ctx.input_type(0)->dtype;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const ValueType* t = ctx.input_type(i);
    if (t == nullptr) return ctx.Fail("input ", i, " is missing");
    if (t->dtype != dtype) return ctx.Fail("all inputs must have one dtype, input ", i, " is ", DTypeName(t->dtype));
    if (!t->has_rank()) {
      ctx.set_output(0, ValueType(dtype, std::nullopt));
      // The equation is still checked once the ranks are known (at run time at the latest).
      return Status::OK();
    }
    ranks.push_back(t->rank());
    std::vector<int64_t>& dims = shapes.emplace_back();
    for (const Dim& d : *t->shape) dims.push_back(d.is_known() ? d.value : -1);
  }
  TOB_ASSIGN_OR_RETURN(EinsumEquation e, EinsumEquation::Parse(ctx.node(), equation, ranks));
  TOB_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, e.LabelSizes(ctx.node(), shapes));
  Dims out;
  for (int id : e.output) out.push_back(sizes[id] >= 0 ? Dim(sizes[id]) : Dim::Unknown());
  ctx.set_output(0, ValueType(dtype, out));
  return Status::OK();
}

// Det: [*, M, M] -> [*].
Status InferDet(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ValueType(x.dtype, std::nullopt));
    return Status::OK();
  }
  if (x.rank() < 2) return ctx.Fail("input must be [*, M, M], got ", x.ToString());
  const Dims& d = *x.shape;
  const Dim &m = d[d.size() - 2], &n = d[d.size() - 1];
  if (m.is_known() && n.is_known() && m.value != n.value)
    return ctx.Fail("input must hold square matrices [*, M, M], got ", x.ToString());
  ctx.set_output(0, ValueType(x.dtype, Dims(d.begin(), d.end() - 2)));
  return Status::OK();
}

}  // namespace

void RegisterNnLinalgSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "Einsum", 1, INT_MAX, 1, 1, InferEinsum});
  registry.Register(OpSchema{"", "Det", 1, 1, 1, 1, InferDet});
}

}  // namespace tob
