// Test-only op schemas and CPU kernels for the optimizer, partitioner and verifier tests. They
// live in registries of their own (PassContext, InferShapes, VerifyGraph and PartitionGraph all
// take the registries to use), so these tests depend neither on the real kernel families nor on
// what they register, and nothing here leaks into the global registries.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/kernel_registry.h"
#include "ir/graph.h"
#include "ir/graph_printer.h"
#include "ops/op_schema.h"
#include "optimizer/pass.h"

namespace tob {

void RegisterRuntimeSchemas(OpSchemaRegistry& registry);

namespace testing {

inline ValueType F32(Dims dims) { return ValueType(DType::kFloat32, std::move(dims)); }

inline OpSchema Schema(std::string op, int min_in, int max_in, ShapeFunction infer, int min_out = 1, int max_out = 1,
                       std::string domain = "") {
  OpSchema s;
  s.domain = std::move(domain);
  s.op_type = std::move(op);
  s.min_inputs = min_in;
  s.max_inputs = max_in;
  s.min_outputs = min_out;
  s.max_outputs = max_out;
  s.infer = std::move(infer);
  return s;
}

// out = f(a) or f(a, b) on float32, b broadcast when it has one element.
template <typename Fn>
class FloatMapKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<FloatMapKernel>(n); }
  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor* b = ctx.input(1);
    Tensor& out = *ctx.output(0);
    if (b && b->numel() != a.numel() && b->numel() != 1) return ctx.Fail("test kernel: unsupported broadcast");
    for (int64_t i = 0; i < a.numel(); ++i) {
      float y = b ? b->data<float>()[b->numel() == 1 ? 0 : i] : 0.f;
      out.data<float>()[i] = Fn()(a.data<float>()[i], y);
    }
    return Status::OK();
  }
};

struct AddFn {
  float operator()(float a, float b) const { return a + b; }
};
struct MulFn {
  float operator()(float a, float b) const { return a * b; }
};
struct ReluFn {
  float operator()(float a, float) const { return a > 0.f ? a : 0.f; }
};
struct NegFn {
  float operator()(float a, float) const { return -a; }
};
struct CopyFn {
  float operator()(float a, float) const { return a; }
};

// Random values: a correct kernel, which the optimizer must still never evaluate ahead of time.
class RandomLikeKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<RandomLikeKernel>(n); }
  Status Compute(KernelContext& ctx) const override {
    static uint32_t state = 12345;
    Tensor& out = *ctx.output(0);
    for (int64_t i = 0; i < out.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      out.data<float>()[i] = static_cast<float>(state >> 8) / 16777216.f;
    }
    return Status::OK();
  }
};

// The registries every test in these suites uses.
struct TestRegistries {
  OpSchemaRegistry schemas;
  KernelRegistry kernels;

  TestRegistries() {
    auto same = [](InferenceContext& ctx) { return PropagateType(ctx); };
    auto binary = [](InferenceContext& ctx) -> Status {
      const ValueType* a = ctx.input_type(0);
      const ValueType* b = ctx.input_type(1);
      if (!a->shape || !b->shape) {
        ctx.set_output(0, ValueType(a->dtype, std::nullopt));
        return Status::OK();
      }
      TOB_ASSIGN_OR_RETURN(Dims dims, BroadcastDims(ctx, *a->shape, *b->shape));
      ctx.set_output(0, ValueType(a->dtype, dims));
      return Status::OK();
    };
    for (const char* op : {"Add", "Mul"}) schemas.Register(Schema(op, 2, 2, binary));
    for (const char* op : {"Relu", "Neg", "Sin", "Identity"}) schemas.Register(Schema(op, 1, 1, same));
    OpSchema random = Schema("RandomUniformLike", 1, 1, same);
    random.nondeterministic = AlwaysNondeterministic;
    schemas.Register(std::move(random));
    schemas.Register(Schema("Cast", 1, 1, [](InferenceContext& ctx) -> Status {
      int64_t to = 0;
      TOB_RETURN_IF_ERROR(ctx.node().GetAttr("to", &to));
      ctx.set_output(0, ValueType(DTypeFromOnnx(static_cast<int32_t>(to)), ctx.input_type(0)->shape));
      return Status::OK();
    }));
    schemas.Register(Schema("Reshape", 2, 2, [](InferenceContext& ctx) -> Status {
      const ValueType& in = *ctx.input_type(0);
      const Tensor* shape = ctx.input_value(1);
      if (shape == nullptr) {
        ctx.set_output(0, ValueType(in.dtype, std::nullopt));
        return Status::OK();
      }
      Dims dims;
      for (int64_t i = 0; i < shape->numel(); ++i) {
        int64_t d = shape->ElementAsInt64(i);
        if (d == 0 && in.shape && i < in.rank()) dims.push_back((*in.shape)[i]);
        else if (d < 0) dims.push_back(Dim::Unknown());
        else dims.emplace_back(d);
      }
      ctx.set_output(0, ValueType(in.dtype, dims));
      return Status::OK();
    }));
    schemas.Register(Schema("Shape", 1, 1, [](InferenceContext& ctx) -> Status {
      const ValueType& in = *ctx.input_type(0);
      ctx.set_output(0, ValueType(DType::kInt64, in.shape ? std::optional<Dims>(Dims{Dim(in.rank())})
                                                          : std::optional<Dims>(Dims{Dim::Unknown()})));
      return Status::OK();
    }));
    OpSchema dropout = Schema(
        "Dropout", 1, 3,
        [](InferenceContext& ctx) -> Status {
          TOB_RETURN_IF_ERROR(PropagateType(ctx));
          if (ctx.num_outputs() > 1) ctx.set_output(1, ValueType(DType::kBool, ctx.input_type(0)->shape));
          return Status::OK();
        },
        1, 2);
    // When Dropout trains is the real schema's trait.
    dropout.nondeterministic = OpSchemaRegistry::Global().Find("", "Dropout")->nondeterministic;
    schemas.Register(std::move(dropout));
    // An op whose shape function knows nothing: declared graph-output types must survive it.
    schemas.Register(Schema("Opaque", 1, 1, [](InferenceContext&) { return Status::OK(); }));
    OpSchema yield = Schema(
        "YieldOp", 0, INT_MAX, [](InferenceContext&) { return Status::OK(); }, 0, INT_MAX, kMicrosoftDomain);
    yield.side_effects = true;  // hands control to Python (onnxruntime-training's ORTModule)
    schemas.Register(std::move(yield));
    RegisterRuntimeSchemas(schemas);

    auto f32 = std::vector<DType>{DType::kFloat32};
    kernels.Register(Def("Add").Versions(7).Constraint("T", {0, 1}, f32).Kernel<FloatMapKernel<AddFn>>());
    kernels.Register(Def("Mul").Versions(7).Constraint("T", {0, 1}, f32).Kernel<FloatMapKernel<MulFn>>());
    kernels.Register(Def("Relu").Versions(6).Constraint("T", {0}, f32).Kernel<FloatMapKernel<ReluFn>>());
    kernels.Register(Def("Neg").Versions(6).Constraint("T", {0}, f32).Kernel<FloatMapKernel<NegFn>>());
    kernels.Register(Def("Dropout").Versions(7).Constraint("T", {0}, f32).Kernel<FloatMapKernel<CopyFn>>());
    kernels.Register(Def("RandomUniformLike").Versions(1).Constraint("T", {0}, f32).Kernel<RandomLikeKernel>());
  }

  PassContext Context() {
    PassContext ctx;
    ctx.schemas = &schemas;
    ctx.kernels = &kernels;
    return ctx;
  }
};

inline TestRegistries& Registries() {
  static TestRegistries* r = new TestRegistries();
  return *r;
}

// Builder shorthand for tests: aborts the test on a builder error.
class GraphBuilder {
 public:
  explicit GraphBuilder(Graph& g, int opset = 17) : g_(g) { g_.SetOpset("", opset); }
  GraphBuilder& Input(const std::string& name, ValueType type) {
    EXPECT_TRUE(g_.AddInput(name, std::move(type)).ok()) << name;
    return *this;
  }
  GraphBuilder& Const(const std::string& name, std::vector<float> values, Shape shape) {
    EXPECT_TRUE(g_.AddInitializer(name, Tensor::FromVector<float>(values, shape)).ok()) << name;
    return *this;
  }
  GraphBuilder& ConstI64(const std::string& name, std::vector<int64_t> values, Shape shape) {
    EXPECT_TRUE(g_.AddInitializer(name, Tensor::FromVector<int64_t>(values, shape)).ok()) << name;
    return *this;
  }
  Node* Op(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
           AttributeMap attrs = {}, const std::string& domain = "", const std::string& name = "") {
    auto n = g_.AddNode(op, domain, inputs, outputs, std::move(attrs), name);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? n.value() : nullptr;
  }
  GraphBuilder& Output(const std::string& name, std::optional<ValueType> declared = std::nullopt) {
    EXPECT_TRUE(g_.AddOutput(name, std::move(declared)).ok()) << name;
    return *this;
  }

 private:
  Graph& g_;
};

// Runs one pass on `graph` with the test registries and the verifier on; returns whether it
// changed the graph.
inline bool RunPass(std::unique_ptr<GraphPass> pass, Graph& graph, std::vector<std::string> keep = {}) {
  PassContext ctx = Registries().Context();
  ctx.keep_values = std::move(keep);
  bool changed = false;
  Status s = pass->Run(graph, ctx, &changed);
  EXPECT_TRUE(s.ok()) << pass->name() << ": " << s.ToString();
  Status valid = VerifyGraph(graph, Registries().schemas);
  EXPECT_TRUE(valid.ok()) << "after " << pass->name() << ": " << valid.ToString() << "\n" << GraphToText(graph);
  return changed;
}

// Like RunPass, with the engine's own schemas and kernels (passes that match real ops: Conv,
// BatchNormalization, MatMul, Gemm, Transpose): infers the types first, as the pipeline has.
inline bool RunPassWithBuiltins(std::unique_ptr<GraphPass> pass, Graph& graph) {
  Status inferred = InferShapes(graph, OpSchemaRegistry::Global());
  EXPECT_TRUE(inferred.ok()) << inferred.ToString();
  PassContext ctx;
  bool changed = false;
  Status s = pass->Run(graph, ctx, &changed);
  EXPECT_TRUE(s.ok()) << pass->name() << ": " << s.ToString();
  Status valid = VerifyGraph(graph, OpSchemaRegistry::Global());
  EXPECT_TRUE(valid.ok()) << "after " << pass->name() << ": " << valid.ToString() << "\n" << GraphToText(graph);
  return changed;
}

// Graph text for structural golden tests whose constants are computed: values are not printed
// (a test compares them against its own reference with a tolerance).
inline std::string StructureText(const Graph& graph) {
  GraphTextOptions options;
  options.max_constant_elements = 0;
  return GraphToText(graph, options);
}

}  // namespace testing
}  // namespace tob
