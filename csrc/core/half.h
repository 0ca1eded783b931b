// float16 / bfloat16 storage types and their conversions. Header-only and host/device callable
// so that CUDA kernels and the CPU tests share one definition of the rounding.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define TOB_HOST_DEVICE __host__ __device__
#else
#define TOB_HOST_DEVICE
#endif

namespace tob {

TOB_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

TOB_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// IEEE binary16, round to nearest even; NaN stays NaN, overflow goes to inf.
TOB_HOST_DEVICE inline uint16_t FloatToHalfBits(float f) {
  uint32_t x = FloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520
  if (abs < 0x38800000u) {                                               // subnormal or zero
    // Add 0.5 (as float) so the FPU does the round-to-nearest-even of the subnormal mantissa.
    float shifted = BitsToFloat(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (FloatBits(shifted) - 0x3f000000u));
  }
  uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (abs >> 13));
}

TOB_HOST_DEVICE inline float HalfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return BitsToFloat(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

TOB_HOST_DEVICE inline uint16_t FloatToBFloat16Bits(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding_bias) >> 16);
}

TOB_HOST_DEVICE inline float BFloat16BitsToFloat(uint16_t b) { return BitsToFloat(static_cast<uint32_t>(b) << 16); }

struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  TOB_HOST_DEVICE explicit Float16(float f) : bits(FloatToHalfBits(f)) {}
  TOB_HOST_DEVICE static Float16 FromBits(uint16_t b) {
    Float16 h;
    h.bits = b;
    return h;
  }
  TOB_HOST_DEVICE operator float() const { return HalfBitsToFloat(bits); }  // NOLINT
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  TOB_HOST_DEVICE explicit BFloat16(float f) : bits(FloatToBFloat16Bits(f)) {}
  TOB_HOST_DEVICE static BFloat16 FromBits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  TOB_HOST_DEVICE operator float() const { return BFloat16BitsToFloat(bits); }  // NOLINT
};

template <typename T>
inline constexpr bool kIs16BitFloat = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

// The type arithmetic runs in for storage type T: float32 for the 16-bit floats, T otherwise
// (every CPU kernel and every CUDA kernel computes 16-bit types this way).
template <typename T>
using ComputeType = std::conditional_t<kIs16BitFloat<T>, float, T>;

}  // namespace tob
