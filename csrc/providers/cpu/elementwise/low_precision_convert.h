// Bulk conversions between the low-precision types (float8, float8e8m0, float4e2m1, the packed
// 4-bit and 2-bit integers) and the engine's other types, element by element through
// core/low_precision.h. Cast and CastLike use them; the quantization kernels read and write
// their low-precision inputs and outputs with them.
//
// Elements are addressed by index from the tensor's first byte, so a caller can work on a range
// of a packed tensor; ranges that threads write at the same time must start at multiples of 4
// elements (a byte of a packed tensor belongs to one range).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/half.h"
#include "core/low_precision.h"

namespace tob::lowp {

// Elements per block of the blocked loops: a multiple of 4, so blocks never share a packed byte.
inline constexpr int64_t kBlock = 512;

struct CastOptions {
  bool saturate = true;                   // float8 and float8e8m0 targets (Cast's 'saturate')
  E8M0Rounding e8m0 = E8M0Rounding::kUp;  // float8e8m0 targets (Cast's 'round_mode')
};

// Whether a low-precision type's values are integers (decoded to int32, not float).
inline bool IsIntegerLowPrecision(DType t) {
  return t == DType::kUInt4 || t == DType::kInt4 || t == DType::kUInt2 || t == DType::kInt2;
}

inline Float8Kind Float8KindOf(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FNUZ: return Float8Kind::kE4M3FNUZ;
    case DType::kFloat8E5M2: return Float8Kind::kE5M2;
    case DType::kFloat8E5M2FNUZ: return Float8Kind::kE5M2FNUZ;
    default: return Float8Kind::kE4M3FN;
  }
}

// Elements [begin, begin + n) of a float8 / float8e8m0 / float4e2m1 tensor as float32 (exact).
void DecodeToFloat(DType t, const void* data, int64_t begin, int64_t n, float* out);
// Elements [begin, begin + n) of a uint4 / int4 / uint2 / int2 tensor as int32.
void DecodeToInt(DType t, const void* data, int64_t begin, int64_t n, int32_t* out);

// One value of a low-precision type's code (the byte of a float8, the 4 or 2 low bits of a packed
// element) from `v`, whose C++ type decides the rule: integers (and bool) keep their low bits in
// the integer types and convert exactly to double elsewhere; floats go through double (exact).
template <typename S>
inline uint8_t EncodeOne(S v, DType t, const CastOptions& o) {
  double d;
  if constexpr (std::is_same_v<S, Float16> || std::is_same_v<S, BFloat16>) d = static_cast<float>(v);
  else d = static_cast<double>(v);
  switch (t) {
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: return DoubleToFloat8(d, Float8KindOf(t), o.saturate);
    case DType::kFloat8E8M0: return FloatToFloat8E8M0(static_cast<float>(d), o.saturate, o.e8m0);
    case DType::kFloat4E2M1: return DoubleToFloat4E2M1(d);
    default: break;
  }
  const int bits = DTypeBits(t);
  if constexpr (std::is_integral_v<S>) return IntegerToCode(static_cast<int64_t>(v), bits);
  else return FloatToIntegerCode(d, bits);
}

// Writes n values into elements [begin, begin + n) of a low-precision tensor.
template <typename S>
void Encode(const S* src, int64_t n, DType t, void* data, int64_t begin, const CastOptions& o) {
  auto* bytes = static_cast<uint8_t*>(data);
  if (!IsPackedDType(t)) {
    for (int64_t i = 0; i < n; ++i) bytes[begin + i] = EncodeOne(src[i], t, o);
    return;
  }
  const int bits = DTypeBits(t);
  for (int64_t i = 0; i < n; ++i) StorePackedCode(bytes, begin + i, bits, EncodeOne(src[i], t, o));
}

}  // namespace tob::lowp
