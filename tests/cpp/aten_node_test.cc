// com.microsoft ATen nodes on the engine side, without libtorch: the schema (declared output types),
// the executor's kernel-allocated outputs (checks, views, copies out of the arena), the passes
// (never folded or merged), and the provider registry's fallback providers. A test provider
// stands in for the torch provider; its ATen kernel understands a few "test::" operators.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "framework/kernel_registry.h"
#include "ops/op_schema.h"
#include "partition/provider_registry.h"
#include "providers/cpu/cpu_execution_provider.h"
#include "runtime/session.h"

namespace tob {
namespace {

constexpr const char* kTestProvider = "TestAtenProvider";

std::atomic<int> g_aten_calls{0};

// test::rows_view: rows 1.. of a 2-D float tensor, viewing the input's memory (like aten::slice).
// test::twice: a new tensor, 2 * x. test::nothing: leaves its output undefined.
// test::as_int64: x cast to int64.
class TestAtenKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) {
    std::string op;
    TOB_RETURN_IF_ERROR(n.GetAttr("operator", &op));
    return MakeKernel<TestAtenKernel>(n, op);
  }
  TestAtenKernel(const Node& n, std::string op) : OpKernel(n), op_(std::move(op)) {}

  Status Compute(KernelContext& ctx) const override {
    ++g_aten_calls;
    const Tensor& x = *ctx.input(0);
    if (op_ == "test::rows_view") {
      if (x.rank() != 2 || x.dim(0) < 1) return ctx.Fail("rows_view needs a 2-D input");
      *ctx.output(0) = Tensor(x.dtype(), {x.dim(0) - 1, x.dim(1)}, x.buffer(),
                              x.byte_offset() + static_cast<size_t>(x.dim(1)) * DTypeSize(x.dtype()));
    } else if (op_ == "test::twice" || op_ == "test::unsafe_twice") {
      TOB_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(DType::kFloat32, x.shape(), CpuAllocator::Default()));
      for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 2 * x.data<float>()[i];
      *ctx.output(0) = std::move(y);
    } else if (op_ == "test::as_int64") {
      TOB_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(DType::kInt64, x.shape(), CpuAllocator::Default()));
      for (int64_t i = 0; i < x.numel(); ++i) y.data<int64_t>()[i] = static_cast<int64_t>(x.data<float>()[i]);
      *ctx.output(0) = std::move(y);
    } else if (op_ != "test::nothing") {
      return ctx.Fail("unknown test operator ", op_);
    }
    return Status::OK();
  }

 private:
  std::string op_;
};

class TestAtenProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return kTestProvider; }
  Device device() const override { return Device{}; }
  std::shared_ptr<Allocator> allocator() const override { return CpuAllocator::Default(); }
  Status CopyTensor(const Tensor& src, Tensor& dst) const override {
    return CpuExecutionProvider().CopyTensor(src, dst);
  }
  // As the torch provider does for operators off its allow-list: "test::unsafe_twice" needs the
  // session's permission.
  StatusOr<std::unique_ptr<OpKernel>> CreateKernel(const KernelDef& def, const Node& node,
                                                   const KernelPermissions& permissions) const override {
    std::string op;
    TOB_RETURN_IF_ERROR(node.GetAttr("operator", &op));
    if (op == "test::unsafe_twice" && !permissions.unsafe_aten_ops)
      return PermissionDenied(node.Describe(), ": ", op, " needs allow_unsafe_aten_ops");
    return def.factory(node);
  }
};

void RegisterTestProvider() {
  static std::once_flag once;
  std::call_once(once, [] {
    ProviderRegistry::Global().Register(
        kTestProvider,
        []() -> StatusOr<std::unique_ptr<ExecutionProvider>> {
          return std::unique_ptr<ExecutionProvider>(new TestAtenProvider());
        },
        /*fallback=*/true);
    KernelDef def = Def("ATen");
    def.Domain(kMicrosoftDomain).Provider(kTestProvider).KernelAllocatesOutputs().Kernel<TestAtenKernel>();
    KernelRegistry::Global().Register(std::move(def));
  });
}

AttributeMap AtenOp(const std::string& op) { return {{"operator", Attribute::String(op)}}; }

std::unique_ptr<Graph> NewGraph() {
  RegisterTestProvider();
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  g->SetOpset(kMicrosoftDomain, 1);
  return g;
}

std::unique_ptr<Session> Build(std::unique_ptr<Graph> g) {
  SessionOptions opts;
  opts.intra_op_threads = 1;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::vector<float> Values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

TEST(AtenNode, OutputsOfUnknownShapeFeedNativeOps) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 2})).ok());
  ASSERT_TRUE(g->AddNode("Neg", "", {"x"}, {"neg"}, {}, "neg").ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"neg"}, {"v"}, AtenOp("test::rows_view"), "view").ok());
  ASSERT_TRUE(g->AddNode("Relu", "", {"v"}, {"y"}, {}, "relu").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  const std::string report = s->partition_report().ToString();
  EXPECT_NE(report.find(std::string("com.microsoft::ATen  ") + kTestProvider), std::string::npos) << report;
  for (int run = 0; run < 2; ++run) {  // the second run replays the memory plan
    std::vector<Tensor> out;
    Status st = s->Run({"x"}, {Tensor::FromVector<float>({1, -2, -3, 4, 5, -6}, {3, 2})}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out[0].shape(), Shape({2, 2}));
    EXPECT_EQ(Values(out[0]), std::vector<float>({3, 0, 0, 6}));
  }
}

TEST(AtenNode, GraphOutputViewingAnIntermediateIsCopiedOutOfTheArena) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{3, 2})).ok());
  ASSERT_TRUE(g->AddNode("Neg", "", {"x"}, {"neg"}, {}, "neg").ok());
  ASSERT_TRUE(
      g->AddNode("ATen", kMicrosoftDomain, {"neg"}, {"from_intermediate"}, AtenOp("test::rows_view"), "v1").ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"from_input"}, AtenOp("test::rows_view"), "v2").ok());
  ASSERT_TRUE(g->AddOutput("from_intermediate").ok());
  ASSERT_TRUE(g->AddOutput("from_input").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> recording, first, second;
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({0, 0, 0, 0, 0, 0}, {3, 2})}, {}, &recording).ok());
  Tensor x1 = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  RunStats stats;
  ASSERT_TRUE(s->Run({"x"}, {x1}, {}, &first, &stats).ok());
  EXPECT_TRUE(stats.planned);
  ASSERT_TRUE(s->Run({"x"}, {Tensor::FromVector<float>({9, 9, 9, 9, 9, 9}, {3, 2})}, {}, &second).ok());
  EXPECT_EQ(Values(first[0]), std::vector<float>({-3, -4, -5, -6})) << "the next run overwrote a fetched output";
  EXPECT_EQ(Values(second[0]), std::vector<float>({-9, -9, -9, -9}));
  // A view of the caller's own input needs no copy.
  EXPECT_EQ(first[1].raw_data(), static_cast<const char*>(x1.raw_data()) + 2 * sizeof(float));
}

TEST(AtenNode, ProducedOutputsAreCheckedAgainstDeclaredTypes) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 2})).ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"i"}, AtenOp("test::as_int64"), "cast").ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"t"}, AtenOp("test::twice"), "twice").ok());
  g->FindValue("i")->set_type(ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 2}));  // wrong dtype
  g->FindValue("t")->set_type(ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 3}));  // wrong dim
  ASSERT_TRUE(g->AddOutput("i").ok());
  ASSERT_TRUE(g->AddOutput("t").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = s->Run({"x"}, {Tensor::FromVector<float>({1, 2}, {1, 2})}, {}, &out);
  ASSERT_EQ(st.code(), StatusCode::kRuntimeError);
  EXPECT_NE(st.message().find("ATen node 'cast': output 0 'i' is declared float32[n, 2]"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("int64"), std::string::npos) << st.message();
}

TEST(AtenNode, ShapeMismatchWithDeclarationIsAnError) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{1, 2})).ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"t"}, AtenOp("test::twice"), "twice").ok());
  g->FindValue("t")->set_type(ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 3}));
  ASSERT_TRUE(g->AddOutput("t").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = s->Run({"x"}, {Tensor::FromVector<float>({1, 2}, {1, 2})}, {}, &out);
  ASSERT_EQ(st.code(), StatusCode::kRuntimeError);
  EXPECT_NE(st.message().find("output 0 't' is declared float32[n, 3] but the kernel produced shape [1, 2]"),
            std::string::npos)
      << st.message();
}

TEST(AtenNode, UndefinedOutputIsAnErrorOnlyWhenRead) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {""}, AtenOp("test::nothing"), "unread").ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"n"}, AtenOp("test::nothing"), "read").ok());
  ASSERT_TRUE(g->AddNode("Relu", "", {"n"}, {"y"}, {}, "relu").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  ASSERT_TRUE(g->AddOutput("x").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = s->Run({"x"}, {Tensor::FromVector<float>({1, 2}, {2})}, {}, &out);
  ASSERT_EQ(st.code(), StatusCode::kRuntimeError);
  EXPECT_NE(st.message().find("ATen node 'read': output 0 'n' was not produced by the kernel but the graph reads it"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find("'unread'"), std::string::npos) << st.message();
}

TEST(AtenNode, NeverFoldedNorMergedEvenWithConstantInputs) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInitializer("c", Tensor::FromVector<float>({1, 2}, {2})).ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"c"}, {"a"}, AtenOp("test::twice"), "first").ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"c"}, {"b"}, AtenOp("test::twice"), "second").ok());
  ASSERT_TRUE(g->AddNode("Add", "", {"a", "b"}, {"y"}, {}, "add").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  int aten_nodes = 0;
  for (const Node* n : s->graph().nodes()) aten_nodes += n->op_type() == "ATen";
  EXPECT_EQ(aten_nodes, 2) << "ATen nodes may be random: never folded, never merged";
  const int before = g_aten_calls;
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {}, &out).ok());
  EXPECT_EQ(g_aten_calls - before, 2);
  EXPECT_EQ(Values(out[0]), std::vector<float>({4, 8}));
}

TEST(AtenNode, SchemaRequiresOperatorAndConsistentListLengths) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"y"}, {}, "anonymous").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  auto s = Session::Create(std::move(g), SessionOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidModel);
  EXPECT_NE(s.status().message().find("ATen node 'anonymous': needs a non-empty string attribute 'operator'"),
            std::string::npos)
      << s.status().message();

  g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
  AttributeMap attrs = AtenOp("cat");
  attrs["tensor_list_lengths"] = Attribute::Ints({3});
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x", "x"}, {"y"}, attrs, "cat").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  s = Session::Create(std::move(g), SessionOptions{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tensor_list_lengths places 3 inputs in tensor lists but the node has only 2"),
            std::string::npos)
      << s.status().message();
}

TEST(AtenNode, DeclaredTypesSurviveShapeInference) {
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 2})).ok());
  ASSERT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"t"}, AtenOp("test::twice"), "twice").ok());
  ASSERT_TRUE(g->AddNode("Relu", "", {"t"}, {"y"}, {}, "relu").ok());
  g->FindValue("t")->set_type(ValueType(DType::kFloat32, Dims{Dim::Symbol("n"), 2}));
  ASSERT_TRUE(g->AddOutput("y").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->outputs().size(), 1u);
  EXPECT_EQ(s->outputs()[0].type.ToString(), "float32[n, 2]") << "Relu should see the ATen output's declared type";
}

TEST(ProviderRegistry, FallbackProvidersComeAfterCpuAndUnknownNamesListTheAvailable) {
  RegisterTestProvider();
  const auto fallbacks = ProviderRegistry::Global().FallbackNames();
  EXPECT_NE(std::find(fallbacks.begin(), fallbacks.end(), kTestProvider), fallbacks.end());
  auto missing = ProviderRegistry::Global().Create("NoSuchProvider");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(
      missing.status().message().find("unknown execution provider 'NoSuchProvider'; available: CPUExecutionProvider"),
      std::string::npos)
      << missing.status().message();
  // A Relu goes to CPU even though the fallback provider comes too.
  auto g = NewGraph();
  ASSERT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
  ASSERT_TRUE(g->AddNode("Relu", "", {"x"}, {"y"}, {}, "relu").ok());
  ASSERT_TRUE(g->AddOutput("y").ok());
  auto s = Build(std::move(g));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->partition_report().nodes[0].provider, kCpuProvider);
}

TEST(AtenNode, SessionPermissionsReachTheProvidersKernelCreation) {
  auto make = [] {
    auto g = NewGraph();
    EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
    EXPECT_TRUE(g->AddNode("ATen", kMicrosoftDomain, {"x"}, {"y"}, AtenOp("test::unsafe_twice"), "gated").ok());
    EXPECT_TRUE(g->AddOutput("y", ValueType(DType::kFloat32, Dims{2})).ok());
    return g;
  };
  SessionOptions opts;
  opts.intra_op_threads = 1;
  auto refused = Session::Create(make(), opts);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("'gated'"), std::string::npos) << refused.status().ToString();

  opts.allow_unsafe_aten_ops = true;
  auto allowed = Session::Create(make(), opts);
  ASSERT_TRUE(allowed.ok()) << allowed.status().ToString();
  std::vector<Tensor> out;
  ASSERT_TRUE(allowed.value()->Run({"x"}, {Tensor::FromVector<float>({1.5f, -2}, {2})}, {}, &out).ok());
  EXPECT_EQ(Values(out[0]), std::vector<float>({3, -4}));
}

}  // namespace
}  // namespace tob
