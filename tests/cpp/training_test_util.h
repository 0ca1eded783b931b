// Shared helpers of the training op tests (gradients and losses): typed tensors from float64
// values, central finite differences, and running a kernel with some outputs omitted.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::training_test {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

template <typename T>
Tensor FromDoubles(const std::vector<double>& v, const Shape& shape) {
  std::vector<T> t;
  t.reserve(v.size());
  for (double d : v) t.push_back(static_cast<T>(d));
  return Tensor::FromVector<T>(t, shape);
}

// The values a tensor of type T holds for `v` (rounded as storing them would).
template <typename T>
std::vector<double> Rounded(const std::vector<double>& v) {
  return ToDoubles(FromDoubles<T>(v, {static_cast<int64_t>(v.size())}));
}

inline Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }
inline Attribute Int(int64_t v) { return Attribute::Int(v); }

// d f / d x[i] for every i by central differences (f evaluated in float64).
inline std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                           std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double up = f(x);
    x[i] = xi - h;
    const double down = f(x);
    x[i] = xi;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// Runs `op` on the CPU with the outputs marked false in `requested` omitted (nullptr in the
// kernel context, as the contract of KernelContext::output defines an omitted output).
inline StatusOr<std::vector<Tensor>> RunWithOutputs(const std::string& op, const std::string& domain, int opset,
                                                    const std::vector<Tensor>& inputs, const AttributeMap& attrs,
                                                    const std::vector<bool>& requested, int threads = 2) {
  Graph g;
  g.SetOpset(domain, opset);
  std::vector<std::string> in_names, out_names;
  std::vector<const Tensor*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_names.push_back("in" + std::to_string(i));
    TOB_ASSIGN_OR_RETURN(auto v, g.AddInput(in_names.back(), ValueType::OfTensor(inputs[i])));
    (void)v;
    values.push_back(&inputs[i]);
  }
  for (size_t i = 0; i < requested.size(); ++i) out_names.push_back("out" + std::to_string(i));
  TOB_ASSIGN_OR_RETURN(Node * node, g.AddNode(op, domain, in_names, out_names, attrs, "test_node"));
  std::vector<const ValueType*> types;
  for (Value* v : node->inputs()) types.push_back(&v->type());
  InferenceContext ictx(*node, opset, types, values);
  TOB_RETURN_IF_ERROR(OpSchemaRegistry::Global().Infer(ictx));
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) dtypes.push_back(t.dtype());
  std::string why;
  const KernelDef* def = KernelRegistry::Global().Find(kCpuProvider, domain, op, opset, dtypes, &why);
  if (def == nullptr) return NotImplemented(why);
  TOB_ASSIGN_OR_RETURN(auto kernel, def->factory(*node));
  std::vector<Tensor> outs(requested.size());
  std::vector<Tensor*> out_ptrs(requested.size(), nullptr);
  for (size_t i = 0; i < requested.size(); ++i) {
    if (!requested[i]) continue;
    const ValueType& t = ictx.output_types()[i];
    TOB_ASSIGN_OR_RETURN(outs[i], Tensor::Allocate(t.dtype, *ConcreteShape(*t.shape), CpuAllocator::Default()));
    out_ptrs[i] = &outs[i];
  }
  ThreadPool pool(threads);
  KernelContext kctx(*node, values, out_ptrs, &pool, CpuAllocator::Default());
  TOB_RETURN_IF_ERROR(kernel->Compute(kctx));
  return outs;
}

// The error of running an op: must fail, with the node and `fragment` in the message.
inline void ExpectFailure(OpTester& t, const std::string& fragment) {
  auto r = t.Compute();
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << fragment << "'";
  EXPECT_NE(r.status().message().find("test_node"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
}

}  // namespace tob::training_test
