// Storing a float64 result in any float type with one rounding. A double goes to float16 or
// bfloat16 through a float32 rounded to odd (truncated, lowest bit set when inexact): float32
// keeps more than two bits beyond either 16-bit type, so the second rounding then gives exactly
// the nearest 16-bit value, as one rounding of the double would.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"

namespace tob::cpu {

inline float RoundToOddFloat(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || !std::isfinite(f)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);  // toward zero
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

template <typename T>
inline T FromDouble(double v) {
  if constexpr (kIs16BitFloat<T>) return T(RoundToOddFloat(v));
  else return static_cast<T>(v);
}

template <typename T>
inline double ToDouble(T v) {
  if constexpr (kIs16BitFloat<T>) return static_cast<double>(static_cast<float>(v));
  else return static_cast<double>(v);
}

}  // namespace tob::cpu
