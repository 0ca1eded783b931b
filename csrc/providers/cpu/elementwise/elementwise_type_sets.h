// What the elementwise kernel files' registrations share: the ONNX type sets by name, and one
// registration per opset range of an op whose versions differ only in their type set.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::ew {

template <typename... Ts>
std::vector<DType> DTypes(TypeList<Ts...>) {
  return {DTypeOf<Ts>()...};
}

// The ONNX type sets the elementwise ops use, by name.
inline std::vector<DType> F3() { return {DType::kFloat32, DType::kFloat64, DType::kFloat16}; }
inline std::vector<DType> F4() { return DTypes(FloatList{}); }
inline std::vector<DType> Numeric() { return DTypes(NumericList{}); }
inline std::vector<DType> NumericNoBf16() {
  std::vector<DType> v = Numeric();
  std::erase(v, DType::kBFloat16);
  return v;
}
inline std::vector<DType> With(std::vector<DType> v, std::vector<DType> more) {
  v.insert(v.end(), more.begin(), more.end());
  return v;
}

// An op whose versions differ only in their type set: one def per [since_i, since_{i+1} - 1].
struct VersionTypes {
  int since;
  std::vector<DType> types;
};

template <typename K>
void RegisterByVersion(KernelRegistry& registry, const std::string& op, const std::vector<int>& inputs,
                       const std::vector<VersionTypes>& versions, const std::string& domain = "") {
  for (size_t i = 0; i < versions.size(); ++i) {
    int end = i + 1 < versions.size() ? versions[i + 1].since - 1 : kMaxOpset;
    registry.Register(
        Def(op).Domain(domain).Versions(versions[i].since, end).Constraint("T", inputs, versions[i].types).Kernel<K>());
  }
}

}  // namespace tob::ew
