// Static type of a graph value: dtype and a shape whose dims may be symbolic ("batch", "seq").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tob {

// A dimension: a known size, a named symbol, or unknown (neither).
struct Dim {
  int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: implicit from a size
  static Dim Symbol(std::string s) {
    Dim d;
    d.symbol = std::move(s);
    return d;
  }
  static Dim Unknown() { return Dim(); }

  bool is_known() const { return value >= 0; }
  bool is_symbolic() const { return value < 0 && !symbol.empty(); }
  bool operator==(const Dim& o) const { return is_known() ? value == o.value : (is_symbolic() && symbol == o.symbol); }
  bool operator!=(const Dim& o) const { return !(*this == o); }
  std::string ToString() const;
};

using Dims = std::vector<Dim>;

std::string DimsToString(const Dims& dims);
Dims DimsFromShape(const Shape& shape);
// The concrete shape when every dim is known.
std::optional<Shape> ConcreteShape(const Dims& dims);

// What kind of value a graph edge carries (ONNX's type protos): a tensor, or a sequence of
// tensors of one element type. `optional` wraps either: the value may be absent (ONNX's
// optional(tensor) / optional(seq(tensor))). Maps and nested sequences are not supported.
enum class ValueKind : uint8_t { kTensor = 0, kSequence = 1 };

struct ValueType {
  // A tensor's element type; a sequence's: the element type of its tensors.
  DType dtype = DType::kUndefined;
  // A tensor's shape; a sequence's: the shape every tensor of it has, where that is known
  // (nullopt otherwise: tensors of a sequence may differ in shape).
  std::optional<Dims> shape;  // nullopt: rank unknown
  ValueKind kind = ValueKind::kTensor;
  bool optional = false;

  ValueType() = default;
  ValueType(DType t, std::optional<Dims> s) : dtype(t), shape(std::move(s)) {}
  static ValueType OfTensor(const Tensor& t) { return ValueType(t.dtype(), DimsFromShape(t.shape())); }
  static ValueType Sequence(DType elem, std::optional<Dims> elem_shape = std::nullopt) {
    ValueType v(elem, std::move(elem_shape));
    v.kind = ValueKind::kSequence;
    return v;
  }
  // optional(this type).
  ValueType AsOptional() const {
    ValueType v = *this;
    v.optional = true;
    return v;
  }
  // The type an optional holds when it holds a value.
  ValueType Element() const {
    ValueType v = *this;
    v.optional = false;
    return v;
  }

  // A plain tensor: neither a sequence nor an optional. Only such values reach the ops that do
  // not declare OpSchema::non_tensor_values.
  bool is_tensor() const { return kind == ValueKind::kTensor && !optional; }
  bool is_sequence() const { return kind == ValueKind::kSequence; }
  bool has_rank() const { return shape.has_value(); }
  int64_t rank() const { return shape ? static_cast<int64_t>(shape->size()) : -1; }
  // "float32[2, 3]", "seq(float32[?])", "optional(int64[])", "optional(seq(string))".
  std::string ToString() const;
  // "tensor", "sequence", "optional tensor", "optional sequence": for error messages.
  const char* KindName() const;
};

}  // namespace tob
