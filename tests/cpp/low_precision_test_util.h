// Test helpers for the low-precision types: tensors from raw codes, codes back, reference
// roundings computed from the formats' definitions by search (not by the engine's arithmetic), and
// a float32 tensor narrowed to a 16-bit float type.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/low_precision.h"
#include "core/tensor.h"

namespace tob::testing {

// A tensor of a low-precision type holding `codes` (one per element; packed for the sub-byte types).
inline Tensor CodesTensor(DType t, const std::vector<uint8_t>& codes, const Shape& shape) {
  Tensor out = Tensor::Allocate(t, shape, CpuAllocator::Default()).value();
  auto* bytes = out.data<uint8_t>();
  if (out.nbytes() > 0) std::memset(bytes, 0xAB, out.nbytes());  // the padding bits must not matter
  for (size_t i = 0; i < codes.size(); ++i) {
    if (IsPackedDType(t)) StorePackedCode(bytes, static_cast<int64_t>(i), DTypeBits(t), codes[i]);
    else bytes[i] = codes[i];
  }
  return out;
}

// The codes of a low-precision tensor, one per element.
inline std::vector<uint8_t> CodesOf(const Tensor& t) {
  std::vector<uint8_t> r(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    r[i] = IsPackedDType(t.dtype()) ? LoadPackedCode(t.data<uint8_t>(), i, DTypeBits(t.dtype())) : t.data<uint8_t>()[i];
  return r;
}

// The minifloat formats from their definitions (onnx's float8 and float4 pages).
struct FormatSpec {
  int exp_bits, mant_bits, bias;
  bool fnuz;        // no inf, no -0, NaN = 0x80
  bool ieee_inf;    // E5M2: exponent all ones is inf / NaN
  bool e4m3fn_nan;  // E4M3FN: S.1111.111 is NaN, the rest of the top binade is finite
};

inline FormatSpec SpecOf(Float8Kind k) {
  switch (k) {
    case Float8Kind::kE4M3FN: return {4, 3, 7, false, false, true};
    case Float8Kind::kE4M3FNUZ: return {4, 3, 8, true, false, false};
    case Float8Kind::kE5M2: return {5, 2, 15, false, true, false};
    case Float8Kind::kE5M2FNUZ: return {5, 2, 16, true, false, false};
  }
  return {4, 3, 7, false, false, true};
}
inline FormatSpec Float4Spec() { return {2, 1, 1, false, false, false}; }

// The value of a non-negative code (sign bit clear), or NaN / inf for the special codes.
inline double ValueOfMagnitude(const FormatSpec& f, uint32_t code) {
  const uint32_t e = code >> f.mant_bits, m = code & ((1u << f.mant_bits) - 1);
  const uint32_t e_max = (1u << f.exp_bits) - 1;
  if (f.ieee_inf && e == e_max) return m == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
  if (f.e4m3fn_nan && e == e_max && m == (1u << f.mant_bits) - 1) return std::nan("");
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mant_bits);
  return std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.mant_bits), static_cast<int>(e) - f.bias);
}

// Finite non-negative codes in increasing value order (code order for these formats).
inline std::vector<uint32_t> FiniteMagnitudes(const FormatSpec& f) {
  std::vector<uint32_t> r;
  const uint32_t n = 1u << (f.exp_bits + f.mant_bits);
  for (uint32_t c = 0; c < n; ++c)
    if (std::isfinite(ValueOfMagnitude(f, c))) r.push_back(c);
  return r;
}

// Round |x| (finite) to nearest by search; ties to the even code. `overflow` is set when the
// nearest point is beyond the largest finite value (the next grid point above it).
inline uint32_t NearestMagnitude(const FormatSpec& f, double a, bool* overflow) {
  const std::vector<uint32_t> codes = FiniteMagnitudes(f);
  const uint32_t top = codes.back();
  // The grid point after the largest value, at the top binade's spacing.
  const double max_v = ValueOfMagnitude(f, top);
  const double spacing = max_v - ValueOfMagnitude(f, top - 1);
  uint32_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  *overflow = a >= max_v + spacing;  // at or past the next grid point (distances lose precision there)
  if (*overflow) return top;
  for (uint32_t c : codes) {
    const double d = std::fabs(a - ValueOfMagnitude(f, c));
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  const double d_over = std::fabs(a - (max_v + spacing));
  if (d_over < best_d || (d_over == best_d && ((top + 1) & 1u) == 0)) *overflow = true;
  return best;
}

// A float32 tensor's values rounded to T (BFloat16, Float16), same shape.
template <typename T>
Tensor Narrowed(const Tensor& f) {
  std::vector<T> v;
  for (int64_t i = 0; i < f.numel(); ++i) v.push_back(T(f.data<float>()[i]));
  return Tensor::FromVector<T>(v, f.shape());
}

}  // namespace tob::testing
