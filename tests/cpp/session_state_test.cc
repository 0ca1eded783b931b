// Session state: inputs bound to persistent tensors and updated by the run, in place when the
// producing kernel allows it and the plan can order it after every reader of the old value,
// otherwise copied in after the run. Test-only ops in the "test.state" domain.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "framework/kernel_registry.h"
#include "ops/op_schema.h"
#include "runtime/session.h"

namespace tob {
namespace {

constexpr const char* kDomain = "test.state";

// y = a + b elementwise (float32, one shape). Safe in place: each element is read before it is
// written.
class AddKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<AddKernel>(n); }
  using OpKernel::OpKernel;
  Status Compute(KernelContext& ctx) const override {
    const Tensor& a = *ctx.input(0);
    const Tensor& b = *ctx.input(1);
    Tensor& y = *ctx.output(0);
    if (a.shape() != b.shape()) return ctx.Fail("shapes differ");
    for (int64_t i = 0; i < a.numel(); ++i) y.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i];
    return Status::OK();
  }
};

// y = 2 x.
class DoubleKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<DoubleKernel>(n); }
  using OpKernel::OpKernel;
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    for (int64_t i = 0; i < x.numel(); ++i) ctx.output(0)->data<float>()[i] = 2 * x.data<float>()[i];
    return Status::OK();
  }
};

// y = x flattened, a view when the executor hands it the input's buffer.
class ViewKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<ViewKernel>(n); }
  using OpKernel::OpKernel;
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    if (!y.SharesDataWith(x)) std::copy_n(x.data<float>(), x.numel(), y.data<float>());
    return Status::OK();
  }
};

// y = x; fails when x[0] < 0 (a run that fails part way).
class FailIfNegativeKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<FailIfNegativeKernel>(n); }
  using OpKernel::OpKernel;
  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    if (x.numel() > 0 && x.data<float>()[0] < 0) return ctx.Fail("negative input");
    std::copy_n(x.data<float>(), x.numel(), ctx.output(0)->data<float>());
    return Status::OK();
  }
};

void RegisterStateTestOps() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto schema = [](const char* op, int inputs, ShapeFunction f) {
      OpSchema s;
      s.domain = kDomain;
      s.op_type = op;
      s.min_inputs = s.max_inputs = inputs;
      s.infer = std::move(f);
      OpSchemaRegistry::Global().Register(s);
    };
    auto same = [](InferenceContext& ctx) { return PropagateType(ctx); };
    schema("AddInPlace", 2, same);
    schema("AddCopy", 2, same);
    schema("Double", 1, same);
    schema("FailIfNegative", 1, same);
    schema("View", 1, [](InferenceContext& ctx) {
      const ValueType* t = ctx.input_type(0);
      Dim n = 1;
      for (const Dim& d : *t->shape) n = (n.is_known() && d.is_known()) ? Dim(n.value * d.value) : Dim::Unknown();
      ctx.set_output(0, ValueType(t->dtype, Dims{n}));
      return Status::OK();
    });
    auto& r = KernelRegistry::Global();
    const std::vector<DType> f32 = {DType::kFloat32};
    r.Register(Def("AddInPlace").Domain(kDomain).Constraint("T", {0, 1}, f32).MayInplace(0, 0).Kernel<AddKernel>());
    r.Register(Def("AddCopy").Domain(kDomain).Constraint("T", {0, 1}, f32).Kernel<AddKernel>());
    r.Register(Def("Double").Domain(kDomain).Constraint("T", {0}, f32).Kernel<DoubleKernel>());
    r.Register(Def("FailIfNegative").Domain(kDomain).Constraint("T", {0}, f32).Kernel<FailIfNegativeKernel>());
    r.Register(Def("View").Domain(kDomain).Constraint("T", {0}, f32).Alias(0, 0).Kernel<ViewKernel>());
  });
}

struct NodeSpec {
  std::string op;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};

// Inputs are float32[4] unless listed in `shapes`; nodes are added in the given order (the
// executor's original order for independent nodes).
std::unique_ptr<Graph> BuildGraph(const std::vector<std::string>& inputs, const std::vector<NodeSpec>& nodes,
                                  const std::vector<std::string>& outputs) {
  RegisterStateTestOps();
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  g->SetOpset(kDomain, 1);
  for (const auto& name : inputs) EXPECT_TRUE(g->AddInput(name, ValueType(DType::kFloat32, Dims{4})).ok());
  for (size_t i = 0; i < nodes.size(); ++i)
    EXPECT_TRUE(g->AddNode(nodes[i].op, kDomain, nodes[i].inputs, nodes[i].outputs, {}, "n" + std::to_string(i)).ok());
  for (const auto& name : outputs) EXPECT_TRUE(g->AddOutput(name).ok());
  return g;
}

std::unique_ptr<Session> Make(std::unique_ptr<Graph> g, std::vector<StateUpdate> updates) {
  SessionOptions opts;
  opts.intra_op_threads = 1;
  opts.state_updates = std::move(updates);
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

Status CreateError(std::unique_ptr<Graph> g, std::vector<StateUpdate> updates) {
  SessionOptions opts;
  opts.state_updates = std::move(updates);
  return Session::Create(std::move(g), opts).status();
}

std::vector<float> Values(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

bool LogSays(const Session& s, const std::string& fragment) {
  for (const auto& line : s.log())
    if (line.find(fragment) != std::string::npos) return true;
  return false;
}

const std::vector<float> kW0 = {0.5f, -1.25f, 2.0f, 3.5f};
const std::vector<float> kG = {0.25f, 1.5f, -0.75f, 0.125f};

TEST(SessionState, BoundStateIsUpdatedInPlaceEveryRun) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}}, {"W_new"}), {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "state 'W': updated in place"));
  Tensor w = Tensor::FromVector(kW0, {4});
  const void* data = w.raw_data();
  ASSERT_TRUE(s->BindState("W", w).ok());
  EXPECT_EQ(s->BoundStates(), std::vector<std::string>{"W"});
  std::vector<Tensor> out;
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
    EXPECT_TRUE(out[0].SharesDataWith(w)) << "the fetched update aliases the state when done in place";
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(w.data<float>()[i], kW0[i] + step * kG[i]);
  }
  EXPECT_EQ(w.raw_data(), data);
  auto state = s->State("W");
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state.value().raw_data(), data);
}

TEST(SessionState, KernelWithoutInplaceIsCopiedIntoTheStateAfterTheRun) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddCopy", {"W", "G"}, {"W_new"}}}, {"W_new"}), {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "state 'W': 'W_new' copied in after the run"));
  Tensor w = Tensor::FromVector(kW0, {4});
  const void* data = w.raw_data();
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  for (int step = 1; step <= 2; ++step) {
    ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
    EXPECT_FALSE(out[0].SharesDataWith(w));
    for (int i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(w.data<float>()[i], kW0[i] + step * kG[i]);
      EXPECT_FLOAT_EQ(out[0].data<float>()[i], kW0[i] + step * kG[i]);
    }
  }
  EXPECT_EQ(w.raw_data(), data);
}

// Nodes added writer first: the reader of W (directly and through a view) would run after the
// in-place write in the original order; the plan moves the writer after them.
TEST(SessionState, ReadersOfTheOldValueRunBeforeTheInPlaceWriter) {
  auto s = Make(BuildGraph({"W", "G"},
                           {{"AddInPlace", {"W", "G"}, {"W_new"}},
                            {"Double", {"W"}, {"R"}},
                            {"View", {"W"}, {"V"}},
                            {"Double", {"V"}, {"RV"}}},
                           {"W_new", "R", "RV"}),
                {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "state 'W': updated in place"));
  Tensor w = Tensor::FromVector(kW0, {4});
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out[1].data<float>()[i], 2 * kW0[i]) << "R must see the old W";
    EXPECT_FLOAT_EQ(out[2].data<float>()[i], 2 * kW0[i]) << "RV must see the old W through the view";
    EXPECT_FLOAT_EQ(w.data<float>()[i], kW0[i] + kG[i]);
  }
}

// Two in-place steps in a row (accumulate, then accumulate again) both write the state's memory;
// a reader of the value between them runs before the second.
TEST(SessionState, ChainOfInPlaceStepsWritesTheStateTwice) {
  auto s = Make(
      BuildGraph({"W", "G"},
                 {{"AddInPlace", {"W", "G"}, {"W1"}}, {"AddInPlace", {"W1", "G"}, {"W2"}}, {"Double", {"W1"}, {"R"}}},
                 {"W2", "R"}),
      {{"W", "W2"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "state 'W': updated in place by test.state::AddInPlace node 'n0'"));
  EXPECT_TRUE(LogSays(*s, "then test.state::AddInPlace node 'n1'"));
  Tensor w = Tensor::FromVector(kW0, {4});
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
  EXPECT_TRUE(out[0].SharesDataWith(w));
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out[1].data<float>()[i], 2 * (kW0[i] + kG[i])) << "R reads W1 before the second write";
    EXPECT_FLOAT_EQ(w.data<float>()[i], kW0[i] + 2 * kG[i]);
  }
}

// A reader that needs both the old and the new value cannot run before the writer: the update
// goes through a buffer of its own and is copied in at the end.
TEST(SessionState, ReaderOfOldAndNewValueForcesTheCopy) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}, {"AddCopy", {"W", "W_new"}, {"S"}}},
                           {"W_new", "S"}),
                {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "copied in after the run")) << "reads the state's old value but depends on";
  Tensor w = Tensor::FromVector(kW0, {4});
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(out[1].data<float>()[i], kW0[i] + (kW0[i] + kG[i]));
    EXPECT_FLOAT_EQ(w.data<float>()[i], kW0[i] + kG[i]);
  }
}

// Two updates that each read the other's old state: only one can be in place.
TEST(SessionState, CrossReadingUpdatesBothSeeOldValues) {
  auto s = Make(BuildGraph({"A", "B"}, {{"AddInPlace", {"A", "B"}, {"A_new"}}, {"AddInPlace", {"B", "A"}, {"B_new"}}},
                           {"A_new", "B_new"}),
                {{"A", "A_new"}, {"B", "B_new"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "state 'A': updated in place"));
  EXPECT_TRUE(LogSays(*s, "state 'B': 'B_new' copied in after the run"));
  Tensor a = Tensor::FromVector(kW0, {4}), b = Tensor::FromVector(kG, {4});
  ASSERT_TRUE(s->BindState("A", a).ok());
  ASSERT_TRUE(s->BindState("B", b).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {}, &out).ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(a.data<float>()[i], kW0[i] + kG[i]);
    EXPECT_FLOAT_EQ(b.data<float>()[i], kG[i] + kW0[i]);
  }
}

// A state (or a view of it) fetched as an output shows the value the run read, not the update.
TEST(SessionState, FetchedViewOfTheStateShowsTheOldValue) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}}, {"W_new", "W"}), {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(LogSays(*s, "also a graph output"));
  Tensor w = Tensor::FromVector(kW0, {4});
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
  EXPECT_EQ(Values(out[1]), kW0);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(w.data<float>()[i], kW0[i] + kG[i]);
}

TEST(SessionState, FailedRunBeforeTheUpdateLeavesStatesUnchanged) {
  // The in-place writer does not depend on the failing node, yet runs after it.
  auto s = Make(BuildGraph({"W", "G", "X"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}, {"FailIfNegative", {"X"}, {"Y"}}},
                           {"W_new", "Y"}),
                {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  Tensor w = Tensor::FromVector(kW0, {4});
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  Status st = s->Run({"G", "X"},
                     {Tensor::FromVector(kG, {4}), Tensor::FromVector(std::vector<float>{-1, 1, 1, 1}, {4})}, {}, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("negative input"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("no session state was changed"), std::string::npos) << st.ToString();
  EXPECT_EQ(Values(w), kW0);
}

TEST(SessionState, FedStateInputIsNeverWritten) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}}, {"W_new"}), {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  Tensor w = Tensor::FromVector(kW0, {4});
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({"W", "G"}, {w, Tensor::FromVector(kG, {4})}, {}, &out).ok());
  EXPECT_EQ(Values(w), kW0);
  EXPECT_FALSE(out[0].SharesDataWith(w));
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[0].data<float>()[i], kW0[i] + kG[i]);
}

TEST(SessionState, BoundInputWithoutUpdateIsAFrozenValue) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddCopy", {"W", "G"}, {"Y"}}}, {"Y"}), {});
  ASSERT_NE(s, nullptr);
  Tensor w = Tensor::FromVector(kW0, {4});
  ASSERT_TRUE(s->BindState("W", w).ok());
  std::vector<Tensor> out;
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[0].data<float>()[i], kW0[i] + kG[i]);
  }
  EXPECT_EQ(Values(w), kW0);
  // Rebinding replaces the tensor.
  Tensor w2 = Tensor::FromVector(kG, {4});
  ASSERT_TRUE(s->BindState("W", w2).ok());
  ASSERT_TRUE(s->Run({"G"}, {Tensor::FromVector(kG, {4})}, {}, &out).ok());
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[0].data<float>()[i], 2 * kG[i]);
}

TEST(SessionState, BindAndFeedErrorsNameTheInput) {
  auto s = Make(BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}}, {"W_new"}), {{"W", "W_new"}});
  ASSERT_NE(s, nullptr);
  Status st = s->BindState("W", Tensor::FromVector(std::vector<double>{1, 2, 3, 4}, {4}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("state 'W': expected dtype float32, got float64"), std::string::npos) << st.ToString();
  st = s->BindState("W", Tensor::FromVector(std::vector<float>{1, 2, 3}, {3}));
  EXPECT_NE(st.message().find("state 'W': dimension 0 must be 4"), std::string::npos) << st.ToString();
  st = s->BindState("Q", Tensor::FromVector(kW0, {4}));
  EXPECT_NE(st.message().find("unknown input 'Q'"), std::string::npos) << st.ToString();
  EXPECT_FALSE(s->State("W").ok()) << "nothing bound yet";
  EXPECT_NE(s->State("W").status().message().find("input 'W' has no bound state"), std::string::npos);

  ASSERT_TRUE(s->BindState("W", Tensor::FromVector(kW0, {4})).ok());
  std::vector<Tensor> out;
  st = s->Run({"W", "G"}, {Tensor::FromVector(kW0, {4}), Tensor::FromVector(kG, {4})}, {}, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("input 'W' is bound as session state"), std::string::npos) << st.ToString();
  st = s->Run({}, {}, {}, &out);
  EXPECT_NE(st.message().find("missing input 'G'"), std::string::npos) << st.ToString();
}

TEST(SessionState, DeclaredUpdatesAreVerifiedAtCreate) {
  auto graph = [] {
    return BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}, {"Double", {"W_new"}, {"D"}}}, {"D"});
  };
  Status st = CreateError(graph(), {{"W", "W_new"}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'W_new' is not a graph output"), std::string::npos) << st.ToString();
  st = CreateError(graph(), {{"Q", "D"}});
  EXPECT_NE(st.message().find("'Q' is not a graph input; the graph inputs are 'W', 'G'"), std::string::npos)
      << st.ToString();
  st = CreateError(graph(), {{"W", "nothing"}});
  EXPECT_NE(st.message().find("the graph has no value 'nothing'"), std::string::npos) << st.ToString();

  auto two_outputs = [] {
    return BuildGraph({"W", "G"}, {{"AddInPlace", {"W", "G"}, {"W_new"}}, {"View", {"W_new"}, {"V"}}}, {"W_new", "V"});
  };
  st = CreateError(two_outputs(), {{"W", "W_new"}, {"W", "V"}});
  EXPECT_NE(st.message().find("state 'W' is already updated by state_updates[0]"), std::string::npos) << st.ToString();
  st = CreateError(two_outputs(), {{"W", "W_new"}, {"G", "W_new"}});
  EXPECT_NE(st.message().find("output 'W_new' is already the update of state_updates[0]"), std::string::npos)
      << st.ToString();

  // A [4] state cannot take a [4]-element update of another rank... nor of another dtype.
  auto g = std::make_unique<Graph>();
  RegisterStateTestOps();
  g->SetOpset(kDomain, 1);
  ASSERT_TRUE(g->AddInput("W", ValueType(DType::kFloat32, Dims{2, 2})).ok());
  ASSERT_TRUE(g->AddNode("View", kDomain, {"W"}, {"V"}, {}, "v").ok());
  ASSERT_TRUE(g->AddOutput("V").ok());
  st = CreateError(std::move(g), {{"W", "V"}});
  EXPECT_NE(st.message().find("their shapes must agree"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tob
