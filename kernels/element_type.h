// Element types across the host/device boundary. The codes are ONNX TensorProto codes, the same
// as tob::DType, so the host side converts with a static_cast (checked there by static_asserts);
// device code cannot include the engine's dtype.h (STYLE.md rule 7).
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"

namespace tob::cuda {

enum class ElementType : int32_t {
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kBFloat16 = 16,
};

template <typename T>
constexpr ElementType ElementTypeOf() {
  if constexpr (std::is_same_v<T, float>) return ElementType::kFloat32;
  else if constexpr (std::is_same_v<T, double>) return ElementType::kFloat64;
  else if constexpr (std::is_same_v<T, Float16>) return ElementType::kFloat16;
  else if constexpr (std::is_same_v<T, BFloat16>) return ElementType::kBFloat16;
  else if constexpr (std::is_same_v<T, int8_t>) return ElementType::kInt8;
  else if constexpr (std::is_same_v<T, uint8_t>) return ElementType::kUInt8;
  else if constexpr (std::is_same_v<T, int16_t>) return ElementType::kInt16;
  else if constexpr (std::is_same_v<T, int32_t>) return ElementType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>) return ElementType::kInt64;
  else if constexpr (std::is_same_v<T, bool>) return ElementType::kBool;
  else static_assert(sizeof(T) == 0, "no ElementType for this type");
}

// Calls fn.template operator()<T>() for the storage type T (one of Ts) whose code is `type`;
// false when `type` is none of them. Launchers dispatch once per call with it.
template <typename... Ts, typename Fn>
bool DispatchElementType(ElementType type, Fn&& fn) {
  bool done = false;
  ((done = done || (type == ElementTypeOf<Ts>() ? (fn.template operator()<Ts>(), true) : false)), ...);
  return done;
}

}  // namespace tob::cuda
