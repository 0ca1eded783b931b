// OpTester: runs one node through the kernel registry the way the executor does (schema shape
// function -> allocate outputs -> Compute) on every provider that has a kernel for it, and
// compares each output with a reference computed by the test (float64 where it matters).
// Device providers (CUDA, when compiled in and a device is visible) get their inputs copied to
// the device and their outputs copied back before the comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "framework/kernel_registry.h"
#include "framework/thread_pool.h"
#include "ir/graph.h"
#include "ops/op_schema.h"
#include "partition/partitioner.h"
#include "providers/cpu/cpu_execution_provider.h"
#ifdef TOB_WITH_CUDA
#include "providers/cuda/cuda_provider.h"
#endif

namespace tob::testing {

// Uniform values in [lo, hi) with |v| >= min_abs (non-zero by default), as T.
template <typename T>
Tensor RandomTensor(const Shape& shape, double lo = -2.0, double hi = 2.0, uint32_t seed = 1234,
                    double min_abs = 0.05) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(static_cast<size_t>(NumElements(shape)));
  for (auto& x : v) {
    double d = dist(gen);
    while (std::fabs(d) < min_abs && hi - lo > 4 * min_abs) d = dist(gen);
    x = static_cast<T>(d);
  }
  return Tensor::FromVector<T>(v, shape);
}

// Reads any numeric tensor as doubles (the reference side of comparisons).
inline std::vector<double> ToDoubles(const Tensor& t) {
  std::vector<double> r(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) r[i] = t.ElementAsDouble(i);
  return r;
}

inline void ExpectClose(const Tensor& actual, const Shape& expected_shape, const std::vector<double>& expected,
                        double rtol, double atol, const std::string& what = "") {
  ASSERT_EQ(actual.shape(), expected_shape) << what << " shape " << ShapeToString(actual.shape());
  ASSERT_EQ(static_cast<size_t>(actual.numel()), expected.size()) << what;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.ElementAsDouble(i), e = expected[i];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << what << " at " << i;
      continue;
    }
    if (std::isinf(e)) {  // masked scores: the same infinity, no difference to take
      EXPECT_EQ(a, e) << what << " at " << i;
      continue;
    }
    ASSERT_LE(std::fabs(a - e), atol + rtol * std::fabs(e))
        << what << " element " << i << ": got " << a << ", expected " << e;
  }
}

class OpTester {
 public:
  explicit OpTester(std::string op_type, int opset = 17, std::string domain = "")
      : op_type_(std::move(op_type)), domain_(std::move(domain)), opset_(opset) {}

  OpTester& Attr(const std::string& name, Attribute a) {
    attrs_[name] = std::move(a);
    return *this;
  }
  // An omitted optional input: Input("", Tensor()).
  OpTester& Input(const std::string& name, Tensor t) {
    inputs_.push_back({name, std::move(t)});
    return *this;
  }
  // Marks input i as a constant initializer (so shape functions see its value statically too).
  OpTester& ConstantInput(const std::string& name, Tensor t) {
    inputs_.push_back({name, std::move(t), true});
    return *this;
  }
  OpTester& Output(const std::string& name, Shape shape, std::vector<double> expected, double rtol = 1e-5,
                   double atol = 1e-6) {
    outputs_.push_back({name, std::move(shape), std::move(expected), rtol, atol});
    return *this;
  }
  OpTester& Threads(int n) {
    threads_ = n;
    return *this;
  }

  // Runs on every provider that registers a kernel (and, for a device provider, has a device);
  // each must match. Fails the test if none.
  void Run() {
    int providers_run = 0;
    for (const char* provider : {kCpuProvider, kCudaProvider}) {
      auto outs = Compute(provider);
      if (!outs.ok() && outs.status().code() == StatusCode::kNotImplemented && std::string(provider) != kCpuProvider)
        continue;
      ASSERT_TRUE(outs.ok()) << op_type_ << " on " << provider << ": " << outs.status().ToString();
      ++providers_run;
      for (size_t i = 0; i < outputs_.size(); ++i)
        ExpectClose(outs.value()[i], outputs_[i].shape, outputs_[i].expected, outputs_[i].rtol, outputs_[i].atol,
                    op_type_ + " output '" + outputs_[i].name + "' on " + provider);
    }
    EXPECT_GT(providers_run, 0) << "no provider ran " << op_type_;
  }

  // Builds the one-node graph, infers shapes, creates the kernel, allocates outputs, computes.
  StatusOr<std::vector<Tensor>> Compute(const std::string& provider = kCpuProvider) {
    graph_ = std::make_unique<Graph>();
    graph_->SetOpset(domain_, opset_);
    if (!domain_.empty()) graph_->SetOpset("", 17);
    std::vector<std::string> in_names, out_names;
    std::vector<const Tensor*> values;
    for (auto& in : inputs_) {
      in_names.push_back(in.name);
      if (in.name.empty()) {
        values.push_back(nullptr);
        continue;
      }
      if (in.constant) {
        TOB_ASSIGN_OR_RETURN(auto v, graph_->AddInitializer(in.name, in.tensor));
        (void)v;
      } else {
        TOB_ASSIGN_OR_RETURN(auto v, graph_->AddInput(in.name, ValueType::OfTensor(in.tensor)));
        (void)v;
      }
      values.push_back(&in.tensor);
    }
    for (auto& out : outputs_) out_names.push_back(out.name);
    TOB_ASSIGN_OR_RETURN(Node * node, graph_->AddNode(op_type_, domain_, in_names, out_names, attrs_, "test_node"));
    std::vector<const ValueType*> types;
    for (Value* v : node->inputs()) types.push_back(v ? &v->type() : nullptr);
    InferenceContext ictx(*node, opset_, types, values);
    TOB_RETURN_IF_ERROR(OpSchemaRegistry::Global().Infer(ictx));
    std::vector<DType> dtypes;
    for (auto* t : types) dtypes.push_back(t ? t->dtype : DType::kUndefined);
    std::string why;
    const KernelDef* def = KernelRegistry::Global().Find(provider, domain_, op_type_, opset_, dtypes, &why);
    if (def == nullptr) return NotImplemented(why);
    TOB_ASSIGN_OR_RETURN(auto ep, MakeProvider(provider));
    TOB_ASSIGN_OR_RETURN(auto kernel, def->factory(*node));
    const bool on_device = ep->device().type != DeviceType::kCPU;
    std::vector<Tensor> device_inputs;
    device_inputs.reserve(values.size());
    for (const Tensor*& v : values) {
      if (v == nullptr || !on_device) continue;
      TOB_ASSIGN_OR_RETURN(Tensor d, Tensor::Allocate(v->dtype(), v->shape(), ep->allocator()));
      TOB_RETURN_IF_ERROR(ep->CopyTensor(*v, d));
      device_inputs.push_back(std::move(d));
      v = &device_inputs.back();
    }
    std::vector<Tensor> outs;
    // A kernel that allocates its outputs (their sizes depend on the values) gets undefined
    // tensors to assign, as the executor hands them over.
    if (def->kernel_allocates_outputs) outs.resize(static_cast<size_t>(ictx.num_outputs()));
    for (int i = 0; i < ictx.num_outputs() && !def->kernel_allocates_outputs; ++i) {
      const ValueType& t = ictx.output_types()[i];
      if (!t.shape) return RuntimeError("shape function left output ", i, " without a shape");
      auto shape = ConcreteShape(*t.shape);
      if (!shape) return RuntimeError("shape function left output ", i, " symbolic: ", DimsToString(*t.shape));
      TOB_ASSIGN_OR_RETURN(Tensor o, Tensor::Allocate(t.dtype, *shape, ep->allocator()));
      outs.push_back(std::move(o));
    }
    std::vector<Tensor*> out_ptrs;
    for (auto& o : outs) out_ptrs.push_back(&o);
    ThreadPool pool(threads_);
    KernelContext kctx(*node, values, out_ptrs, &pool, ep->allocator());
    TOB_RETURN_IF_ERROR(kernel->Compute(kctx));
    if (!on_device) return outs;
    std::vector<Tensor> host_outs;
    for (const Tensor& o : outs) {
      TOB_ASSIGN_OR_RETURN(Tensor h, Tensor::Allocate(o.dtype(), o.shape(), CpuAllocator::Default()));
      TOB_RETURN_IF_ERROR(ep->CopyTensor(o, h));
      host_outs.push_back(std::move(h));
    }
    return host_outs;
  }

 private:
  // The provider a kernel of `provider` runs under; kNotImplemented (the provider is skipped)
  // when it is not compiled in or has no device here.
  static StatusOr<std::unique_ptr<ExecutionProvider>> MakeProvider(const std::string& provider) {
    if (provider == kCpuProvider) return std::unique_ptr<ExecutionProvider>(new CpuExecutionProvider());
#ifdef TOB_WITH_CUDA
    if (provider == kCudaProvider) {
      if (!CudaDeviceAvailable()) return NotImplemented("no CUDA device");
      return std::unique_ptr<ExecutionProvider>(new CudaExecutionProvider(0));
    }
#endif
    return NotImplemented(provider, " is not available in this build");
  }

  struct In {
    std::string name;
    Tensor tensor;
    bool constant = false;
  };
  struct Out {
    std::string name;
    Shape shape;
    std::vector<double> expected;
    double rtol, atol;
  };
  std::string op_type_, domain_;
  int opset_;
  int threads_ = 2;
  AttributeMap attrs_;
  std::vector<In> inputs_;
  std::vector<Out> outputs_;
  std::unique_ptr<Graph> graph_;
};

}  // namespace tob::testing
