// Node attributes. AttrType codes are ONNX AttributeProto.AttributeType codes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/value_type.h"

namespace tob {

enum class AttrType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kTensors = 9,
  kTypeProto = 13,  // a type (Optional's `type`): a ValueType
};

const char* AttrTypeName(AttrType t);

struct Attribute {
  AttrType type = AttrType::kUndefined;
  float f = 0.f;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  ValueType type_proto;

  static Attribute Float(float v) {
    Attribute a;
    a.type = AttrType::kFloat;
    a.f = v;
    return a;
  }
  static Attribute Int(int64_t v) {
    Attribute a;
    a.type = AttrType::kInt;
    a.i = v;
    return a;
  }
  static Attribute String(std::string v) {
    Attribute a;
    a.type = AttrType::kString;
    a.s = std::move(v);
    return a;
  }
  static Attribute TensorValue(Tensor v) {
    Attribute a;
    a.type = AttrType::kTensor;
    a.t = std::move(v);
    return a;
  }
  static Attribute Floats(std::vector<float> v) {
    Attribute a;
    a.type = AttrType::kFloats;
    a.floats = std::move(v);
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.type = AttrType::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute Strings(std::vector<std::string> v) {
    Attribute a;
    a.type = AttrType::kStrings;
    a.strings = std::move(v);
    return a;
  }
  static Attribute TypeProto(ValueType v) {
    Attribute a;
    a.type = AttrType::kTypeProto;
    a.type_proto = std::move(v);
    return a;
  }

  // Structural equality (used by CSE); tensors compare by dtype, shape and bytes (strings by value).
  bool operator==(const Attribute& o) const;
  std::string ToString() const;
};

}  // namespace tob
