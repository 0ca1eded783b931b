// The per-element arithmetic of QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the
// requantizing ops (QLinearMatMul, QLinearConv), host/device callable so a CUDA kernel can share
// it. It reproduces onnx's reference (numpy) arithmetic, rounding for rounding:
//  - QuantizeLinear divides in the 'precision' type, else in numpy's promotion of x's and the
//    scale's types (float16 / bfloat16 divisions are a float32 division rounded to the type, as
//    numpy and ml_dtypes compute them; int32 inputs divide in float64), rounds half to even and
//    adds the zero point, saturating to the target's range. NaN quantizes to the range's low end
//    and +-inf to its ends, as onnxruntime does (the reference's int32 cast gives the low end for
//    both infinities).
//  - DequantizeLinear computes (x - zero_point) * scale in float32 (integers subtracted exactly)
//    and rounds once to the output type.
//  - QLinearMatMul / QLinearConv requantize their int32 sums with Requantize (below).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace tob {

enum class QuantPrecision : uint8_t { kFloat16, kBFloat16, kFloat32, kFloat64 };

// v (a value of the source type, exact in double) rounded once to the precision's type.
TOB_HOST_DEVICE inline double RoundToPrecision(double v, QuantPrecision p) {
  switch (p) {
    case QuantPrecision::kFloat64: return v;
    case QuantPrecision::kFloat32: return static_cast<double>(static_cast<float>(v));
    case QuantPrecision::kFloat16: return HalfBitsToFloat(FloatToHalfBits(static_cast<float>(v)));
    case QuantPrecision::kBFloat16: return BFloat16BitsToFloat(FloatToBFloat16Bits(static_cast<float>(v)));
  }
  return v;
}

// x / scale in the precision's arithmetic; x and scale are already values of that type.
TOB_HOST_DEVICE inline double QuantizeQuotient(double x, double scale, QuantPrecision p) {
  if (p == QuantPrecision::kFloat64) return x / scale;
  return RoundToPrecision(static_cast<double>(static_cast<float>(x) / static_cast<float>(scale)), p);
}

// round_half_even(q) + zero_point saturated to [lo, hi].
TOB_HOST_DEVICE inline int64_t QuantizeToInteger(double q, double zero_point, int64_t lo, int64_t hi) {
  if (std::isnan(q)) return lo;
  const double v = std::rint(q) + zero_point;
  if (v <= static_cast<double>(lo)) return lo;
  if (v >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(v);
}

// The real multiplier of a requantization, (a_scale * b_scale) / y_scale, in the scales' type as
// numpy computes it (a float16 product is rounded to float16 before the division).
TOB_HOST_DEVICE inline double RequantizeMultiplier(double a_scale, double b_scale, double y_scale, QuantPrecision p) {
  const double product =
      RoundToPrecision(static_cast<double>(static_cast<float>(a_scale) * static_cast<float>(b_scale)), p);
  return QuantizeQuotient(product, y_scale, p);
}

// An int32 accumulator requantized as onnx's reference does it: acc * multiplier in float64, plus
// the zero point, then rounded half to even and saturated. (The zero point is added before the
// rounding, unlike QuantizeLinear's: the two differ only on exact ties with an odd zero point;
// onnxruntime rounds first.)
TOB_HOST_DEVICE inline int64_t Requantize(int32_t acc, double multiplier, double zero_point, int64_t lo, int64_t hi) {
  return QuantizeToInteger(static_cast<double>(acc) * multiplier + zero_point, 0.0, lo, hi);
}

}  // namespace tob
