// The helpers the shape functions of the tensor (data movement) schema files share.
#pragma once

#include <optional>
#include <vector>

#include "ops/op_schema.h"

namespace tob {

namespace tensor_schema {

// The input's dims, or nullptr when the input is omitted or its rank is unknown.
const Dims* InputDims(const InferenceContext& ctx, int i);
// The input's element type (kUndefined when omitted).
DType InputDType(const InferenceContext& ctx, int i);
// A small integer input (shape, axes, pads...) read as int64 when its value is known: always at
// run time, only for constants at compile time.
std::optional<std::vector<int64_t>> InputInts(const InferenceContext& ctx, int i);
// The number of elements of a 1-D input when its length is known statically.
std::optional<int64_t> InputLength(const InferenceContext& ctx, int i);

Dims UnknownDims(int64_t rank);
// a * b over dims: exact when both are known; a symbol survives a multiplication by 1.
Dim MulDim(const Dim& a, const Dim& b);
// Product of dims[begin, end).
Dim DimProduct(const Dims& dims, size_t begin, size_t end);

// Normalises axes against `rank`, rejecting out-of-range and repeated axes.
Status NormalizeAxes(const InferenceContext& ctx, const std::vector<int64_t>& axes, int64_t rank,
                     std::vector<int64_t>* out);

}  // namespace tensor_schema
}  // namespace tob
