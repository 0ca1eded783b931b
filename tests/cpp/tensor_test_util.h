// Shared reference helpers for the tensor (data movement) op tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "op_tester.h"

namespace tob::tensor_test {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

inline Tensor I64(std::vector<int64_t> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return Tensor::FromVector<int64_t>(v, s);
}
inline Tensor I32(std::vector<int32_t> v) {
  Shape s{static_cast<int64_t>(v.size())};
  return Tensor::FromVector<int32_t>(v, s);
}
inline Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
inline Attribute Int(int64_t v) { return Attribute::Int(v); }

inline std::vector<int64_t> Unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return idx;
}
inline int64_t Ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k) flat = flat * shape[k] + idx[k];
  return flat;
}
// Advances a row-major multi-index; false once it wraps to all zeros.
inline bool NextIndex(std::vector<int64_t>& idx, const Shape& shape) {
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (++idx[d] < shape[d]) return true;
    idx[d] = 0;
  }
  return false;
}
// out[i] = in[source(out multi-index)], or `fill` where source returns -1.
inline std::vector<double> MapReference(
    const std::vector<double>& in, const Shape& in_shape, const Shape& out_shape,
    const std::function<bool(const std::vector<int64_t>&, std::vector<int64_t>*)>& source, double fill = 0) {
  std::vector<double> out(static_cast<size_t>(NumElements(out_shape)));
  std::vector<int64_t> src(in_shape.size());
  for (int64_t i = 0; i < NumElements(out_shape); ++i)
    out[i] = source(Unravel(i, out_shape), &src) ? in[Ravel(src, in_shape)] : fill;
  return out;
}
inline std::vector<double> TransposeReference(const std::vector<double>& in, const Shape& shape,
                                              const std::vector<int64_t>& perm, Shape* out_shape) {
  out_shape->clear();
  for (int64_t p : perm) out_shape->push_back(shape[p]);
  return MapReference(in, shape, *out_shape, [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
    for (size_t i = 0; i < perm.size(); ++i) (*s)[perm[i]] = o[i];
    return true;
  });
}

// The error of running an op: must fail, with the node named in the message.
inline void ExpectFailure(OpTester& t, const std::string& fragment) {
  auto r = t.Compute();
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(r.status().message().find("test_node"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
}

// Static shape inference of one node whose inputs have the given types; `constants` (by input
// index) are initializers whose values the shape function may read.
inline StatusOr<std::vector<ValueType>> InferStatic(const std::string& op, int opset,
                                                    const std::vector<ValueType>& types,
                                                    const std::map<int, Tensor>& constants, AttributeMap attrs = {},
                                                    int num_outputs = 1) {
  Graph g;
  g.SetOpset("", opset);
  std::vector<std::string> in_names, out_names;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < types.size(); ++i) {
    std::string name = "in" + std::to_string(i);
    in_names.push_back(name);
    auto it = constants.find(static_cast<int>(i));
    if (it != constants.end()) {
      TOB_ASSIGN_OR_RETURN(auto v, g.AddInitializer(name, it->second));
      (void)v;
      values.push_back(&it->second);
    } else {
      TOB_ASSIGN_OR_RETURN(auto v, g.AddInput(name, types[i]));
      (void)v;
      values.push_back(nullptr);
    }
  }
  for (int i = 0; i < num_outputs; ++i) out_names.push_back("out" + std::to_string(i));
  TOB_ASSIGN_OR_RETURN(Node * node, g.AddNode(op, "", in_names, out_names, std::move(attrs), "test_node"));
  std::vector<const ValueType*> in_types;
  for (Value* v : node->inputs()) in_types.push_back(&v->type());
  InferenceContext ctx(*node, opset, in_types, values);
  TOB_RETURN_IF_ERROR(OpSchemaRegistry::Global().Infer(ctx));
  return ctx.output_types();
}

inline ValueType F32(Dims d) { return ValueType(DType::kFloat32, std::move(d)); }
inline ValueType I64Type(Dims d) { return ValueType(DType::kInt64, std::move(d)); }

// ---------------------------------------------------------------- Reshape family

}  // namespace tob::tensor_test
