// Element types. The numeric codes are ONNX TensorProto.DataType codes, so the binding and the
// ONNX loader need no translation table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/half.h"

namespace tob {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

// Bytes per element; 0 for undefined. A string element is a std::string object (the tensor owns
// it: Tensor::Allocate constructs and its buffer destroys them), so string data is never moved
// by memcpy (core/tensor.h, CopyTensorData).
size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "float32", "int64", ...
bool IsFloatingPoint(DType t);   // float16/bfloat16/float32/float64
bool IsSignedInteger(DType t);
bool IsUnsignedInteger(DType t);
// DType from an ONNX TensorProto code; kUndefined when the code is not one we know.
DType DTypeFromOnnx(int32_t code);

template <typename T>
struct DTypeTraits;
#define TOB_DTYPE_TRAIT(CppType, Enum)          \
  template <>                                   \
  struct DTypeTraits<CppType> {                 \
    static constexpr DType kType = DType::Enum; \
  };
TOB_DTYPE_TRAIT(float, kFloat32)
TOB_DTYPE_TRAIT(double, kFloat64)
TOB_DTYPE_TRAIT(Float16, kFloat16)
TOB_DTYPE_TRAIT(BFloat16, kBFloat16)
TOB_DTYPE_TRAIT(int8_t, kInt8)
TOB_DTYPE_TRAIT(uint8_t, kUInt8)
TOB_DTYPE_TRAIT(int16_t, kInt16)
TOB_DTYPE_TRAIT(uint16_t, kUInt16)
TOB_DTYPE_TRAIT(int32_t, kInt32)
TOB_DTYPE_TRAIT(uint32_t, kUInt32)
TOB_DTYPE_TRAIT(int64_t, kInt64)
TOB_DTYPE_TRAIT(uint64_t, kUInt64)
TOB_DTYPE_TRAIT(bool, kBool)
TOB_DTYPE_TRAIT(std::string, kString)
#undef TOB_DTYPE_TRAIT

template <typename T>
constexpr DType DTypeOf() {
  return DTypeTraits<T>::kType;
}

// Type sets used by kernel registrations.
const std::vector<DType>& FloatTypes();         // float32, float64, float16, bfloat16
const std::vector<DType>& IntegerTypes();       // int8..int64, uint8..uint64
const std::vector<DType>& NumericTypes();       // FloatTypes + IntegerTypes
const std::vector<DType>& AllTypes();           // NumericTypes + bool
const std::vector<DType>& AllTypesAndString();  // AllTypes + string (the data-movement ops)

// Calls fn.template operator()<T>() for the C++ type of `t`; returns false when `t` is not one
// of the types in the pack. Used by kernels to dispatch once per Compute.
template <typename... Ts, typename Fn>
bool DispatchDType(DType t, Fn&& fn) {
  bool done = false;
  ((done = done || (t == DTypeOf<Ts>() ? (fn.template operator()<Ts>(), true) : false)), ...);
  return done;
}

}  // namespace tob
