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

struct ValueType {
  DType dtype = DType::kUndefined;
  std::optional<Dims> shape;  // nullopt: rank unknown

  ValueType() = default;
  ValueType(DType t, std::optional<Dims> s) : dtype(t), shape(std::move(s)) {}
  static ValueType OfTensor(const Tensor& t) { return ValueType(t.dtype(), DimsFromShape(t.shape())); }

  bool has_rank() const { return shape.has_value(); }
  int64_t rank() const { return shape ? static_cast<int64_t>(shape->size()) : -1; }
  std::string ToString() const;
};

}  // namespace tob
