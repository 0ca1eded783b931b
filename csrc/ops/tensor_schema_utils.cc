#include "ops/tensor_schema_utils.h"

#include <algorithm>

namespace tob {

namespace tensor_schema {

const Dims* InputDims(const InferenceContext& ctx, int i) {
  const ValueType* t = ctx.input_type(i);
  return t != nullptr && t->shape ? &*t->shape : nullptr;
}

DType InputDType(const InferenceContext& ctx, int i) {
  const ValueType* t = ctx.input_type(i);
  return t != nullptr ? t->dtype : DType::kUndefined;
}

std::optional<std::vector<int64_t>> InputInts(const InferenceContext& ctx, int i) {
  if (!ctx.has_input(i)) return std::nullopt;
  const Tensor* v = ctx.input_value(i);
  if (v == nullptr || (v->numel() > 0 && v->raw_data() == nullptr)) return std::nullopt;
  if (v->device().type != DeviceType::kCPU) return std::nullopt;
  return v->ToInt64Vector();
}

std::optional<int64_t> InputLength(const InferenceContext& ctx, int i) {
  if (const Tensor* v = ctx.input_value(i)) return v->numel();
  const Dims* d = InputDims(ctx, i);
  if (d == nullptr) return std::nullopt;
  if (d->empty()) return 1;
  if (d->size() == 1 && (*d)[0].is_known()) return (*d)[0].value;
  return std::nullopt;
}

Dims UnknownDims(int64_t rank) { return Dims(static_cast<size_t>(std::max<int64_t>(rank, 0))); }

Dim MulDim(const Dim& a, const Dim& b) {
  if (a.is_known() && b.is_known()) return Dim(a.value * b.value);
  if ((a.is_known() && a.value == 0) || (b.is_known() && b.value == 0)) return Dim(0);
  if (a.is_known() && a.value == 1) return b;
  if (b.is_known() && b.value == 1) return a;
  return Dim::Unknown();
}

Dim DimProduct(const Dims& dims, size_t begin, size_t end) {
  Dim p(1);
  for (size_t i = begin; i < end && i < dims.size(); ++i) p = MulDim(p, dims[i]);
  return p;
}

Status NormalizeAxes(const InferenceContext& ctx, const std::vector<int64_t>& axes, int64_t rank,
                     std::vector<int64_t>* out) {
  out->clear();
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t n;
    TOB_RETURN_IF_ERROR(NormalizeAxis(ctx, a, rank, &n));
    if (seen[n]) return ctx.Fail("axis ", a, " is repeated in axes");
    seen[n] = true;
    out->push_back(n);
  }
  return Status::OK();
}

}  // namespace tensor_schema
}  // namespace tob
