// What one element of an elementwise kernel computes: storage -> compute type, the scalar functor
// of math/elementwise_math.h (the one the CPU kernels use), compute type ->
// storage. Host/device callable: the .cu kernels call these per element and the CudaMath tests
// call the very same functions on the host.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "kernels/element_type.h"
#include "math/elementwise_math.h"

namespace tob::cuda {

template <typename T>
TOB_HOST_DEVICE inline ComputeType<T> LoadElement(T x) {
  if constexpr (kIs16BitFloat<T>) return static_cast<float>(x);
  else return x;
}

template <typename T>
TOB_HOST_DEVICE inline T StoreElement(ComputeType<T> x) {
  if constexpr (kIs16BitFloat<T>) return T(x);
  else return x;
}

template <typename T, typename Op>
TOB_HOST_DEVICE inline T ApplyUnary(const Op& op, T x) {
  return StoreElement<T>(op(LoadElement(x)));
}

template <typename T, typename Op>
TOB_HOST_DEVICE inline T ApplyBinary(const Op& op, T a, T b) {
  return StoreElement<T>(op(LoadElement(a), LoadElement(b)));
}

// ONNX Cast of one element. Floats go to integers through ew::FloatToInt (NaN -> 0, saturating
// instead of UB), anything goes to bool as x != 0 (so NaN -> true, as numpy), 16-bit floats
// convert through float, integers to integers wrap (C++20 modular conversion).
template <typename To, typename From>
TOB_HOST_DEVICE inline To CastElement(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<From, bool>) {
    return StoreElement<To>(static_cast<ComputeType<To>>(x ? 1 : 0));
  } else if constexpr (std::is_same_v<To, bool>) {
    return LoadElement(x) != ComputeType<From>(0);
  } else if constexpr (kIs16BitFloat<To>) {
    return To(static_cast<float>(LoadElement(x)));
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(LoadElement(x));
  } else if constexpr (std::is_floating_point_v<ComputeType<From>>) {
    return ew::FloatToInt<To>(LoadElement(x));
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace tob::cuda
