#include "providers/cpu/elementwise/low_precision_convert.h"

#include <array>

namespace tob::lowp {

namespace {

// Every byte's float32 value, per one-byte type (float8 kinds, float8e8m0): decoding is a lookup.
using ByteTable = std::array<float, 256>;

const ByteTable& TableOf(DType t) {
  static const auto make = [](auto decode) {
    ByteTable table{};
    for (int b = 0; b < 256; ++b) table[b] = decode(static_cast<uint8_t>(b));
    return table;
  };
  static const ByteTable e4m3fn = make([](uint8_t b) { return Float8ToFloat(b, Float8Kind::kE4M3FN); });
  static const ByteTable e4m3fnuz = make([](uint8_t b) { return Float8ToFloat(b, Float8Kind::kE4M3FNUZ); });
  static const ByteTable e5m2 = make([](uint8_t b) { return Float8ToFloat(b, Float8Kind::kE5M2); });
  static const ByteTable e5m2fnuz = make([](uint8_t b) { return Float8ToFloat(b, Float8Kind::kE5M2FNUZ); });
  static const ByteTable e8m0 = make([](uint8_t b) { return Float8E8M0ToFloat(b); });
  switch (t) {
    case DType::kFloat8E4M3FNUZ: return e4m3fnuz;
    case DType::kFloat8E5M2: return e5m2;
    case DType::kFloat8E5M2FNUZ: return e5m2fnuz;
    case DType::kFloat8E8M0: return e8m0;
    default: return e4m3fn;
  }
}

}  // namespace

void DecodeToFloat(DType t, const void* data, int64_t begin, int64_t n, float* out) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (t == DType::kFloat4E2M1) {
    for (int64_t i = 0; i < n; ++i) out[i] = Float4E2M1ToFloat(LoadPackedCode(bytes, begin + i, 4));
    return;
  }
  if (IsIntegerLowPrecision(t)) {
    const int bits = DTypeBits(t);
    const bool is_signed = t == DType::kInt4 || t == DType::kInt2;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t code = LoadPackedCode(bytes, begin + i, bits);
      out[i] = static_cast<float>(is_signed ? SignExtendCode(code, bits) : code);
    }
    return;
  }
  const ByteTable& table = TableOf(t);
  for (int64_t i = 0; i < n; ++i) out[i] = table[bytes[begin + i]];
}

void DecodeToInt(DType t, const void* data, int64_t begin, int64_t n, int32_t* out) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  const int bits = DTypeBits(t);
  const bool is_signed = t == DType::kInt4 || t == DType::kInt2;
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t code = LoadPackedCode(bytes, begin + i, bits);
    out[i] = is_signed ? SignExtendCode(code, bits) : static_cast<int32_t>(code);
  }
}

}  // namespace tob::lowp
