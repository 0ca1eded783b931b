// The optimizer, the verifier and the partitioner on graphs with subgraphs, golden style: each
// pass runs through a PassManager (which takes it into every subgraph), and the canonical text of
// the graph after it is compared with the expected text. Subgraphs print after their node,
// indented; ^name is a value of the enclosing graph. Values a subgraph reads from outside are
// never removed, and a pass that replaces one (CSE, identity elimination, folding) re-points the
// subgraph at the replacement, which the numeric checks at the end confirm.
#include <gtest/gtest.h>

#include "controlflow_test_util.h"
#include "ir/graph_printer.h"
#include "op_tester.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using namespace cf_testing;

AttributeMap Branches(G& then_branch, G& else_branch) {
  return {{"then_branch", Attribute::Subgraph(then_branch.Take())},
          {"else_branch", Attribute::Subgraph(else_branch.Take())}};
}

// Runs the passes as the session's pipeline does (each on the graph, then on its subgraphs), with
// the engine's schemas and kernels and the verifier after each; returns what they changed.
std::vector<std::string> Optimize(Graph& g, std::vector<std::unique_ptr<GraphPass>> passes) {
  EXPECT_TRUE(InferShapes(g, OpSchemaRegistry::Global()).ok());
  PassManager pm;
  for (auto& p : passes) pm.Add(std::move(p));
  PassContext ctx;
  ctx.verify_after_each_pass = true;
  Status st = pm.Run(g, ctx, 2);
  EXPECT_TRUE(st.ok()) << st.ToString() << "\n" << GraphToText(g);
  return pm.applied();
}

std::vector<std::unique_ptr<GraphPass>> Passes(std::unique_ptr<GraphPass> a, std::unique_ptr<GraphPass> b = nullptr) {
  std::vector<std::unique_ptr<GraphPass>> v;
  v.push_back(std::move(a));
  if (b) v.push_back(std::move(b));
  return v;
}

// Runs a graph built twice, once optimised and once not, and compares their outputs.
void ExpectSameResults(const std::function<std::unique_ptr<Graph>()>& build, const std::vector<std::string>& names,
                       const std::vector<Tensor>& feeds) {
  std::vector<std::vector<Tensor>> results;
  for (OptLevel level : {OptLevel::kDisableAll, OptLevel::kAll}) {
    SessionOptions opts;
    opts.optimization_level = level;
    opts.verify_each_pass = true;
    auto s = Session::Create(build(), opts);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::vector<Tensor> out;
    Status st = s.value()->Run(names, feeds, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    results.push_back(std::move(out));
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i)
    testing::ExpectClose(results[1][i], results[0][i].shape(), testing::ToDoubles(results[0][i]), 1e-6, 1e-6,
                         StrCat("output ", i));
}

// Main graph: a = Neg(x) is read only inside then_branch; d = Relu(x) is dead. then_branch has a
// dead node of its own.
std::unique_ptr<Graph> DeadCodeGraph() {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Add", {"a", "x"}, {"u"}).Op("Mul", {"a", "a"}, {"unused"}).Out("u");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"v"}).Out("v");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  main.Op("Neg", {"x"}, {"a"}).Op("Relu", {"x"}, {"d"});
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch));
  main.Out("y");
  return std::move(main.g);
}

TEST(ControlFlowPasses, DeadCodeGoesInsideSubgraphsAndWhatTheyReadStays) {
  std::unique_ptr<Graph> g = DeadCodeGraph();
  std::vector<std::string> applied = Optimize(*g, Passes(CreateDeadCodeEliminationPass()));
  EXPECT_EQ(GraphToText(*g),
            "graph(c: bool[], x: float32[2]) {\n"
            "  %0 = Neg(x)\n"
            "  y = If(c) {else_branch=<subgraph>, then_branch=<subgraph>}\n"
            "    else_branch: graph() {\n"
            "      v = Neg(^x)\n"
            "      return v\n"
            "    }\n"
            "    then_branch: graph() {\n"
            "      u = Add(^%0, ^x)\n"
            "      return u\n"
            "    }\n"
            "  return y\n"
            "}\n");
  EXPECT_EQ(applied, (std::vector<std::string>{
                         "DeadCodeElimination: removed 1 node",
                         "DeadCodeElimination: removed 1 node (subgraph 'then_branch' of If node 'If_2')"}));
}

TEST(ControlFlowPasses, AnOuterValueGoesOnceNoSubgraphReadsItAnyMore) {
  // then_branch's only reader of 'a' is dead: once it goes, the If stops reading 'a' and the next
  // round removes a's producer from the main graph.
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Mul", {"a", "a"}, {"unused"}).Op("Neg", {"x"}, {"u"}).Out("u");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"v"}).Out("v");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  main.Op("Neg", {"x"}, {"a"});
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch));
  main.Out("y");
  Optimize(*main.g, Passes(CreateDeadCodeEliminationPass()));
  EXPECT_EQ(GraphToText(*main.g),
            "graph(c: bool[], x: float32[2]) {\n"
            "  y = If(c) {else_branch=<subgraph>, then_branch=<subgraph>}\n"
            "    else_branch: graph() {\n"
            "      v = Neg(^x)\n"
            "      return v\n"
            "    }\n"
            "    then_branch: graph() {\n"
            "      u = Neg(^x)\n"
            "      return u\n"
            "    }\n"
            "  return y\n"
            "}\n");
}

TEST(ControlFlowPasses, CseMergesDuplicatesInsideASubgraph) {
  G body = G::Sub("body");
  body.In("i", ValueType(DType::kInt64, Dims{})).In("cond_in", Bool({})).In("v_in", F32({2}));
  body.Op("Neg", {"v_in"}, {"p"}).Op("Neg", {"v_in"}, {"q"}).Op("Add", {"p", "q"}, {"v_out"});
  body.Op("Identity", {"cond_in"}, {"cond_out"}).Out("cond_out").Out("v_out");
  G main = G::Main();
  main.In("m", ValueType(DType::kInt64, Dims{})).In("x", F32({2}));
  main.Op("Loop", {"m", "", "x"}, {"y"}, {{"body", Attribute::Subgraph(body.Take())}});
  main.Out("y");
  std::vector<std::string> applied = Optimize(*main.g, Passes(CreateCommonSubexpressionEliminationPass()));
  EXPECT_EQ(GraphToText(*main.g),
            "graph(m: int64[], x: float32[2]) {\n"
            "  y = Loop(m, _, x) {body=<subgraph>}\n"
            "    body: graph(i: int64[], cond_in: bool[], v_in: float32[2]) {\n"
            "      cond_out = Identity(cond_in)\n"
            "      %0 = Neg(v_in)\n"
            "      v_out = Add(%0, %0)\n"
            "      return cond_out, v_out\n"
            "    }\n"
            "  return y\n"
            "}\n");
  EXPECT_EQ(applied, (std::vector<std::string>{
                         "CommonSubexpressionElimination: merged 1 duplicate node (subgraph 'body' of Loop node "
                         "'Loop_0')"}));
}

std::unique_ptr<Graph> FoldingGraph() {
  G then_branch = G::Sub("then_branch");
  then_branch.Const("two", {2.f}, {});
  then_branch.Op("Mul", {"k", "two"}, {"t"}).Op("Add", {"t", "x"}, {"u"}).Out("u");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Sub", {"x", "k"}, {"v"}).Out("v");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2})).Const("k", {1.5f, -2.f}, {2});
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch));
  main.Out("y");
  return std::move(main.g);
}

TEST(ControlFlowPasses, ConstantsOfEnclosingGraphsFoldInsideSubgraphs) {
  std::unique_ptr<Graph> g = FoldingGraph();
  Optimize(*g, Passes(CreateConstantFoldingPass(), CreateDeadCodeEliminationPass()));
  // k became a constant of each branch (the same tensor), t = k * 2 folded in then_branch, and
  // the If no longer reads anything of the main graph but x.
  EXPECT_EQ(GraphToText(*g),
            "graph(c: bool[], x: float32[2]) {\n"
            "  y = If(c) {else_branch=<subgraph>, then_branch=<subgraph>}\n"
            "    else_branch: graph() {\n"
            "      const k: float32[2] = [1.5, -2]\n"
            "      v = Sub(^x, k)\n"
            "      return v\n"
            "    }\n"
            "    then_branch: graph() {\n"
            "      const t: float32[2] = [3, -4]\n"
            "      u = Add(t, ^x)\n"
            "      return u\n"
            "    }\n"
            "  return y\n"
            "}\n");
  const Node* node = g->nodes()[0];
  ASSERT_EQ(node->implicit_inputs().size(), 1u);
  EXPECT_EQ(node->implicit_inputs()[0]->name(), "x");
  const Tensor x = testing::RandomTensor<float>({2}, -2, 2, 61);
  for (bool c : {true, false}) ExpectSameResults(FoldingGraph, {"c", "x"}, {Tensor::FromVector<bool>({c}, {}), x});
}

std::unique_ptr<Graph> DuplicateOuterGraph() {
  // a1 and a2 are the same value; then_branch reads a2, the main graph reads a1.
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Add", {"a2", "x"}, {"u"}).Out("u");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Identity", {"i"}, {"v"}).Out("v");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  main.Op("Neg", {"x"}, {"a1"}).Op("Neg", {"x"}, {"a2"}).Op("Identity", {"a1"}, {"i"});
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch));
  main.Op("Mul", {"y", "a1"}, {"z"});
  main.Out("z");
  return std::move(main.g);
}

TEST(ControlFlowPasses, ReplacingAnOuterValueRepointsTheSubgraphsThatReadIt) {
  std::unique_ptr<Graph> g = DuplicateOuterGraph();
  Optimize(*g, Passes(CreateCommonSubexpressionEliminationPass(), CreateIdentityEliminationPass()));
  // a2 merged into a1 and the identity i bypassed: both branches now read a1 (%0).
  EXPECT_EQ(GraphToText(*g),
            "graph(c: bool[], x: float32[2]) {\n"
            "  %0 = Neg(x)\n"
            "  %1 = If(c) {else_branch=<subgraph>, then_branch=<subgraph>}\n"
            "    else_branch: graph() {\n"
            "      v = Identity(^%0)\n"
            "      return v\n"
            "    }\n"
            "    then_branch: graph() {\n"
            "      u = Add(^%0, ^x)\n"
            "      return u\n"
            "    }\n"
            "  z = Mul(%1, %0)\n"
            "  return z\n"
            "}\n");
  const Tensor x = testing::RandomTensor<float>({2}, -2, 2, 62);
  for (bool c : {true, false})
    ExpectSameResults(DuplicateOuterGraph, {"c", "x"}, {Tensor::FromVector<bool>({c}, {}), x});
}

std::unique_ptr<Graph> ConstantConditionGraph(bool cond_is_input) {
  G then_branch = G::Sub("then_branch");
  then_branch.Const("half", {0.5f}, {}).Op("Mul", {"x", "half"}, {"t"}).Op("Add", {"t", "x"}, {"u"}).Out("u");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"v"}).Out("v");
  G main = G::Main();
  main.In("x", F32({2}));
  if (cond_is_input) main.In("c", Bool({}));
  else EXPECT_TRUE(main.g->AddInitializer("c", Tensor::FromVector<bool>({true}, {})).ok());
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch), "pick");
  main.Op("Relu", {"y"}, {"z"}).Out("z").Out("y");
  return std::move(main.g);
}

TEST(ControlFlowPasses, AnIfWithAConstantConditionBecomesTheBranchItTakes) {
  std::unique_ptr<Graph> g = ConstantConditionGraph(false);
  std::vector<std::string> applied = Optimize(*g, Passes(CreateInlineConstantIfPass()));
  EXPECT_EQ(GraphToText(*g),
            "graph(x: float32[2]) {\n"
            "  const half: float32[] = [0.5]\n"
            "  %0 = Mul(x, half)\n"
            "  y = Add(%0, x)\n"
            "  z = Relu(y)\n"
            "  return z, y\n"
            "}\n");
  EXPECT_EQ(
      applied,
      (std::vector<std::string>{"InlineConstantIf: inlined the taken branch of 1 If node with a constant condition"}));
  // Must not fire: the condition is data.
  std::unique_ptr<Graph> data = ConstantConditionGraph(true);
  EXPECT_TRUE(Optimize(*data, Passes(CreateInlineConstantIfPass())).empty());
  const Tensor x = testing::RandomTensor<float>({2}, -2, 2, 63);
  ExpectSameResults([] { return ConstantConditionGraph(false); }, {"x"}, {x});
}

// An If whose else_branch cannot be typed (a Split of 2 values into 4 parts) but whose condition
// is constant once folded, as in onnx's AffineGrid function body.
std::unique_ptr<Graph> DeadIllTypedBranchGraph(bool cond_is_input) {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Neg", {"x"}, {"t"}).Out("t");
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Split", {"x"}, {"a", "b", "c", "d"}, {{"num_outputs", Attribute::Int(4)}}, "bad_split");
  else_branch.Out("a");
  G main = G::Main();
  main.In("x", F32({2}));
  if (cond_is_input) {
    main.In("c", Bool({}));
  } else {
    EXPECT_TRUE(main.g->AddInitializer("two", Tensor::FromVector<int64_t>({2}, {})).ok());
    main.Op("Size", {"x"}, {"n"}).Op("Equal", {"n", "two"}, {"c"});
  }
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch), "pick");
  main.Out("y");
  return std::move(main.g);
}

TEST(ControlFlowPasses, ABranchThatNeverRunsNeedNotBeWellTyped) {
  auto s = Session::Create(DeadIllTypedBranchGraph(false), SessionOptions{});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Tensor> out;
  ASSERT_TRUE(s.value()->Run({"x"}, {Tensor::FromVector<float>({1.5f, -2.f}, {2})}, {}, &out).ok());
  testing::ExpectClose(out[0], {2}, {-1.5, 2.0}, 0, 0, "y");
  // The same branch where it may run is refused, naming it.
  auto refused = Session::Create(DeadIllTypedBranchGraph(true), SessionOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidModel);
  EXPECT_NE(
      refused.status().message().find("inferring subgraph 'else_branch' of If node 'pick': Split node 'bad_split'"),
      std::string::npos)
      << refused.status().message();
}

TEST(ControlFlowPasses, TheVerifierChecksSubgraphsAndNamesThem) {
  G then_branch = G::Sub("then_branch");
  then_branch.Op("Add", {"x"}, {"u"}, {}, "half_add").Out("u");  // Add takes two inputs
  G else_branch = G::Sub("else_branch");
  else_branch.Op("Neg", {"x"}, {"v"}).Out("v");
  G main = G::Main();
  main.In("c", Bool({})).In("x", F32({2}));
  main.Op("If", {"c"}, {"y"}, Branches(then_branch, else_branch), "pick");
  main.Out("y");
  Status st = VerifyGraph(*main.g, OpSchemaRegistry::Global());
  EXPECT_EQ(st.code(), StatusCode::kInvalidModel);
  EXPECT_NE(st.message().find("in subgraph 'then_branch' of If node 'pick': Add node 'half_add'"), std::string::npos)
      << st.message();
}

TEST(ControlFlowPasses, ThePartitionReportListsSubgraphNodesUnderTheirNode) {
  auto s = Session::Create(DeadCodeGraph(), SessionOptions{});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> nodes;
  for (const auto& e : s.value()->partition_report().nodes) nodes.push_back(e.node + " " + e.provider);
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "If_2/then_branch/Add_0 CPUExecutionProvider"), nodes.end())
      << ::testing::PrintToString(nodes);
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "If_2 CPUExecutionProvider"), nodes.end());
  bool planned = false;
  for (const std::string& line : s.value()->log())
    planned = planned || line.rfind("subgraph 'then_branch' of If node 'If_2': execution plan:", 0) == 0;
  EXPECT_TRUE(planned) << "the session log shows each subgraph's own plan";
}

}  // namespace
}  // namespace tob
