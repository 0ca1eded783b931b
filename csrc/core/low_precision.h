// The low-precision element types' arithmetic: float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), the
// float8e8m0 scale type, float4e2m1 and the packed 4-bit / 2-bit integers. Header-only and
// host/device callable (like core/half.h), so the CPU kernels, the binding and a CUDA kernel share
// one definition of every rounding rule.
//
// Rounding follows onnx 1.23's Cast specification and its reference implementation (which the
// backend node tests were generated with):
//  - float8: round to nearest even from the exact value (every source type converts to double
//    exactly, so encoding from double rounds once). saturate = true: +-inf and values whose
//    rounding exceeds the largest finite value give +-max; saturate = false: E4M3FN gives NaN
//    (sign kept), E5M2 +-inf, the FNUZ types their one NaN (0x80). The FNUZ types have no -0: a
//    negative value that rounds to zero gives +0. NaN gives NaN.
//  - float4e2m1: round to nearest even, always saturating (+-inf and overflow give +-6). It has
//    no NaN; onnx's reference (ml_dtypes) gives NaN the bits 0b1000 (-0) and -NaN 0b0000 (+0),
//    and so do we (onnx's float4 page says 6, its node tests say -0: the tests decide).
//  - float8e8m0 (2^(e - 127), 0xFF = NaN, no sign, no zero): from float32's exponent field, with
//    round_mode up (a non-zero fraction bumps the exponent), down (truncates) or nearest, and
//    saturate keeping 0xFE from rounding up into 0xFF (onnx.numpy_helper.to_float8e8m0).
//  - 4-bit and 2-bit integers from a float: NaN and +-inf give 0, others truncate toward zero and
//    keep the low bits (two's complement), as ml_dtypes' astype; from an integer: the low bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/half.h"

namespace tob {

enum class Float8Kind : uint8_t { kE4M3FN, kE4M3FNUZ, kE5M2, kE5M2FNUZ };

// The layout of one minifloat format: mantissa bits, exponent bias, largest finite value and its
// bits, and whether it is an FNUZ format (no infinities, no -0, NaN = 0x80).
struct MinifloatFormat {
  int mantissa_bits;
  int bias;
  double max_value;
  uint8_t max_bits;
  bool fnuz;
};

TOB_HOST_DEVICE constexpr MinifloatFormat FormatOf(Float8Kind k) {
  switch (k) {
    case Float8Kind::kE4M3FN: return {3, 7, 448.0, 0x7E, false};
    case Float8Kind::kE4M3FNUZ: return {3, 8, 240.0, 0x7F, true};
    case Float8Kind::kE5M2: return {2, 15, 57344.0, 0x7B, false};
    case Float8Kind::kE5M2FNUZ: return {2, 16, 57344.0, 0x7F, true};
  }
  return {3, 7, 448.0, 0x7E, false};
}
inline constexpr MinifloatFormat kFloat4E2M1Format{1, 1, 6.0, 0x7, false};

// |a| (finite, > 0) rounded to nearest even on the grid of a format with `mantissa_bits` and
// smallest normal exponent `min_exp` (subnormals below it). a / quantum is exact (a power-of-two
// scale), so rint's one rounding is the only one.
TOB_HOST_DEVICE inline double RoundToMinifloatGrid(double a, int mantissa_bits, int min_exp) {
  int e = 0;
  (void)std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1): the leading bit weighs 2^(e - 1)
  const int exp = e - 1 < min_exp ? min_exp : e - 1;
  const double quantum = std::ldexp(1.0, exp - mantissa_bits);
  return std::rint(a / quantum) * quantum;
}

// Exponent and mantissa bits (no sign) of r, a positive value exactly on the format's grid.
TOB_HOST_DEVICE inline uint8_t MinifloatMagnitudeBits(double r, int mantissa_bits, int bias) {
  const int min_exp = 1 - bias;
  int e = 0;
  (void)std::frexp(r, &e);
  const int exp = e - 1;
  if (exp < min_exp)  // subnormal: mantissa in units of the smallest subnormal
    return static_cast<uint8_t>(std::ldexp(r, mantissa_bits - min_exp));
  const int mant = static_cast<int>(std::ldexp(r, mantissa_bits - exp)) - (1 << mantissa_bits);
  return static_cast<uint8_t>(((exp + bias) << mantissa_bits) | mant);
}

// double -> float8 bits under the rules above.
TOB_HOST_DEVICE inline uint8_t DoubleToFloat8(double x, Float8Kind kind, bool saturate) {
  const MinifloatFormat f = FormatOf(kind);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const uint8_t nan = f.fnuz ? 0x80 : static_cast<uint8_t>(sign | (kind == Float8Kind::kE5M2 ? 0x7E : 0x7F));
  if (std::isnan(x)) return nan;
  // What a value beyond the largest finite one becomes without saturation.
  const uint8_t overflow = kind == Float8Kind::kE5M2 ? static_cast<uint8_t>(sign | 0x7C) : nan;
  const double a = std::fabs(x);
  if (std::isinf(a)) return saturate ? static_cast<uint8_t>(sign | f.max_bits) : overflow;
  const double r = a == 0 ? 0.0 : RoundToMinifloatGrid(a, f.mantissa_bits, 1 - f.bias);
  if (r == 0) return f.fnuz ? 0x00 : sign;
  if (r > f.max_value) return saturate ? static_cast<uint8_t>(sign | f.max_bits) : overflow;
  return static_cast<uint8_t>(sign | MinifloatMagnitudeBits(r, f.mantissa_bits, f.bias));
}

// float8 bits -> float32 (exact).
TOB_HOST_DEVICE inline float Float8ToFloat(uint8_t bits, Float8Kind kind) {
  const MinifloatFormat f = FormatOf(kind);
  const bool negative = (bits & 0x80) != 0;
  const int m = f.mantissa_bits;
  const int exp_field = (bits & 0x7F) >> m;
  const int mant = bits & ((1 << m) - 1);
  if (f.fnuz) {
    if (bits == 0x80) return NAN;
  } else if (kind == Float8Kind::kE4M3FN) {
    if ((bits & 0x7F) == 0x7F) return negative ? -NAN : NAN;
  } else if (exp_field == 0x1F) {  // E5M2: IEEE-like infinities and NaNs
    if (mant != 0) return negative ? -NAN : NAN;
    return negative ? -INFINITY : INFINITY;
  }
  const float v = exp_field == 0 ? std::ldexp(static_cast<float>(mant), 1 - f.bias - m)
                                 : std::ldexp(static_cast<float>(mant + (1 << m)), exp_field - f.bias - m);
  return negative ? -v : v;
}

// double -> float4e2m1 code (4 bits).
TOB_HOST_DEVICE inline uint8_t DoubleToFloat4E2M1(double x) {
  const bool negative = std::signbit(x);
  const uint8_t sign = negative ? 0x8 : 0x0;
  if (std::isnan(x)) return negative ? 0x0 : 0x8;
  const double a = std::fabs(x);
  if (std::isinf(a) || a > kFloat4E2M1Format.max_value) return sign | kFloat4E2M1Format.max_bits;
  const double r = a == 0 ? 0.0 : RoundToMinifloatGrid(a, kFloat4E2M1Format.mantissa_bits, 0);
  if (r == 0) return sign;
  if (r > kFloat4E2M1Format.max_value) return sign | kFloat4E2M1Format.max_bits;
  return static_cast<uint8_t>(sign | MinifloatMagnitudeBits(r, kFloat4E2M1Format.mantissa_bits, 1));
}

TOB_HOST_DEVICE inline float Float4E2M1ToFloat(uint8_t code) {
  const int exp_field = (code >> 1) & 0x3, mant = code & 0x1;
  const float v = exp_field == 0 ? 0.5f * static_cast<float>(mant)
                                 : std::ldexp(1.0f + 0.5f * static_cast<float>(mant), exp_field - 1);
  return (code & 0x8) != 0 ? -v : v;
}

enum class E8M0Rounding : uint8_t { kUp, kDown, kNearest };

// float32 -> float8e8m0 bits, onnx's rules (see the top of this file).
TOB_HOST_DEVICE inline uint8_t FloatToFloat8E8M0(float x, bool saturate, E8M0Rounding mode) {
  const uint32_t bits = FloatBits(x);
  uint32_t exponent = (bits >> 23) & 0xFF;
  if (exponent == 0xFF) return 0xFF;  // NaN and +-inf
  bool round_up = false;
  if (mode == E8M0Rounding::kUp) {
    round_up = (bits & 0x7FFFFF) != 0;
  } else if (mode == E8M0Rounding::kNearest) {
    // onnx's guard / round / sticky rule, its "lsb" being whether the exponent field is non-zero.
    const bool g = (bits & 0x400000) != 0, r = (bits & 0x200000) != 0, s = (bits & 0x1FFFFF) != 0;
    round_up = g && (r || s || exponent > 0);
  }
  if (round_up && saturate && exponent == 0xFE) round_up = false;
  if (round_up) ++exponent;
  return static_cast<uint8_t>(exponent);
}

TOB_HOST_DEVICE inline float Float8E8M0ToFloat(uint8_t bits) {
  if (bits == 0xFF) return NAN;
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

// ---- packed 4-bit and 2-bit elements ----

// The code (the low `bits` bits) of element i of a packed array.
TOB_HOST_DEVICE inline uint8_t LoadPackedCode(const uint8_t* data, int64_t i, int bits) {
  const int per_byte = 8 / bits;
  const int shift = static_cast<int>(i % per_byte) * bits;
  return static_cast<uint8_t>((data[i / per_byte] >> shift) & ((1 << bits) - 1));
}

// Writes element i's code, leaving the byte's other elements as they are. Not atomic: two threads
// never write elements of one byte (callers split work at multiples of 4 elements).
TOB_HOST_DEVICE inline void StorePackedCode(uint8_t* data, int64_t i, int bits, uint8_t code) {
  const int per_byte = 8 / bits;
  const int shift = static_cast<int>(i % per_byte) * bits;
  const uint8_t mask = static_cast<uint8_t>(((1 << bits) - 1) << shift);
  uint8_t& byte = data[i / per_byte];
  byte = static_cast<uint8_t>((byte & ~mask) | ((code << shift) & mask));
}

// A signed `bits`-bit code as an integer (two's complement).
TOB_HOST_DEVICE inline int32_t SignExtendCode(uint8_t code, int bits) {
  const int shift = 32 - bits;
  return static_cast<int32_t>(static_cast<uint32_t>(code) << shift) >> shift;
}

// The `bits`-bit code of an integer: its low bits (the two's complement wrap of Cast).
TOB_HOST_DEVICE inline uint8_t IntegerToCode(int64_t v, int bits) {
  return static_cast<uint8_t>(static_cast<uint64_t>(v) & ((1u << bits) - 1));
}

// The `bits`-bit integer code of a float under Cast: NaN and +-inf give 0, others truncate toward
// zero (saturated to the int64 range) and keep the low bits.
TOB_HOST_DEVICE inline uint8_t FloatToIntegerCode(double x, int bits) {
  if (!std::isfinite(x)) return 0;
  const double t = std::trunc(x);
  int64_t v;
  if (t >= 9223372036854775807.0) v = INT64_MAX;
  else if (t <= -9223372036854775808.0) v = INT64_MIN;
  else v = static_cast<int64_t>(t);
  return IntegerToCode(v, bits);
}

}  // namespace tob
