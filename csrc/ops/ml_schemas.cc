// The ai.onnx.ml operators that need no strings: ArrayFeatureExtractor (1), Binarizer (1) and
// TreeEnsemble (5). (LabelEncoder and the other string-keyed ML ops are not here.)
#include "ops/op_schema.h"

namespace tob {

namespace {

// ArrayFeatureExtractor: X [..., F] and int64 indices -> [..., number of indices]; a 1-D X gives
// [1, number of indices] (onnxruntime's and onnx's reference's rule).
Status InferArrayFeatureExtractor(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  const ValueType& indices = *ctx.input_type(1);
  if (indices.dtype != DType::kInt64) return ctx.Fail("indices must be int64, got ", DTypeName(indices.dtype));
  if (x.has_rank() && x.rank() < 1) return ctx.Fail("X must have rank >= 1, got ", x.ToString());
  Dim count = Dim::Unknown();
  if (indices.has_rank()) {
    int64_t n = 1;
    for (const Dim& d : *indices.shape) n = d.is_known() && n >= 0 ? n * d.value : -1;
    if (n >= 0) count = Dim(n);
  }
  std::optional<Dims> out;
  if (x.has_rank()) {
    out = x.rank() == 1 ? Dims{Dim(1)} : Dims(x.shape->begin(), x.shape->end() - 1);
    out->push_back(count);
  }
  ctx.set_output(0, ValueType(x.dtype, out));
  return Status::OK();
}

Status InferBinarizer(InferenceContext& ctx) {
  ctx.set_output(0, *ctx.input_type(0));
  return Status::OK();
}

// TreeEnsemble: X [N, F] -> [N, n_targets] (the tree attributes are checked by the kernel).
Status InferTreeEnsemble(InferenceContext& ctx) {
  const ValueType& x = *ctx.input_type(0);
  int64_t targets = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("n_targets", &targets));
  if (targets <= 0) return ctx.Fail("attribute 'n_targets' must be positive, got ", targets);
  if (x.has_rank() && x.rank() != 2) return ctx.Fail("X must be [N, F], got ", x.ToString());
  ctx.set_output(0, ValueType(x.dtype, Dims{x.has_rank() ? (*x.shape)[0] : Dim::Unknown(), Dim(targets)}));
  return Status::OK();
}

}  // namespace

void RegisterMlSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{kMlDomain, "ArrayFeatureExtractor", 2, 2, 1, 1, InferArrayFeatureExtractor});
  registry.Register(OpSchema{kMlDomain, "Binarizer", 1, 1, 1, 1, InferBinarizer});
  registry.Register(OpSchema{kMlDomain, "TreeEnsemble", 1, 1, 1, 1, InferTreeEnsemble});
}

}  // namespace tob
