// Schemas of the string ops: StringNormalizer, StringConcat, StringSplit, RegexFullMatch and
// ai.onnx.ml's LabelEncoder (whose string forms are why it lives here).
#include "ops/op_schema.h"

namespace tob {

namespace {

constexpr const char* kOnnxMlDomain = "ai.onnx.ml";

Status RequireString(const InferenceContext& ctx, int i) {
  const DType t = ctx.input_type(i)->dtype;
  if (t != DType::kUndefined && t != DType::kString)
    return ctx.Fail("input ", i, " must be a string tensor, got ", DTypeName(t));
  return Status::OK();
}

// X is [C] or [1, C]; the output keeps that form with the count of what the stopwords leave.
Status InferStringNormalizer(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireString(ctx, 0));
  std::string action;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("case_change_action", &action, std::string("NONE")));
  if (action != "NONE" && action != "LOWER" && action != "UPPER")
    return ctx.Fail("case_change_action must be NONE, LOWER or UPPER, got '", action, "'");
  int64_t case_sensitive = 0;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("is_case_sensitive", &case_sensitive, int64_t{0}));
  std::vector<std::string> stopwords;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("stopwords", &stopwords, std::vector<std::string>{}));
  const ValueType& x = *ctx.input_type(0);
  std::optional<Dims> dims;
  if (x.shape) {
    if (x.rank() == 1) {
      dims = Dims{stopwords.empty() ? (*x.shape)[0] : Dim::Unknown()};
    } else if (x.rank() == 2 && !((*x.shape)[0].is_known() && (*x.shape)[0].value != 1)) {
      dims = Dims{Dim(1), stopwords.empty() ? (*x.shape)[1] : Dim::Unknown()};
    } else {
      return ctx.Fail("X must be [C] or [1, C], got ", DimsToString(*x.shape));
    }
  }
  ctx.set_output(0, ValueType(DType::kString, dims));
  return Status::OK();
}

Status InferStringConcat(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireString(ctx, 0));
  TOB_RETURN_IF_ERROR(RequireString(ctx, 1));
  const ValueType& a = *ctx.input_type(0);
  const ValueType& b = *ctx.input_type(1);
  std::optional<Dims> dims;
  if (a.shape && b.shape) {
    TOB_ASSIGN_OR_RETURN(dims, BroadcastDims(ctx, *a.shape, *b.shape));
  }
  ctx.set_output(0, ValueType(DType::kString, dims));
  return Status::OK();
}

// Y: X's shape and one more dim, the most substrings any element splits into; Z: the counts.
Status InferStringSplit(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireString(ctx, 0));
  int64_t maxsplit = 0;
  if (ctx.node().FindAttribute("maxsplit") != nullptr) {
    TOB_RETURN_IF_ERROR(ctx.node().GetAttr("maxsplit", &maxsplit));
    if (maxsplit < 0) return ctx.Fail("maxsplit must be >= 0, got ", maxsplit);
  }
  std::string delimiter;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("delimiter", &delimiter, std::string()));
  const ValueType& x = *ctx.input_type(0);
  std::optional<Dims> y_dims;
  if (x.shape) {
    y_dims = *x.shape;
    y_dims->push_back(Dim::Unknown());
  }
  ctx.set_output(0, ValueType(DType::kString, y_dims));
  if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(DType::kInt64, x.shape));
  return Status::OK();
}

Status InferRegexFullMatch(InferenceContext& ctx) {
  TOB_RETURN_IF_ERROR(RequireString(ctx, 0));
  std::string pattern;
  TOB_RETURN_IF_ERROR(ctx.node().GetAttr("pattern", &pattern));
  ctx.set_output(0, ValueType(DType::kBool, ctx.input_type(0)->shape));
  return Status::OK();
}

// The output type comes from whichever values_* attribute the node has.
Status InferLabelEncoder(InferenceContext& ctx) {
  const Node& node = ctx.node();
  DType out = DType::kUndefined;
  if (node.FindAttribute("values_strings") != nullptr) out = DType::kString;
  if (node.FindAttribute("values_int64s") != nullptr) out = DType::kInt64;
  if (node.FindAttribute("values_floats") != nullptr) out = DType::kFloat32;
  if (const Attribute* t = node.FindAttribute("values_tensor")) {
    if (t->type != AttrType::kTensor) return ctx.Fail("attribute 'values_tensor' must be a tensor");
    out = t->t.dtype();
  }
  if (out == DType::kUndefined)
    return ctx.Fail("needs one of values_strings, values_int64s, values_floats or values_tensor");
  ctx.set_output(0, ValueType(out, ctx.input_type(0)->shape));
  return Status::OK();
}

}  // namespace

void RegisterStringSchemas(OpSchemaRegistry& registry) {
  registry.Register(OpSchema{"", "StringNormalizer", 1, 1, 1, 1, InferStringNormalizer});
  registry.Register(OpSchema{"", "StringConcat", 2, 2, 1, 1, InferStringConcat});
  registry.Register(OpSchema{"", "StringSplit", 1, 1, 1, 2, InferStringSplit});
  registry.Register(OpSchema{"", "RegexFullMatch", 1, 1, 1, 1, InferRegexFullMatch});
  registry.Register(OpSchema{kOnnxMlDomain, "LabelEncoder", 1, 1, 1, 1, InferLabelEncoder});
}

}  // namespace tob
