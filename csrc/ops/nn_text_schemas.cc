// TfIdfVectorizer (ai.onnx 9): n-gram counts of integer or string sequences.
#include "ops/nn_tfidf_attributes.h"
#include "ops/op_schema.h"

namespace tob {
namespace {

// X [C] or [N, C] -> Y float32 [output_size] or [N, output_size].
Status InferTfIdfVectorizer(InferenceContext& ctx) {
  TOB_ASSIGN_OR_RETURN(TfIdfAttributes a, TfIdfAttributes::Read(ctx.node()));
  const ValueType& x = *ctx.input_type(0);
  // The pool's kind names X's: strings with pool_strings, integers with pool_int64s.
  if (a.string_pool && x.dtype != DType::kString)
    return ctx.Fail("X must be string with pool_strings, got ", DTypeName(x.dtype));
  if (!a.string_pool && x.dtype != DType::kInt32 && x.dtype != DType::kInt64)
    return ctx.Fail("X must be int32 or int64 with pool_int64s, got ", DTypeName(x.dtype));
  if (!x.has_rank()) {
    ctx.set_output(0, ValueType(DType::kFloat32, std::nullopt));
    return Status::OK();
  }
  if (x.rank() == 1) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims{Dim(a.output_size)}));
  } else if (x.rank() == 2) {
    ctx.set_output(0, ValueType(DType::kFloat32, Dims{(*x.shape)[0], Dim(a.output_size)}));
  } else {
    return ctx.Fail("X must be 1-D [C] or 2-D [N, C], got ", x.ToString());
  }
  return Status::OK();
}

}  // namespace

void RegisterNnTextSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "TfIdfVectorizer", 1, 1, 1, 1, InferTfIdfVectorizer});
}

}  // namespace tob
