// The one bulk conversion between the 16-bit float storage types and float32, for every host loop
// that computes 16-bit types in float32 (CPU kernels, the multi-tensor optimizers). The F16C /
// AVX2 paths round to nearest even exactly like core/half.h's scalar conversions
// (tests/cpp/training_multi_tensor_test.cc checks every path bit for bit); only the payload of a float16
// NaN may differ, it stays a NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/half.h"

namespace tob {

// Elements converted per stack buffer by the blocked 16-bit loops: small enough to stay in L1
// with the float32 streams next to it.
inline constexpr int64_t kConvertBlock = 512;

template <typename T>
inline void ToFloat(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  } else if constexpr (std::is_same_v<T, Float16>) {
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
#if defined(__AVX2__)
    for (; i + 8 <= n; i += 8) {
      __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
    }
#endif
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

#if defined(__AVX2__)
// float32 -> bfloat16 bits of 8 lanes (in the low 16 bits of each 32-bit lane), as
// FloatToBFloat16Bits does it: round to nearest even, NaN made quiet.
inline __m256i BFloat16BitsOf(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}
#endif

template <typename T>
inline void FromFloat(const float* src, T* dst, int64_t n) {
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  } else if constexpr (std::is_same_v<T, Float16>) {
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  } else if constexpr (std::is_same_v<T, BFloat16>) {
#if defined(__AVX2__)
    for (; i + 16 <= n; i += 16) {
      __m256i lo = BFloat16BitsOf(_mm256_loadu_ps(src + i));
      __m256i hi = BFloat16BitsOf(_mm256_loadu_ps(src + i + 8));
      // packus works per 128-bit lane: [lo0 hi0 lo1 hi1] -> reorder the quadwords to [lo0 lo1 hi0 hi1].
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
    }
#endif
  }
  for (; i < n; ++i) dst[i] = T(src[i]);
}

}  // namespace tob
