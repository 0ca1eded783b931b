#include "core/dtype.h"

namespace tob {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64:
    case DType::kUInt64: return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kInt16:
    case DType::kUInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0: return 1;
    case DType::kString: return sizeof(std::string);
    default: return 0;
  }
}

int DTypeBits(DType t) {
  switch (t) {
    case DType::kUInt4:
    case DType::kInt4:
    case DType::kFloat4E2M1: return 4;
    case DType::kUInt2:
    case DType::kInt2: return 2;
    default: return static_cast<int>(DTypeSize(t)) * 8;
  }
}

size_t DTypeStorageBytes(DType t, int64_t n) {
  if (n <= 0) return 0;
  if (IsPackedDType(t)) return (static_cast<size_t>(n) * static_cast<size_t>(DTypeBits(t)) + 7) / 8;
  return static_cast<size_t>(n) * DTypeSize(t);
}

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kUndefined: return "undefined";
    case DType::kFloat32: return "float32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "float64";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat8E4M3FN: return "float8e4m3fn";
    case DType::kFloat8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::kFloat8E5M2: return "float8e5m2";
    case DType::kFloat8E5M2FNUZ: return "float8e5m2fnuz";
    case DType::kUInt4: return "uint4";
    case DType::kInt4: return "int4";
    case DType::kFloat4E2M1: return "float4e2m1";
    case DType::kFloat8E8M0: return "float8e8m0";
    case DType::kUInt2: return "uint2";
    case DType::kInt2: return "int2";
  }
  return "unknown";
}

bool IsFloatingPoint(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}
bool IsSignedInteger(DType t) {
  return t == DType::kInt8 || t == DType::kInt16 || t == DType::kInt32 || t == DType::kInt64;
}
bool IsUnsignedInteger(DType t) {
  return t == DType::kUInt8 || t == DType::kUInt16 || t == DType::kUInt32 || t == DType::kUInt64;
}
bool IsPackedDType(DType t) {
  return t == DType::kUInt4 || t == DType::kInt4 || t == DType::kFloat4E2M1 || t == DType::kUInt2 || t == DType::kInt2;
}
bool IsFloat8(DType t) {
  return t == DType::kFloat8E4M3FN || t == DType::kFloat8E4M3FNUZ || t == DType::kFloat8E5M2 ||
         t == DType::kFloat8E5M2FNUZ;
}
bool IsLowPrecision(DType t) {
  const int32_t code = static_cast<int32_t>(t);
  return code >= 17 && code <= 26;
}

DType DTypeFromOnnx(int32_t code) {
  switch (code) {
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 7:
    case 8:
    case 9:
    case 10:
    case 11:
    case 12:
    case 13:
    case 16:
    case 17:
    case 18:
    case 19:
    case 20:
    case 21:
    case 22:
    case 23:
    case 24:
    case 25:
    case 26: return static_cast<DType>(code);
    default: return DType::kUndefined;
  }
}

const std::vector<DType>& FloatTypes() {
  static const std::vector<DType> v{DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};
  return v;
}
const std::vector<DType>& IntegerTypes() {
  static const std::vector<DType> v{DType::kInt8,  DType::kInt16,  DType::kInt32,  DType::kInt64,
                                    DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64};
  return v;
}
const std::vector<DType>& NumericTypes() {
  static const std::vector<DType> v = [] {
    std::vector<DType> r = FloatTypes();
    r.insert(r.end(), IntegerTypes().begin(), IntegerTypes().end());
    return r;
  }();
  return v;
}
std::vector<DType> LowPrecisionTypesAt(int opset) {
  std::vector<DType> r;
  if (opset >= 19)
    r.insert(r.end(), {DType::kFloat8E4M3FN, DType::kFloat8E4M3FNUZ, DType::kFloat8E5M2, DType::kFloat8E5M2FNUZ});
  if (opset >= 21) r.insert(r.end(), {DType::kUInt4, DType::kInt4});
  if (opset >= 23) r.push_back(DType::kFloat4E2M1);
  if (opset >= 24) r.push_back(DType::kFloat8E8M0);
  if (opset >= 25) r.insert(r.end(), {DType::kUInt2, DType::kInt2});
  return r;
}

const std::vector<DType>& AllTypes() {
  static const std::vector<DType> v = [] {
    std::vector<DType> r = NumericTypes();
    r.push_back(DType::kBool);
    return r;
  }();
  return v;
}

const std::vector<DType>& AllTypesAndString() {
  static const std::vector<DType> v = [] {
    std::vector<DType> r = AllTypes();
    r.push_back(DType::kString);
    return r;
  }();
  return v;
}

}  // namespace tob
