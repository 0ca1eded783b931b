#include "ops/quantize_attributes.h"

#include <algorithm>
#include <cstdint>

namespace tob {

namespace {

std::string ShapeText(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return r + "]";
}

// Whether `s` holds exactly one value (a scalar, [1], [1, 1], ...): a per-tensor scale.
bool IsSingleValue(const std::vector<int64_t>& s) {
  return std::all_of(s.begin(), s.end(), [](int64_t d) { return d == 1; });
}

}  // namespace

StatusOr<QuantAttributes> QuantAttributes::Read(const Node& node, int opset, bool quantize) {
  QuantAttributes a;
  auto newer = [&](const char* name, int since) -> Status {
    if (node.FindAttribute(name) != nullptr && opset < since)
      return InvalidModel(node.Describe(), ": attribute '", name, "' is not part of ", node.op_type(), "-", opset,
                          " (it came with opset ", since, ")");
    return Status::OK();
  };
  TOB_RETURN_IF_ERROR(newer("axis", 13));
  TOB_RETURN_IF_ERROR(newer("block_size", 21));
  TOB_RETURN_IF_ERROR(node.GetAttr("axis", &a.axis, int64_t{1}));
  TOB_RETURN_IF_ERROR(node.GetAttr("block_size", &a.block_size, int64_t{0}));
  if (a.block_size < 0) return InvalidModel(node.Describe(), ": block_size must be >= 0, got ", a.block_size);
  int64_t output_dtype = 0;
  if (quantize) {
    TOB_RETURN_IF_ERROR(newer("saturate", 19));
    TOB_RETURN_IF_ERROR(newer("output_dtype", 21));
    TOB_RETURN_IF_ERROR(newer("precision", 23));
    int64_t saturate = 1, precision = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("saturate", &saturate, int64_t{1}));
    if (saturate != 0 && saturate != 1)
      return InvalidModel(node.Describe(), ": attribute 'saturate' must be 0 or 1, got ", saturate);
    a.saturate = saturate == 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("precision", &precision, int64_t{0}));
    if (precision != 0) {
      a.precision = DTypeFromOnnx(static_cast<int32_t>(precision));
      if (a.precision != DType::kFloat32 && a.precision != DType::kFloat16 && a.precision != DType::kBFloat16)
        return InvalidModel(node.Describe(), ": attribute 'precision' = ", precision,
                            " must be float32, float16 or bfloat16");
    }
  } else {
    TOB_RETURN_IF_ERROR(newer("output_dtype", 23));
  }
  TOB_RETURN_IF_ERROR(node.GetAttr("output_dtype", &output_dtype, int64_t{0}));
  if (output_dtype != 0) {
    a.output_dtype = DTypeFromOnnx(static_cast<int32_t>(output_dtype));
    if (a.output_dtype == DType::kUndefined)
      return InvalidModel(node.Describe(), ": attribute 'output_dtype' = ", output_dtype,
                          " is not a type the engine has");
  }
  return a;
}

StatusOr<QuantLayout> ResolveQuantLayout(const std::vector<int64_t>& x, const std::vector<int64_t>& scale,
                                         const std::vector<int64_t>* zero_point, const QuantAttributes& attrs,
                                         const std::string& who) {
  // The zero point has the scale's shape; a one-value scale takes any one-value zero point ([] and
  // [1] alike, as onnx's node tests and reference do).
  if (zero_point != nullptr && *zero_point != scale && !(IsSingleValue(*zero_point) && IsSingleValue(scale)))
    return InvalidArgument(who, ": the zero point's shape ", ShapeText(*zero_point), " differs from the scale's ",
                           ShapeText(scale));
  QuantLayout layout;
  const int64_t rank = static_cast<int64_t>(x.size());
  if (IsSingleValue(scale)) return layout;  // per tensor, block_size or not (onnx's reference)
  int64_t axis = attrs.axis;
  if (axis < -rank || axis >= rank)
    return InvalidArgument(who, ": axis ", attrs.axis, " is out of range for the input's rank ", rank);
  if (axis < 0) axis += rank;
  layout.axis = axis;
  if (attrs.block_size == 0) {
    if (scale.size() != 1)
      return InvalidArgument(who, ": the scale ", ShapeText(scale),
                             " must be a scalar (per tensor) or 1-D (per axis) without block_size");
    if (scale[0] >= 0 && x[axis] >= 0 && scale[0] != x[axis])
      return InvalidArgument(who, ": the scale has ", scale[0], " values but axis ", attrs.axis, " of the input ",
                             ShapeText(x), " has ", x[axis]);
    layout.kind = QuantLayout::Kind::kPerAxis;
    return layout;
  }
  if (static_cast<int64_t>(scale.size()) != rank)
    return InvalidArgument(who, ": blocked quantization needs a scale of the input's rank ", rank, ", got ",
                           ShapeText(scale));
  for (int64_t d = 0; d < rank; ++d) {
    if (scale[d] < 0 || x[d] < 0) continue;
    if (d != axis && scale[d] != x[d])
      return InvalidArgument(who, ": the scale ", ShapeText(scale), " must match the input ", ShapeText(x),
                             " except along axis ", attrs.axis);
    if (d == axis && scale[d] != (x[d] + attrs.block_size - 1) / attrs.block_size)
      return InvalidArgument(who, ": block_size ", attrs.block_size, " does not fit: ", x[d], " elements along axis ",
                             attrs.axis, " make ", (x[d] + attrs.block_size - 1) / attrs.block_size,
                             " blocks, but the scale has ", scale[d]);
  }
  layout.kind = QuantLayout::Kind::kBlocked;
  layout.block_size = attrs.block_size;
  return layout;
}

std::vector<DType> QuantizedTypesAt(int opset) {
  std::vector<DType> r{DType::kInt8, DType::kUInt8};
  if (opset >= 19)
    r.insert(r.end(), {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ});
  if (opset >= 21) r.insert(r.end(), {DType::kInt16, DType::kUInt16, DType::kUInt4, DType::kInt4});
  if (opset >= 23) r.push_back(DType::kFloat4E2M1);
  if (opset >= 25) r.insert(r.end(), {DType::kUInt2, DType::kInt2});
  return r;
}

bool QuantizedIntegerRange(DType t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case DType::kInt8: *lo = -128, *hi = 127; return true;
    case DType::kUInt8: *lo = 0, *hi = 255; return true;
    case DType::kInt16: *lo = -32768, *hi = 32767; return true;
    case DType::kUInt16: *lo = 0, *hi = 65535; return true;
    case DType::kInt32: *lo = INT32_MIN, *hi = INT32_MAX; return true;
    case DType::kInt4: *lo = -8, *hi = 7; return true;
    case DType::kUInt4: *lo = 0, *hi = 15; return true;
    case DType::kInt2: *lo = -2, *hi = 1; return true;
    case DType::kUInt2: *lo = 0, *hi = 3; return true;
    default: return false;
  }
}

}  // namespace tob
