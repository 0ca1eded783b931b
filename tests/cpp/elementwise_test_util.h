// Float64 references and small tensors for the elementwise op tests.
#pragma once

#include <functional>
#include <vector>

#include "op_tester.h"

namespace tob::testing::elementwise {

using Fn1 = std::function<double(double)>;
using Fn2 = std::function<double(double, double)>;

// A binary op and its float64 reference.
struct BinaryCase {
  const char* op;
  Fn2 ref;
};

// Offset into an input of shape `in` for the output element at `linear` (numpy broadcasting).
inline int64_t BroadcastOffset(const Shape& in, const Shape& out, int64_t linear) {
  int64_t offset = 0, in_stride = 1;
  size_t pad = out.size() - in.size();
  for (size_t d = out.size(); d-- > 0;) {
    int64_t idx = linear % out[d];
    linear /= out[d];
    if (d >= pad) {
      int64_t dim = in[d - pad];
      if (dim != 1) offset += idx * in_stride;
      in_stride *= dim;
    }
  }
  return offset;
}

inline std::vector<double> Ref1(const Tensor& x, const Fn1& f) {
  std::vector<double> r;
  for (double v : ToDoubles(x)) r.push_back(f(v));
  return r;
}

inline std::vector<double> Ref2(const Tensor& a, const Tensor& b, const Shape& out, const Fn2& f) {
  std::vector<double> av = ToDoubles(a), bv = ToDoubles(b), r;
  for (int64_t i = 0; i < NumElements(out); ++i)
    r.push_back(f(av[BroadcastOffset(a.shape(), out, i)], bv[BroadcastOffset(b.shape(), out, i)]));
  return r;
}

template <typename T>
Tensor Values(std::vector<double> v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  std::vector<T> t;
  for (double d : v) t.push_back(static_cast<T>(d));
  return Tensor::FromVector<T>(t, shape);
}

}  // namespace tob::testing::elementwise
