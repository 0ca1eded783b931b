// Bulk conversions between 16-bit float storage and float32, the compute type of every 16-bit
// elementwise op. F16C does float16 in hardware (part of x86-64-v3); bfloat16 is bit shifts the
// compiler vectorises.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "core/half.h"

namespace tob::ew {

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// The type an op computes in for storage type T: float for 16-bit floats, T otherwise.
template <typename T>
using ComputeType = std::conditional_t<kIsHalf<T>, float, T>;

inline void HalfToFloat(const Float16* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i].bits);
}

inline void FloatToHalf(const float* src, Float16* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
#endif
  for (; i < n; ++i) dst[i].bits = FloatToHalfBits(src[i]);
}

inline void BFloat16ToFloat(const BFloat16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = static_cast<uint32_t>(src[i].bits) << 16;
    std::memcpy(dst + i, &u, sizeof(u));
  }
}

// Round to nearest even; NaN stays a quiet NaN. Branch-free so the loop vectorises.
inline void FloatToBFloat16(const float* src, BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, src + i, sizeof(x));
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (x >> 16) | 0x40u;
    dst[i].bits = static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

// Storage -> compute type for a run of n elements (T must be a 16-bit float).
template <typename T>
inline void LoadAsFloat(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, Float16>) HalfToFloat(src, dst, n);
  else BFloat16ToFloat(src, dst, n);
}

template <typename T>
inline void StoreFromFloat(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, Float16>) FloatToHalf(src, dst, n);
  else FloatToBFloat16(src, dst, n);
}

}  // namespace tob::ew
