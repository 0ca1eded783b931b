// The scalar arithmetic of every elementwise op, one small functor per op. Host/device callable
// (TOB_HOST_DEVICE) so the CPU kernels and the CUDA kernels in kernels/ compute exactly the same
// thing, and the CPU tests exercise the arithmetic the GPU runs.
//
// Conventions:
// - Functors take and return the *compute* type: float for float/float16/bfloat16 storage,
//   double for double, the integer type itself for integers, bool for logic ops. Callers convert
//   16-bit storage to float before calling and back after.
// - Integer arithmetic wraps (two's complement) instead of overflowing into UB, and division or
//   modulo by zero yields 0 (numpy's result) instead of trapping.
// - Float min/max propagate NaN like numpy and torch.
#pragma once

#include <math.h>

#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace tob::ew {

// ---- math wrappers: one spelling for host and device, float and double ----
TOB_HOST_DEVICE inline float Exp(float x) { return ::expf(x); }
TOB_HOST_DEVICE inline double Exp(double x) { return ::exp(x); }
TOB_HOST_DEVICE inline float Log(float x) { return ::logf(x); }
TOB_HOST_DEVICE inline double Log(double x) { return ::log(x); }
TOB_HOST_DEVICE inline float Log1p(float x) { return ::log1pf(x); }
TOB_HOST_DEVICE inline double Log1p(double x) { return ::log1p(x); }
TOB_HOST_DEVICE inline float Tanh(float x) { return ::tanhf(x); }
TOB_HOST_DEVICE inline double Tanh(double x) { return ::tanh(x); }
TOB_HOST_DEVICE inline float Erf(float x) { return ::erff(x); }
TOB_HOST_DEVICE inline double Erf(double x) { return ::erf(x); }
TOB_HOST_DEVICE inline float Sqrt(float x) { return ::sqrtf(x); }
TOB_HOST_DEVICE inline double Sqrt(double x) { return ::sqrt(x); }
TOB_HOST_DEVICE inline float Sin(float x) { return ::sinf(x); }
TOB_HOST_DEVICE inline double Sin(double x) { return ::sin(x); }
TOB_HOST_DEVICE inline float Cos(float x) { return ::cosf(x); }
TOB_HOST_DEVICE inline double Cos(double x) { return ::cos(x); }
TOB_HOST_DEVICE inline float Floor(float x) { return ::floorf(x); }
TOB_HOST_DEVICE inline double Floor(double x) { return ::floor(x); }
TOB_HOST_DEVICE inline float Ceil(float x) { return ::ceilf(x); }
TOB_HOST_DEVICE inline double Ceil(double x) { return ::ceil(x); }
// Round half to even (ONNX Round), independent of the current rounding mode.
TOB_HOST_DEVICE inline float RoundHalfEven(float x) {
  float r = ::roundf(x);  // half away from zero
  if (::fabsf(x - ::truncf(x)) == 0.5f) r = 2.0f * ::roundf(0.5f * x);
  return r;
}
TOB_HOST_DEVICE inline double RoundHalfEven(double x) {
  double r = ::round(x);
  if (::fabs(x - ::trunc(x)) == 0.5) r = 2.0 * ::round(0.5 * x);
  return r;
}
TOB_HOST_DEVICE inline float Pow(float x, float y) { return ::powf(x, y); }
TOB_HOST_DEVICE inline double Pow(double x, double y) { return ::pow(x, y); }
TOB_HOST_DEVICE inline float Fmod(float x, float y) { return ::fmodf(x, y); }
TOB_HOST_DEVICE inline double Fmod(double x, double y) { return ::fmod(x, y); }

template <typename T>
TOB_HOST_DEVICE inline bool IsNan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  else return false;
}

// Two's-complement wrapping arithmetic for integers (signed overflow is UB in C++; small types
// promote to int, whose products can overflow too, so compute in an unsigned type of >= 32 bits).
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;

template <typename T>
TOB_HOST_DEVICE inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<WrapType<T>>(a) + static_cast<WrapType<T>>(b));
  else return a + b;
}
template <typename T>
TOB_HOST_DEVICE inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<WrapType<T>>(a) - static_cast<WrapType<T>>(b));
  else return a - b;
}
template <typename T>
TOB_HOST_DEVICE inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return static_cast<T>(static_cast<WrapType<T>>(a) * static_cast<WrapType<T>>(b));
  else return a * b;
}
template <typename T>
TOB_HOST_DEVICE inline T WrapNeg(T a) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(WrapType<T>(0) - static_cast<WrapType<T>>(a));
  else return -a;
}

// ---- binary arithmetic ----
struct AddOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return WrapAdd(a, b);
  }
};
struct SubOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return WrapSub(a, b);
  }
};
struct MulOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return WrapMul(a, b);
  }
};
// Integer division truncates toward zero (C++, ONNX Runtime and the ONNX reference agree);
// x / 0 is 0 and MIN / -1 wraps, where the hardware would trap.
struct DivOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return WrapNeg(a);
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
};

// ONNX Mod. fmod=1: C fmod (the result has the sign of the dividend). fmod=0: the result has
// the sign of the divisor (numpy.mod / Python %), for floats too as in the ONNX reference.
// x mod 0 is 0 for integers (numpy's result) and NaN for floats.
struct ModOp {
  bool fmod = false;
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return T(0);
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);
        T r = static_cast<T>(a % b);
        if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
        return r;
      } else {
        return static_cast<T>(a % b);
      }
    } else {
      T r = Fmod(a, b);
      if (!fmod && r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
      return r;
    }
  }
};

// Integer power by squaring; a negative exponent gives 1/base^-e truncated toward zero.
template <typename T, typename E>
TOB_HOST_DEVICE inline T IntPow(T base, E exponent) {
  if constexpr (std::is_signed_v<E>) {
    if (exponent < 0) {
      if (base == T(1)) return T(1);
      if constexpr (std::is_signed_v<T>)
        if (base == T(-1)) return (exponent & 1) ? T(-1) : T(1);
      return T(0);
    }
  }
  T result = T(1);
  uint64_t e = static_cast<uint64_t>(exponent);
  while (e != 0) {
    if (e & 1u) result = WrapMul(result, base);
    base = WrapMul(base, base);
    e >>= 1;
  }
  return result;
}

// Float -> integer conversion without UB: NaN gives 0, out-of-range values saturate to the range
// of int64 (or uint64) and then wrap to T like a C cast of an in-range value (numpy's results
// for every value numpy itself defines).
template <typename T, typename F>
TOB_HOST_DEVICE inline T FloatToInt(F x) {
  if (x != x) return T(0);
  if constexpr (std::is_same_v<T, bool>) {
    return x != F(0);
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    if (x >= F(18446744073709551616.0)) return UINT64_MAX;
    if (x >= F(0)) return static_cast<uint64_t>(x);
    if (x <= F(-9223372036854775808.0)) return static_cast<uint64_t>(INT64_MIN);
    return static_cast<uint64_t>(static_cast<int64_t>(x));
  } else {
    int64_t v;
    if (x >= F(9223372036854775808.0)) v = INT64_MAX;
    else if (x <= F(-9223372036854775808.0)) v = INT64_MIN;
    else v = static_cast<int64_t>(x);
    return static_cast<T>(v);
  }
}

// ONNX Pow: the result has the base's type. Float bases compute in their float type; integer
// bases with integer exponents are exact; integer bases with float exponents go through double.
struct PowOp {
  template <typename T, typename E>
  TOB_HOST_DEVICE T operator()(T base, E exponent) const {
    if constexpr (std::is_floating_point_v<T>) {
      return Pow(base, static_cast<T>(exponent));
    } else if constexpr (std::is_integral_v<E>) {
      return IntPow(base, exponent);
    } else {
      return FloatToInt<T>(Pow(static_cast<double>(base), static_cast<double>(exponent)));
    }
  }
};

// A NaN a is kept by the IsNan test and a NaN b by the failing comparison; written with a
// non-short-circuit | so the loop is a compare-and-blend the compiler vectorises.
struct MinOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return ((a < b) | IsNan(a)) ? a : b;
  }
};
struct MaxOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return ((a > b) | IsNan(a)) ? a : b;
  }
};

// PRelu: x for x >= 0, slope * x otherwise (NaN stays NaN).
struct PReluOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x, T slope) const {
    return x < T(0) ? WrapMul(slope, x) : x;
  }
};

// ---- comparisons and logic (bool results) ----
struct EqualOp {
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T a, T b) const {
    return a == b;
  }
};
struct LessOp {
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T a, T b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T a, T b) const {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct AndOp {
  TOB_HOST_DEVICE bool operator()(bool a, bool b) const { return a && b; }
};
struct OrOp {
  TOB_HOST_DEVICE bool operator()(bool a, bool b) const { return a || b; }
};
struct XorOp {
  TOB_HOST_DEVICE bool operator()(bool a, bool b) const { return a != b; }
};
struct NotOp {
  TOB_HOST_DEVICE bool operator()(bool a) const { return !a; }
};

// ---- bitwise (integer types; opset 18's BitwiseAnd/Or/Xor/Not and opset 11's BitShift) ----
// The casts undo C++'s promotion of 8- and 16-bit operands to int.
struct BitwiseAndOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return static_cast<T>(a & b);
  }
};
struct BitwiseOrOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return static_cast<T>(a | b);
  }
};
struct BitwiseXorOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a, T b) const {
    return static_cast<T>(a ^ b);
  }
};
struct BitwiseNotOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T a) const {
    return static_cast<T>(~a);
  }
};
// BitShift: unsigned types from opset 11, signed ones from opset 28. Left shifts move the two's-
// complement bits (wrapping past the sign bit); right shifts of signed values are arithmetic. A
// negative amount, or one of the type's width or more, leaves only the sign extension: -1 for a
// right shift of a negative value, 0 otherwise (the spec's rule, and numpy's and torch's results)
// instead of C++'s undefined behaviour.
struct BitShiftOp {
  bool left = true;
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x, T amount) const {
    using U = std::make_unsigned_t<T>;
    constexpr T kWidth = static_cast<T>(sizeof(T) * 8);
    bool in_range = amount < kWidth;
    if constexpr (std::is_signed_v<T>) in_range = in_range && amount >= 0;
    if (!in_range) {
      if constexpr (std::is_signed_v<T>)
        if (!left && x < 0) return T(-1);
      return T(0);
    }
    if (left) return static_cast<T>(static_cast<U>(static_cast<U>(x) << amount));
    if constexpr (std::is_signed_v<T>) {
      // ~(~x >> s) for negative x: the sign fill written with unsigned shifts only.
      if (x < 0) return static_cast<T>(~static_cast<U>(static_cast<U>(~static_cast<U>(x)) >> amount));
    }
    return static_cast<T>(static_cast<U>(x) >> amount);
  }
};

// ---- unary ----
struct NegOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return WrapNeg(x);
  }
};
struct AbsOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else if constexpr (std::is_integral_v<T>) return x < 0 ? WrapNeg(x) : x;
    else return x < T(0) ? -x : (x == T(0) ? T(0) : x);
  }
};
struct SqrtOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Sqrt(x);
  }
};
struct ReciprocalOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return T(1) / x;
  }
};
struct ExpOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Exp(x);
  }
};
struct LogOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Log(x);
  }
};
struct TanhOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Tanh(x);
  }
};
// Written so neither branch overflows: exp is only taken of a non-positive number.
struct SigmoidOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + Exp(-x));
    T e = Exp(x);
    return e / (T(1) + e);
  }
};
struct ReluOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};
struct LeakyReluOp {
  float alpha = 0.01f;
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? static_cast<T>(alpha) * x : x;
  }
};
struct EluOp {
  float alpha = 1.0f;
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? static_cast<T>(alpha) * (Exp(x) - T(1)) : x;
  }
};
struct SeluOp {
  float alpha = 1.67326319217681884765625f;
  float gamma = 1.05070102214813232421875f;
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    T g = static_cast<T>(gamma);
    return x <= T(0) ? g * static_cast<T>(alpha) * (Exp(x) - T(1)) : g * x;
  }
};
// log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which never overflows.
struct SoftplusOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    T ax = x < T(0) ? -x : x;
    return (x > T(0) ? x : T(0)) + Log1p(Exp(-ax));
  }
};
struct SoftsignOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return x / (T(1) + (x < T(0) ? -x : x));
  }
};
struct HardSigmoidOp {
  float alpha = 0.2f;
  float beta = 0.5f;
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    T y = static_cast<T>(alpha) * x + static_cast<T>(beta);
    y = y > T(0) ? y : T(0);
    return y < T(1) ? y : T(1);
  }
};
struct HardSwishOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    T y = x * T(1.0 / 6.0) + T(0.5);
    y = y > T(0) ? y : T(0);
    y = y < T(1) ? y : T(1);
    return x * y;
  }
};
struct ErfOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Erf(x);
  }
};
// Exact GELU: 0.5 x (1 + erf(x / sqrt(2))).
struct GeluOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return T(0.5) * x * (T(1) + Erf(x * T(0.70710678118654752440)));
  }
};
// Tanh GELU: 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3), computed as the equal
// x / (1 + exp(-2z)), which avoids the 1 + tanh cancellation for negative x.
struct GeluTanhOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    T minus_2z = T(-2.0 * 0.79788456080286535588) * (x + T(0.044715) * x * x * x);
    return x / (T(1) + Exp(minus_2z));
  }
};
struct FloorOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Floor(x);
  }
};
struct CeilOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Ceil(x);
  }
};
struct RoundOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return RoundHalfEven(x);
  }
};
struct SignOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x > T(0) ? T(1) : T(0);
    else if constexpr (std::is_integral_v<T>) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
    else return x > T(0) ? T(1) : (x < T(0) ? T(-1) : (x == T(0) ? T(0) : x));  // NaN stays NaN
  }
};
struct SinOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Sin(x);
  }
};
struct CosOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x) const {
    return Cos(x);
  }
};

// Clip: min(max(x, lo), hi) with NaN passing through; lo > hi gives hi (the ONNX rule).
struct ClipOp {
  template <typename T>
  TOB_HOST_DEVICE T operator()(T x, T lo, T hi) const {
    T y = x < lo ? lo : x;
    return y > hi ? hi : y;
  }
};

struct IsNanOp {
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T x) const {
    return x != x;
  }
};
struct IsInfOp {
  bool detect_positive = true;
  bool detect_negative = true;
  template <typename T>
  TOB_HOST_DEVICE bool operator()(T x) const {
    return (detect_positive && x == static_cast<T>(INFINITY)) || (detect_negative && x == -static_cast<T>(INFINITY));
  }
};

}  // namespace tob::ew
