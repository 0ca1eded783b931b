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
  // The low-precision types (onnx 1.18-1.23). The float8 types are one byte per element; the
  // 4-bit and 2-bit types are packed, onnx's layout: element i sits in byte i / (8 / bits), at bit
  // (i % (8 / bits)) * bits (the first element in the low bits), and a tensor's storage is
  // rounded up to whole bytes (DTypeStorageBytes). core/low_precision.h converts them.
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
};

// Bytes per element: 0 for undefined and for the packed sub-byte types, whose elements have no
// byte of their own (buffers are sized with DTypeStorageBytes). A string element is a std::string
// object (the tensor owns it: Tensor::Allocate constructs and its buffer destroys them), so string
// data is never moved by memcpy (core/tensor.h, CopyTensorData).
size_t DTypeSize(DType t);
// Bits per element (4 and 2 for the packed types, 8 * DTypeSize otherwise).
int DTypeBits(DType t);
// Bytes that hold n elements: n * DTypeSize, or n * bits / 8 rounded up for the packed types.
size_t DTypeStorageBytes(DType t, int64_t n);
const char* DTypeName(DType t);   // "float32", "int64", "float8e4m3fn", ...
bool IsFloatingPoint(DType t);    // float16/bfloat16/float32/float64 (not the low-precision floats)
bool IsSignedInteger(DType t);    // int8..int64 (not int4/int2)
bool IsUnsignedInteger(DType t);  // uint8..uint64 (not uint4/uint2)
// The packed sub-byte types: uint4, int4, float4e2m1, uint2, int2.
bool IsPackedDType(DType t);
// float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz (not float8e8m0, a scale type).
bool IsFloat8(DType t);
// Any of the ten low-precision types (codes 17-26).
bool IsLowPrecision(DType t);
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
// The low-precision types an op takes from `opset` on (Cast, QuantizeLinear, ...): float8 from 19,
// uint4/int4 from 21, float4e2m1 from 23, float8e8m0 from 24, uint2/int2 from 25.
std::vector<DType> LowPrecisionTypesAt(int opset);

// Calls fn.template operator()<T>() for the C++ type of `t`; returns false when `t` is not one
// of the types in the pack. Used by kernels to dispatch once per Compute.
template <typename... Ts, typename Fn>
bool DispatchDType(DType t, Fn&& fn) {
  bool done = false;
  ((done = done || (t == DTypeOf<Ts>() ? (fn.template operator()<Ts>(), true) : false)), ...);
  return done;
}

}  // namespace tob
