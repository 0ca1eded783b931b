// Control flow end to end (If, Loop, Scan through Session): what onnx's node tests leave out.
// Values of enclosing graphs read two levels deep, a Loop that runs no iteration and one whose
// condition stops it early, scan outputs whose length is only known at run time, Scan's axes and
// directions (opset 9+) and its batched form with sequence_lens (opset 8), loop-carried values
// moving between iterations without a copy, and the named errors of malformed control flow.
// References are computed here in double precision from the random inputs.
#include <gtest/gtest.h>

#include <mutex>

#include "controlflow_test_util.h"
#include "framework/kernel_registry.h"
#include "op_tester.h"
#include "ops/op_schema.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;
using namespace cf_testing;

// ---------------- values of enclosing graphs ----------------

// then_branch runs a Loop whose body reads 't' (a value of then_branch) and 'x' (a value of the
// main graph, two levels up); else_branch reads 'a' and 'x'.
std::unique_ptr<Graph> TwoLevelGraph() {
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("acc_in", F32({3}));
  body.Op("Add", {"acc_in", "t"}, {"s"}).Op("Add", {"s", "x"}, {"acc_out"}).Op("Identity", {"cond_in"}, {"cond_out"});
  body.Out("cond_out").Out("acc_out");
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Neg", {"a"}, {"t"});
  then_branch.Op("Loop", {"m", "", "x"}, {"loop_out"}, {{"body", Attribute::Subgraph(body.Take())}}, "inner_loop");
  then_branch.Out("loop_out");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Add", {"a", "x"}, {"e"}).Out("e");
  G main = G::Main();
  main.In("x", F32({3})).In("c", Bool({})).In("m", I64({}));
  main.Op("Mul", {"x", "x"}, {"a"});
  main.Op("If", {"c"}, {"y"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}},
          "outer_if");
  main.Out("y");
  return std::move(main.g);
}

TEST(ControlFlow, SubgraphsReadValuesOfEnclosingGraphsTwoLevelsDeep) {
  std::unique_ptr<Graph> g = TwoLevelGraph();
  const Node* outer_if = nullptr;
  for (const Node* n : g->nodes())
    if (n->op_type() == "If") outer_if = n;
  ASSERT_NE(outer_if, nullptr);
  // The If reads what both branches read from the main graph, the inner loop's needs included
  // (its subgraphs in attribute-name order: else_branch reads a and x, then_branch adds m).
  std::vector<std::string> implicit;
  for (const Value* v : outer_if->implicit_inputs()) implicit.push_back(v->name());
  EXPECT_EQ(implicit, (std::vector<std::string>{"a", "x", "m"}));
  const Graph* then_branch = outer_if->subgraph("then_branch");
  const Node* loop = nullptr;
  for (const Node* n : then_branch->nodes())
    if (n->op_type() == "Loop") loop = n;
  ASSERT_NE(loop, nullptr);
  implicit.clear();
  for (const Value* v : loop->implicit_inputs()) implicit.push_back(v->name());
  // The body reads t (then_branch's) and x (then_branch's stand-in for the main graph's x).
  EXPECT_EQ(implicit, (std::vector<std::string>{"t", "x"}));
  for (const Value* v : loop->implicit_inputs()) EXPECT_EQ(v->name() == "x", v->is_outer_scope()) << v->name();

  auto s = Compile(std::move(g));
  ASSERT_NE(s, nullptr);
  const Tensor x = RandomTensor<float>({3}, -2, 2, 7);
  const std::vector<double> xd = D(x);
  for (int64_t m : {0, 1, 3}) {
    auto out = RunOk(*s, {"x", "c", "m"}, {x, BoolT(true), I64T(m)});
    std::vector<double> want = xd;  // acc starts at x; each iteration adds -x*x and x
    for (int64_t k = 0; k < m; ++k)
      for (size_t i = 0; i < 3; ++i) want[i] += -xd[i] * xd[i] + xd[i];
    ExpectNear(out[0], {3}, want, StrCat("then, m=", m));
  }
  auto out = RunOk(*s, {"x", "c", "m"}, {x, BoolT(false), I64T(2)});
  std::vector<double> want(3);
  for (size_t i = 0; i < 3; ++i) want[i] = xd[i] * xd[i] + xd[i];
  ExpectNear(out[0], {3}, want, "else");
}

// ---------------- Loop ----------------

// acc_out = acc_in + x; scan_out = acc_out * 2; cond_out = i < limit (a value of the main graph).
std::unique_ptr<Graph> CountingLoop(bool with_condition) {
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("acc_in", F32({3}));
  body.Const("two", Tensor::FromVector<float>({2.f}, {}));
  body.Op("Add", {"acc_in", "x"}, {"acc_out"}).Op("Mul", {"acc_out", "two"}, {"scan_out"});
  if (with_condition) body.Op("Less", {"i", "limit"}, {"cond_out"});
  else body.Op("Identity", {"cond_in"}, {"cond_out"});
  body.Out("cond_out").Out("acc_out").Out("scan_out");
  G main = G::Main();
  main.In("x", F32({3})).In("m", I64({})).In("limit", I64({}));
  main.Op("Loop", {"m", "", "x"}, {"acc", "scan"}, {{"body", Attribute::Subgraph(body.Take())}}, "loop");
  main.Out("acc").Out("scan");
  return std::move(main.g);
}

TEST(ControlFlow, LoopWithZeroIterationsGivesItsInitialValuesAndEmptyScanOutputs) {
  auto s = Compile(CountingLoop(false));
  ASSERT_NE(s, nullptr);
  // The scan output's length is the trip count: data, so unknown to the static type.
  EXPECT_EQ(s->outputs()[1].type.ToString(), "float32[?, 3]");
  const Tensor x = RandomTensor<float>({3}, -2, 2, 11);
  auto out = RunOk(*s, {"x", "m", "limit"}, {x, I64T(0), I64T(0)});
  ExpectNear(out[0], {3}, D(x), "acc");
  EXPECT_FALSE(out[0].SharesDataWith(x)) << "an output handed through is a copy, never the caller's input";
  EXPECT_EQ(out[1].shape(), Shape({0, 3}));
  EXPECT_EQ(out[1].dtype(), DType::kFloat32);
  // Negative trip counts run nothing either.
  out = RunOk(*s, {"x", "m", "limit"}, {x, I64T(-4), I64T(0)});
  ExpectNear(out[0], {3}, D(x), "acc, m=-4");
  EXPECT_EQ(out[1].shape(), Shape({0, 3}));
}

TEST(ControlFlow, LoopStopsWhenTheBodysConditionTurnsFalse) {
  auto s = Compile(CountingLoop(true));
  ASSERT_NE(s, nullptr);
  const Tensor x = RandomTensor<float>({3}, -2, 2, 12);
  const std::vector<double> xd = D(x);
  // The condition is computed from the iteration number before the iteration ends: iterations
  // 0..limit run (limit + 1 of them), unless M stops the loop first.
  for (auto [m, limit] : {std::pair<int64_t, int64_t>{10, 3}, {2, 3}, {10, 0}}) {
    auto out = RunOk(*s, {"x", "m", "limit"}, {x, I64T(m), I64T(limit)});
    const int64_t iterations = std::min(m, limit + 1);
    std::vector<double> acc(3), scan;
    for (size_t i = 0; i < 3; ++i) acc[i] = xd[i];
    for (int64_t k = 0; k < iterations; ++k)
      for (size_t i = 0; i < 3; ++i) {
        acc[i] += xd[i];
        scan.push_back(acc[i] * 2);
      }
    const std::string what = StrCat("m=", m, " limit=", limit);
    ExpectNear(out[0], {3}, acc, what + " acc");
    ExpectNear(out[1], {iterations, 3}, std::vector<double>(scan.begin(), scan.end()), what + " scan");
  }
}

// A test op recording the memory it reads and writes: out = in + 1 (float32).
class AddOneTraceKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<AddOneTraceKernel>(n); }
  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor& out = *ctx.output(0);
    for (int64_t i = 0; i < in.numel(); ++i) out.data<float>()[i] = in.data<float>()[i] + 1.f;
    reads.push_back(in.raw_data());
    writes.push_back(out.raw_data());
    return Status::OK();
  }
  static inline std::vector<const void*> reads, writes;
};

constexpr const char* kTestDomain = "test.controlflow";

void RegisterTraceOp() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpSchema s;
    s.domain = kTestDomain;
    s.op_type = "AddOneTrace";
    s.min_inputs = s.max_inputs = 1;
    s.infer = [](InferenceContext& ctx) { return PropagateType(ctx); };
    OpSchemaRegistry::Global().Register(s);
    KernelRegistry::Global().Register(
        Def("AddOneTrace").Domain(kTestDomain).Constraint("T", {0}, {DType::kFloat32}).Kernel<AddOneTraceKernel>());
  });
}

TEST(ControlFlow, LoopCarriedValuesMoveBetweenIterationsWithoutACopy) {
  RegisterTraceOp();
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("v_in", F32({64}));
  ASSERT_TRUE(body.g->AddNode("AddOneTrace", kTestDomain, {"v_in"}, {"v_out"}, {}, "trace").ok());
  body.Op("Identity", {"cond_in"}, {"cond_out"}).Out("cond_out").Out("v_out");
  G main = G::Main();
  main.g->SetOpset(kTestDomain, 1);
  main.In("v", F32({64})).In("m", I64({}));
  main.Op("Loop", {"m", "", "v"}, {"v_final"}, {{"body", Attribute::Subgraph(body.Take())}});
  main.Out("v_final");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  const Tensor v = RandomTensor<float>({64}, -2, 2, 13);
  AddOneTraceKernel::reads.clear();
  AddOneTraceKernel::writes.clear();
  auto out = RunOk(*s, {"v", "m"}, {v, I64T(5)});
  std::vector<double> want = D(v);
  for (double& w : want) w += 5;
  ExpectNear(out[0], {64}, want, "v_final");
  ASSERT_EQ(AddOneTraceKernel::reads.size(), 5u);
  EXPECT_EQ(AddOneTraceKernel::reads[0], v.raw_data()) << "the first iteration reads the loop's input itself";
  for (size_t k = 1; k < 5; ++k)
    EXPECT_EQ(AddOneTraceKernel::reads[k], AddOneTraceKernel::writes[k - 1])
        << "iteration " << k << " reads a copy of what iteration " << k - 1 << " wrote";
  EXPECT_EQ(out[0].raw_data(), AddOneTraceKernel::writes[4]) << "the final value is the last iteration's own";
}

TEST(ControlFlow, ScanOutputsOfSymbolicLengthServeEveryLengthWithOneSession) {
  // Scan over x[seq, 2]: s = s + x_t, scan_out = s * s.
  G body = G::Sub("body");
  body.In("s_in", Untyped()).In("x_t", Untyped());
  body.Op("Add", {"s_in", "x_t"}, {"s_out"}).Op("Mul", {"s_out", "s_out"}, {"sq"}).Out("s_out").Out("sq");
  G main = G::Main();
  main.In("s0", F32({2})).In("x", F32({Dim::Symbol("seq"), 2}));
  main.Op("Scan", {"s0", "x"}, {"s", "squares"},
          {{"body", Attribute::Subgraph(body.Take())}, {"num_scan_inputs", Attribute::Int(1)}});
  main.Out("s").Out("squares");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->outputs()[0].type.ToString(), "float32[2]");
  EXPECT_EQ(s->outputs()[1].type.ToString(), "float32[seq, 2]");
  const Tensor s0 = RandomTensor<float>({2}, -1, 1, 21);
  for (int64_t seq : {3, 7, 1, 0}) {
    const Tensor x = RandomTensor<float>({seq, 2}, -1, 1, 22 + static_cast<uint32_t>(seq));
    auto out = RunOk(*s, {"s0", "x"}, {s0, x});
    std::vector<double> state = D(s0), squares;
    const std::vector<double> xd = D(x);
    for (int64_t t = 0; t < seq; ++t)
      for (size_t i = 0; i < 2; ++i) {
        state[i] += xd[t * 2 + i];
        squares.push_back(state[i] * state[i]);
      }
    ExpectNear(out[0], {2}, state, StrCat("state, seq=", seq));
    ExpectNear(out[1], {seq, 2}, squares, StrCat("squares, seq=", seq));
  }
}

TEST(ControlFlow, ScanAxesAndDirections) {
  // x [2, 4] scanned along axis 1 in reverse; y [4, 2] along axis 0 forward. The scan output
  // (state * 2) goes along axis 1 of a [2, 4] output, placed in reverse.
  G body = G::Sub("body");
  body.In("s_in", F32({2})).In("x_t", F32({2})).In("y_t", F32({2}));
  body.Const("two", Tensor::FromVector<float>({2.f}, {}));
  body.Op("Add", {"s_in", "x_t"}, {"a"}).Op("Mul", {"a", "y_t"}, {"s_out"}).Op("Mul", {"s_out", "two"}, {"o"});
  body.Out("s_out").Out("o");
  G main = G::Main();
  main.In("s0", F32({2})).In("x", F32({2, 4})).In("y", F32({4, 2}));
  main.Op("Scan", {"s0", "x", "y"}, {"s", "o"},
          {{"body", Attribute::Subgraph(body.Take())},
           {"num_scan_inputs", Attribute::Int(2)},
           {"scan_input_axes", Attribute::Ints({-1, 0})},
           {"scan_input_directions", Attribute::Ints({1, 0})},
           {"scan_output_axes", Attribute::Ints({1})},
           {"scan_output_directions", Attribute::Ints({1})}});
  main.Out("s").Out("o");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->outputs()[1].type.ToString(), "float32[2, 4]");
  const Tensor s0 = RandomTensor<float>({2}, -1, 1, 31), x = RandomTensor<float>({2, 4}, -1, 1, 32),
               y = RandomTensor<float>({4, 2}, -1, 1, 33);
  auto out = RunOk(*s, {"s0", "x", "y"}, {s0, x, y});
  std::vector<double> state = D(s0), o(8);
  const std::vector<double> xd = D(x), yd = D(y);
  for (int t = 0; t < 4; ++t) {
    const int xt = 3 - t;  // reversed input
    for (int i = 0; i < 2; ++i) state[i] = (state[i] + xd[i * 4 + xt]) * yd[t * 2 + i];
    const int ot = 3 - t;  // reversed output, along axis 1
    for (int i = 0; i < 2; ++i) o[i * 4 + ot] = state[i] * 2;
  }
  ExpectNear(out[0], {2}, state, "state");
  ExpectNear(out[1], {2, 4}, o, "scan output");
}

TEST(ControlFlow, Scan8ScansEachBatchEntryForItsOwnLengthAndPadsWithZeros) {
  G body = G::Sub("body");
  body.In("s_in", F32({2})).In("x_t", F32({2}));
  body.Op("Add", {"s_in", "x_t"}, {"s_out"}).Op("Identity", {"s_out"}, {"o"}).Out("s_out").Out("o");
  G main = G::Main(8);
  main.In("lens", I64({2})).In("s0", F32({2, 2})).In("x", F32({2, 3, 2}));
  main.Op("Scan", {"lens", "s0", "x"}, {"s", "o"},
          {{"body", Attribute::Subgraph(body.Take())},
           {"num_scan_inputs", Attribute::Int(1)},
           {"directions", Attribute::Ints({1})}});
  main.Out("s").Out("o");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->outputs()[1].type.ToString(), "float32[2, 3, 2]");
  const Tensor s0 = RandomTensor<float>({2, 2}, -1, 1, 41), x = RandomTensor<float>({2, 3, 2}, -1, 1, 42);
  const std::vector<int64_t> lens = {3, 2};
  auto out = RunOk(*s, {"lens", "s0", "x"}, {Tensor::FromVector<int64_t>(lens, {2}), s0, x});
  const std::vector<double> s0d = D(s0), xd = D(x);
  std::vector<double> state(4), o(12, 0.0);
  for (int b = 0; b < 2; ++b) {
    double st[2] = {s0d[b * 2], s0d[b * 2 + 1]};
    for (int64_t t = 0; t < lens[b]; ++t) {
      const int64_t xt = lens[b] - 1 - t;  // reverse, within the entry's own length
      for (int i = 0; i < 2; ++i) {
        st[i] += xd[(b * 3 + xt) * 2 + i];
        o[(b * 3 + t) * 2 + i] = st[i];
      }
    }
    state[b * 2] = st[0];
    state[b * 2 + 1] = st[1];
  }
  ExpectNear(out[0], {2, 2}, state, "states");
  ExpectNear(out[1], {2, 3, 2}, o, "scan output (zero past entry 1's length)");
}

TEST(ControlFlow, IfTakesTheExactTypeOfTheBranchItRuns) {
  // then gives [2], else [3]: statically the output is float32[?]; each run checks the taken
  // branch's own shape.
  G then_branch = G::Sub("then_branch");
  then_branch.Const("t", Tensor::FromVector<float>({1.5f, -2.f}, {2})).Op("Add", {"t", "x"}, {"a"}).Out("a");
  G else_branch = G::Sub("else_branch");
  else_branch.Const("e", Tensor::FromVector<float>({3.f, 4.f, -5.f}, {3})).Op("Mul", {"e", "x"}, {"b"}).Out("b");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({1}));
  main.Op("If", {"c"}, {"y"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}});
  main.Out("y");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->outputs()[0].type.ToString(), "float32[?]");
  const Tensor x = Tensor::FromVector<float>({0.75f}, {1});
  ExpectNear(RunOk(*s, {"c", "x"}, {BoolT(true), x})[0], {2}, {2.25, -1.25}, "then");
  ExpectNear(RunOk(*s, {"c", "x"}, {BoolT(false), x})[0], {3}, {2.25, 3.0, -3.75}, "else");
}

TEST(ControlFlow, ABranchReturningAConstantHandsOutACopy) {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Constant", {}, {"k"}, {{"value", Attribute::TensorValue(Tensor::FromVector<float>({7.f}, {1}))}});
  then_branch.Out("k");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"n"}).Out("n");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({1}));
  main.Op("If", {"c"}, {"y"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}});
  main.Out("y");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  auto out = RunOk(*s, {"c", "x"}, {BoolT(true), Tensor::FromVector<float>({1.f}, {1})});
  out[0].data<float>()[0] = -100.f;  // the caller owns what it got
  out = RunOk(*s, {"c", "x"}, {BoolT(true), Tensor::FromVector<float>({1.f}, {1})});
  EXPECT_EQ(out[0].data<float>()[0], 7.f) << "the branch's constant must not be the caller's memory";
}

TEST(ControlFlow, TheMemoryPlanKeepsAValueASubgraphReadsUntilItsNodeFinishes) {
  // 'w' (an intermediate of the main graph, in the planned arena) is read only inside the body;
  // later intermediates must not reuse its memory while the loop runs. Runs twice: the second
  // run replays the plan.
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("acc_in", F32({16}));
  body.Op("Mul", {"acc_in", "w"}, {"acc_out"}).Op("Identity", {"cond_in"}, {"cond_out"}).Out("cond_out").Out("acc_out");
  G main = G::Main();
  main.In("x", F32({16})).In("m", I64({}));
  main.Op("Neg", {"x"}, {"w"});
  main.Op("Loop", {"m", "", "x"}, {"acc"}, {{"body", Attribute::Subgraph(body.Take())}});
  main.Op("Add", {"acc", "x"}, {"z"}).Op("Neg", {"z"}, {"y"}).Out("y");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  const Tensor x = RandomTensor<float>({16}, 0.5, 1.5, 51);
  const std::vector<double> xd = D(x);
  std::vector<double> want(16);
  for (size_t i = 0; i < 16; ++i) want[i] = -(xd[i] * std::pow(-xd[i], 3) + xd[i]);
  RunStats first, second;
  ExpectNear(RunOk(*s, {"x", "m"}, {x, I64T(3)}, &first)[0], {16}, want, "first run");
  ExpectNear(RunOk(*s, {"x", "m"}, {x, I64T(3)}, &second)[0], {16}, want, "planned run");
  EXPECT_TRUE(second.planned);
  // The body's own intermediates count in the run's peak (a nested run's peak adds to the step's).
  EXPECT_GE(second.peak_live_bytes, 3 * 16 * sizeof(float));
}

// ---------------- errors ----------------

TEST(ControlFlowErrors, ABranchWithTheWrongNumberOfOutputsIsNamed) {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Neg", {"x"}, {"a"}).Out("a");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"b"}).Op("Relu", {"x"}, {"r"}).Out("b").Out("r");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  main.Op("If", {"c"}, {"y"},
          {{"then_branch", Attribute::Subgraph(then_branch.Take())},
           {"else_branch", Attribute::Subgraph(else_branch.Take())}},
          "pick");
  main.Out("y");
  ExpectError(CreateStatus(std::move(main.g)), StatusCode::kInvalidModel,
              "If node 'pick': else_branch has 2 outputs but the node has 1");
}

TEST(ControlFlowErrors, ALoopBodyWithTheWrongNumberOfInputsIsNamed) {
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({}));  // no input for the loop-carried value
  body.Op("Identity", {"cond_in"}, {"cond_out"}).Op("Neg", {"x"}, {"v"}).Out("cond_out").Out("v");
  G main = G::Main();
  main.In("x", F32({2})).In("m", I64({}));
  main.Op("Loop", {"m", "", "x"}, {"y"}, {{"body", Attribute::Subgraph(body.Take())}}, "loop");
  main.Out("y");
  ExpectError(CreateStatus(std::move(main.g)), StatusCode::kInvalidModel,
              "Loop node 'loop': body takes 2 inputs; a Loop with 1 loop-carried value needs 3");
}

TEST(ControlFlowErrors, ALoopCarriedValueThatChangesDTypeIsNamed) {
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("v_in", Untyped());
  body.Op("Identity", {"cond_in"}, {"cond_out"}).Op("Identity", {"i"}, {"v_out"}).Out("cond_out").Out("v_out");
  G main = G::Main();
  main.In("x", F32({2})).In("m", I64({}));
  main.Op("Loop", {"m", "", "x"}, {"y"}, {{"body", Attribute::Subgraph(body.Take())}}, "loop");
  main.Out("y");
  ExpectError(CreateStatus(std::move(main.g)), StatusCode::kInvalidModel,
              "loop-carried value 0: the body returns a different dtype than it is given: float32[2] vs int64[]");
}

std::unique_ptr<Graph> TwoSequenceScan(Dims a, Dims b) {
  G body = G::Sub("body");
  body.In("s_in", F32({2})).In("a_t", F32({2})).In("b_t", F32({2}));
  body.Op("Add", {"s_in", "a_t"}, {"p"}).Op("Add", {"p", "b_t"}, {"s_out"}).Out("s_out");
  G main = G::Main();
  main.In("s0", F32({2})).In("a", F32(std::move(a))).In("b", F32(std::move(b)));
  main.Op("Scan", {"s0", "a", "b"}, {"s"},
          {{"body", Attribute::Subgraph(body.Take())}, {"num_scan_inputs", Attribute::Int(2)}}, "scan");
  main.Out("s");
  return std::move(main.g);
}

TEST(ControlFlowErrors, ScanInputsOfDifferentLengthsAreNamed) {
  // Known when the session is created...
  ExpectError(CreateStatus(TwoSequenceScan({3, 2}, {4, 2})), StatusCode::kInvalidModel,
              "Scan node 'scan': scan inputs have different sequence lengths: input 2 has 4 but input 1 has 3");
  // ...or only when it runs.
  auto s = Compile(TwoSequenceScan({Dim::Symbol("n"), 2}, {Dim::Symbol("k"), 2}));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = s->Run({"s0", "a", "b"},
                     {RandomTensor<float>({2}), RandomTensor<float>({3, 2}), RandomTensor<float>({4, 2})}, {}, &out);
  // The shape function sees the run's shapes before the kernel does.
  ExpectError(st, StatusCode::kInvalidModel,
              "Scan node 'scan': scan inputs have different sequence lengths: input 2 has 4 but input 1 has 3");
  // Equal lengths run.
  ASSERT_TRUE(s->Run({"s0", "a", "b"},
                     {RandomTensor<float>({2}), RandomTensor<float>({3, 2}), RandomTensor<float>({3, 2})}, {}, &out)
                  .ok());
}

TEST(ControlFlowErrors, AScanOutputThatChangesShapeIsNamed) {
  // Loop whose scan output is the loop-carried value, which grows each iteration.
  G body = G::Sub("body");
  body.In("i", I64({})).In("cond_in", Bool({})).In("v_in", Untyped());
  body.Op("Concat", {"v_in", "v_in"}, {"v_out"}, {{"axis", Attribute::Int(0)}});
  body.Op("Identity", {"cond_in"}, {"cond_out"}).Op("Identity", {"v_out"}, {"scan"});
  body.Out("cond_out").Out("v_out").Out("scan");
  G main = G::Main();
  main.In("x", F32({1})).In("m", I64({}));
  main.Op("Loop", {"m", "", "x"}, {"v", "grown"}, {{"body", Attribute::Subgraph(body.Take())}}, "loop");
  main.Out("v").Out("grown");
  auto s = Compile(std::move(main.g));
  ASSERT_NE(s, nullptr);
  // The loop-carried value's length changes: statically unknown.
  EXPECT_EQ(s->outputs()[0].type.ToString(), "float32[?]");
  std::vector<Tensor> out;
  ExpectError(s->Run({"x", "m"}, {Tensor::FromVector<float>({2.5f}, {1}), I64T(3)}, {}, &out),
              StatusCode::kRuntimeError, "scan output 0 is float32[4] at iteration 1 but float32[2] at iteration 0");
  // One iteration stacks one slice, and the carried value doubles each time.
  ASSERT_TRUE(s->Run({"x", "m"}, {Tensor::FromVector<float>({2.5f}, {1}), I64T(1)}, {}, &out).ok());
  ExpectNear(out[0], {2}, {2.5, 2.5}, "v");
  ExpectNear(out[1], {1, 2}, {2.5, 2.5}, "grown");
}

TEST(ControlFlowErrors, ADanglingNameInASubgraphIsNamed) {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Neg", {"nowhere"}, {"a"}).Out("a");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"b"}).Out("b");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  AttributeMap attrs{{"then_branch", Attribute::Subgraph(then_branch.Take())},
                     {"else_branch", Attribute::Subgraph(else_branch.Take())}};
  auto n = main.g->AddNode("If", "", {"c"}, {"y"}, std::move(attrs), "pick");
  ASSERT_FALSE(n.ok());
  ExpectError(n.status(), StatusCode::kInvalidModel,
              "subgraph 'then_branch' of If node 'pick' reads 'nowhere', which neither it nor any enclosing graph "
              "defines");
}

TEST(ControlFlowErrors, ASubgraphReadingItsOwnNodesOutputIsACycle) {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Neg", {"y"}, {"a"}).Out("a");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"b"}).Out("b");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  AttributeMap attrs{{"then_branch", Attribute::Subgraph(then_branch.Take())},
                     {"else_branch", Attribute::Subgraph(else_branch.Take())}};
  auto n = main.g->AddNode("If", "", {"c"}, {"y"}, std::move(attrs), "pick");
  ASSERT_FALSE(n.ok());
  ExpectError(n.status(), StatusCode::kInvalidModel, "reads 'y', an output of the node that owns it (a cycle)");
}

TEST(ControlFlowErrors, SubgraphsNestedTooDeeplyAreRefused) {
  // Ifs nested kMaxNestingDepth deep are fine; one more is refused, naming the node.
  auto nest = [](int levels) -> Status {
    std::shared_ptr<Graph> inner;
    for (int level = 0; level < levels; ++level) {
      G g = G::Sub(StrCat("level", level));
      if (inner == nullptr) {
        g.Op("Neg", {"x"}, {"y"});
      } else {
        G other = G::Sub("other");
        other.Op("Neg", {"x"}, {"y"}).Out("y");
        auto n = g.g->AddNode(
            "If", "", {"c"}, {"y"},
            {{"then_branch", Attribute::Subgraph(inner)}, {"else_branch", Attribute::Subgraph(other.Take())}},
            StrCat("if", level));
        if (!n.ok()) return n.status();
      }
      g.Out("y");
      inner = g.Take();
    }
    G main = G::Main();
    main.In("c", Bool({})).In("x", F32({2}));
    G other = G::Sub("other");
    other.Op("Neg", {"x"}, {"y"}).Out("y");
    auto n = main.g->AddNode(
        "If", "", {"c"}, {"y"},
        {{"then_branch", Attribute::Subgraph(inner)}, {"else_branch", Attribute::Subgraph(other.Take())}}, "top");
    return n.ok() ? Status::OK() : n.status();
  };
  EXPECT_TRUE(nest(Graph::kMaxNestingDepth).ok());
  ExpectError(nest(Graph::kMaxNestingDepth + 1), StatusCode::kInvalidModel,
              StrCat("nests subgraphs ", Graph::kMaxNestingDepth + 1, " levels deep; the engine allows at most ",
                     Graph::kMaxNestingDepth));
}

TEST(ControlFlowErrors, ASubgraphBelongsToOneNode) {
  G branch = G::Sub("branch");
  branch.Op("Neg", {"x"}, {"a"}).Out("a");
  std::shared_ptr<Graph> shared = branch.Take();
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  auto n = main.g->AddNode("If", "", {"c"}, {"y"},
                           {{"then_branch", Attribute::Subgraph(shared)}, {"else_branch", Attribute::Subgraph(shared)}},
                           "pick");
  ASSERT_FALSE(n.ok());
  ExpectError(n.status(), StatusCode::kInvalidModel, "already belongs to another node");
}

}  // namespace
}  // namespace tob
