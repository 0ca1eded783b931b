#include "ir/attribute.h"

#include <algorithm>
#include <cstring>

namespace tob {

const char* AttrTypeName(AttrType t) {
  switch (t) {
    case AttrType::kUndefined: return "UNDEFINED";
    case AttrType::kFloat: return "FLOAT";
    case AttrType::kInt: return "INT";
    case AttrType::kString: return "STRING";
    case AttrType::kTensor: return "TENSOR";
    case AttrType::kGraph: return "GRAPH";
    case AttrType::kFloats: return "FLOATS";
    case AttrType::kInts: return "INTS";
    case AttrType::kStrings: return "STRINGS";
    case AttrType::kTensors: return "TENSORS";
    case AttrType::kGraphs: return "GRAPHS";
    case AttrType::kTypeProto: return "TYPE_PROTO";
  }
  return "UNKNOWN";
}

bool Attribute::operator==(const Attribute& o) const {
  if (type != o.type) return false;
  switch (type) {
    case AttrType::kFloat: return std::memcmp(&f, &o.f, sizeof(f)) == 0;
    case AttrType::kInt: return i == o.i;
    case AttrType::kString: return s == o.s;
    case AttrType::kFloats:
      return floats.size() == o.floats.size() &&
             std::memcmp(floats.data(), o.floats.data(), floats.size() * sizeof(float)) == 0;
    case AttrType::kInts: return ints == o.ints;
    case AttrType::kStrings: return strings == o.strings;
    case AttrType::kTensor: {
      if (t.dtype() != o.t.dtype() || t.shape() != o.t.shape()) return false;
      if (t.dtype() != DType::kString) return std::memcmp(t.raw_data(), o.t.raw_data(), t.nbytes()) == 0;
      const std::string* a = t.data<std::string>();
      const std::string* b = o.t.data<std::string>();
      return std::equal(a, a + t.numel(), b);
    }
    case AttrType::kTypeProto: {
      const ValueType& a = type_proto;
      const ValueType& b = o.type_proto;
      return a.dtype == b.dtype && a.kind == b.kind && a.optional == b.optional && a.shape == b.shape;
    }
    default: return false;  // graphs/tensor lists are never considered equal
  }
}

std::string Attribute::ToString() const {
  auto join = [](const auto& v) {
    std::string r = "[";
    for (size_t k = 0; k < v.size(); ++k) r += StrCat(k ? "," : "", v[k]);
    return r + "]";
  };
  switch (type) {
    case AttrType::kFloat: return StrCat(f);
    case AttrType::kInt: return StrCat(i);
    case AttrType::kString: return "\"" + s + "\"";
    case AttrType::kFloats: return join(floats);
    case AttrType::kInts: return join(ints);
    case AttrType::kStrings: return join(strings);
    case AttrType::kTensor: return StrCat("tensor<", DTypeName(t.dtype()), ShapeToString(t.shape()), ">");
    case AttrType::kTypeProto: return StrCat("type<", type_proto.ToString(), ">");
    default: return AttrTypeName(type);
  }
}

}  // namespace tob
