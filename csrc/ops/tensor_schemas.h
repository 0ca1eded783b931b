// Internal to the Tensor (data movement) schema family: the per-file registration functions and
// the small helpers their shape functions share.
#pragma once

#include <optional>
#include <vector>

#include "ops/op_schema.h"

namespace tob {

void RegisterReshapeFamilySchemas(OpSchemaRegistry& registry);  // tensor_reshape_schemas.cc
void RegisterLayoutSchemas(OpSchemaRegistry& registry);         // tensor_layout_schemas.cc
void RegisterSlicePadSchemas(OpSchemaRegistry& registry);       // tensor_slice_pad_schemas.cc
void RegisterIndexSchemas(OpSchemaRegistry& registry);          // tensor_index_schemas.cc

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
