#include "ir/value_type.h"

namespace tob {

std::string Dim::ToString() const {
  if (is_known()) return std::to_string(value);
  return is_symbolic() ? symbol : "?";
}

std::string DimsToString(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + dims[i].ToString();
  return s + "]";
}

Dims DimsFromShape(const Shape& shape) {
  Dims d;
  d.reserve(shape.size());
  for (int64_t v : shape) d.emplace_back(v);
  return d;
}

std::optional<Shape> ConcreteShape(const Dims& dims) {
  Shape s;
  s.reserve(dims.size());
  for (const Dim& d : dims) {
    if (!d.is_known()) return std::nullopt;
    s.push_back(d.value);
  }
  return s;
}

std::string ValueType::ToString() const {
  std::string t = StrCat(
      DTypeName(dtype), shape ? DimsToString(*shape) : std::string(kind == ValueKind::kTensor ? "[rank unknown]" : ""));
  if (kind == ValueKind::kSequence) t = StrCat("seq(", t, ")");
  return optional ? StrCat("optional(", t, ")") : t;
}

const char* ValueType::KindName() const {
  if (kind == ValueKind::kSequence) return optional ? "optional sequence" : "sequence";
  return optional ? "optional tensor" : "tensor";
}

}  // namespace tob
