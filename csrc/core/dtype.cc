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
    case DType::kBool: return 1;
    case DType::kString: return sizeof(std::string);
    default: return 0;
  }
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
    case 16: return static_cast<DType>(code);
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
