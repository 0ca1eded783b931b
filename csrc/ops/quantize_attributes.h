// QuantizeLinear / DequantizeLinear: their attributes and how a scale (and zero point) maps onto
// the input, read once for the shape function and the kernels alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "ir/graph.h"

namespace tob {

// Per-tensor (a scalar or one-element scale), per-axis (a 1-D scale of the axis' length) or
// blocked (the input's shape with the axis divided into blocks of block_size, the last one
// possibly partial: ceil(D / block_size) scales along it).
struct QuantLayout {
  enum class Kind { kPerTensor, kPerAxis, kBlocked };
  Kind kind = Kind::kPerTensor;
  int64_t axis = 0;  // in [0, rank)
  int64_t block_size = 0;
};

struct QuantAttributes {
  int64_t axis = 1;
  int64_t block_size = 0;                  // opset 21 on
  bool saturate = true;                    // QuantizeLinear 19 on, float8 targets
  DType output_dtype = DType::kUndefined;  // QuantizeLinear 21 on, DequantizeLinear 23 on
  DType precision = DType::kUndefined;     // QuantizeLinear 23 on: the division's type

  // Reads and checks the attributes of a QuantizeLinear (quantize = true) or DequantizeLinear
  // node at `opset`; an attribute newer than the opset is refused by name.
  static StatusOr<QuantAttributes> Read(const Node& node, int opset, bool quantize);
};

// The layout of a scale of shape `scale` (and zero point `zero_point`, when given, which must have
// the scale's shape) on an input of shape `x`; a dimension < 0 is unknown and not checked.
// `who` opens every error message (the node's description).
StatusOr<QuantLayout> ResolveQuantLayout(const std::vector<int64_t>& x, const std::vector<int64_t>& scale,
                                         const std::vector<int64_t>* zero_point, const QuantAttributes& attrs,
                                         const std::string& who);

// The quantized types of an opset: QuantizeLinear's outputs and DequantizeLinear's inputs (which
// add int32). int8/uint8; float8 from 19; int16/uint16/int4/uint4 from 21; float4e2m1 from 23;
// int2/uint2 from 25.
std::vector<DType> QuantizedTypesAt(int opset);

// The integer range of a quantized integer type (int4: [-8, 7], ...); false for the float types.
bool QuantizedIntegerRange(DType t, int64_t* lo, int64_t* hi);

}  // namespace tob
