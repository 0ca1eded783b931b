// Optimizer passes, golden style: build the graph before, run one pass, compare its canonical
// text with the graph expected after, built separately. Every rewrite also has a case where it
// must not fire.
#include <gtest/gtest.h>

#include "graph_pass_test_util.h"
#include "ir/graph_printer.h"
#include "optimizer/passes.h"

namespace tob {
namespace {

using testing::F32;
using testing::GraphBuilder;
using testing::Registries;
using testing::RunPass;

AttributeMap CastTo(DType to) { return {{"to", Attribute::Int(static_cast<int64_t>(to))}}; }

// ---------------- GraphToText ----------------

TEST(OptimizerGraphText, CanonicalTextIgnoresInsertionOrderAndNames) {
  Graph a;
  GraphBuilder(a).Input("x", F32({Dim::Symbol("batch"), 2})).Const("w", {1.5f, -2.f}, {2});
  GraphBuilder(a).Op("Relu", {"x"}, {"r"}, {}, "", "first");
  GraphBuilder(a).Op("Neg", {"x"}, {"n"}, {}, "", "second");
  GraphBuilder(a).Op("Add", {"r", "n"}, {"s"});
  GraphBuilder(a).Op("Mul", {"s", "w"}, {"y"});
  GraphBuilder(a).Output("y");

  Graph b;  // same structure, nodes added in another order, other names
  GraphBuilder(b).Input("x", F32({Dim::Symbol("batch"), 2})).Const("w", {1.5f, -2.f}, {2});
  GraphBuilder(b).Op("Neg", {"x"}, {"neg_out"});
  GraphBuilder(b).Op("Relu", {"x"}, {"relu_out"});
  GraphBuilder(b).Op("Add", {"relu_out", "neg_out"}, {"sum"});
  GraphBuilder(b).Op("Mul", {"sum", "w"}, {"y"});
  GraphBuilder(b).Output("y");

  EXPECT_EQ(GraphToText(a), GraphToText(b));
  EXPECT_EQ(GraphToText(a),
            "graph(x: float32[batch, 2]) {\n"
            "  const w: float32[2] = [1.5, -2]\n"
            "  %0 = Relu(x)\n"
            "  %1 = Neg(x)\n"
            "  %2 = Add(%0, %1)\n"
            "  y = Mul(%2, w)\n"
            "  return y\n"
            "}\n");
}

TEST(OptimizerGraphText, DebugTextShowsNamesTypesAttributesAndProviders) {
  Graph g;
  GraphBuilder(g).Input("x", F32({3}));
  Node* cast = GraphBuilder(g).Op("Cast", {"x"}, {"c"}, CastTo(DType::kInt64), "", "to_int");
  cast->set_provider(kCpuProvider);
  GraphBuilder(g).Output("c");
  ASSERT_TRUE(InferShapes(g, Registries().schemas).ok());
  GraphTextOptions debug;
  debug.canonical_names = false;
  debug.show_types = true;
  EXPECT_EQ(GraphToText(g, debug),
            "graph(x: float32[3]) {\n"
            "  c: int64[3] = Cast(x) {to=7} @CPUExecutionProvider  # 'to_int'\n"
            "  return c\n"
            "}\n");
}

// ---------------- ConstantFolding ----------------

TEST(OptimizerConstantFolding, FoldsAChainOfConstantNodes) {
  Graph before;
  GraphBuilder(before).Input("x", F32({2})).Const("a", {1, 2}, {2}).Const("b", {3, 4}, {2});
  GraphBuilder(before).Op("Add", {"a", "b"}, {"s"});
  GraphBuilder(before).Op("Neg", {"s"}, {"n"});
  GraphBuilder(before).Op("Relu", {"n"}, {"r"});
  GraphBuilder(before).Op("Add", {"n", "r"}, {"t"});
  GraphBuilder(before).Op("Mul", {"x", "t"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateConstantFoldingPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({2})).Const("t", {-4, -6}, {2});
  GraphBuilder(expected).Op("Mul", {"x", "t"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerConstantFolding, FoldedGraphOutputsKeepTheirNames) {
  Graph before;
  GraphBuilder(before).Const("a", {1, -2}, {2});
  GraphBuilder(before).Op("Neg", {"a"}, {"y"});
  GraphBuilder(before).Op("Relu", {"y"}, {"z"});
  GraphBuilder(before).Output("y").Output("z");
  EXPECT_TRUE(RunPass(CreateConstantFoldingPass(), before));

  Graph expected;
  GraphBuilder(expected).Const("y", {-1, 2}, {2}).Const("z", {0, 2}, {2});
  GraphBuilder(expected).Output("y").Output("z");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
  EXPECT_EQ(before.output_names(), (std::vector<std::string>{"y", "z"}));
}

TEST(OptimizerConstantFolding, DoesNotFoldANodeFedByAGraphInput) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2})).Const("c", {1, 2}, {2});
  GraphBuilder(g).Op("Add", {"x", "c"}, {"s"});
  GraphBuilder(g).Op("Relu", {"s"}, {"y"});
  GraphBuilder(g).Output("y");
  std::string text = GraphToText(g);
  EXPECT_FALSE(RunPass(CreateConstantFoldingPass(), g));
  EXPECT_EQ(GraphToText(g), text);
}

TEST(OptimizerConstantFolding, NeverFoldsRandomOpsOrTrainingDropout) {
  Graph g;
  GraphBuilder(g).Const("c", {1, 2}, {2});
  g.AddInitializer("train", Tensor::FromVector<bool>({true}, {})).value();
  g.AddInitializer("ratio", Tensor::FromVector<float>({0.5f}, {})).value();
  GraphBuilder(g).Op("RandomUniformLike", {"c"}, {"u"});
  GraphBuilder(g).Op("Dropout", {"c", "ratio", "train"}, {"d"});
  GraphBuilder(g).Output("u").Output("d");
  std::string text = GraphToText(g);
  EXPECT_FALSE(RunPass(CreateConstantFoldingPass(), g));
  EXPECT_EQ(GraphToText(g), text);
}

TEST(OptimizerConstantFolding, FoldsInferenceDropout) {
  Graph before;
  GraphBuilder(before).Const("c", {1, 2}, {2});
  GraphBuilder(before).Op("Dropout", {"c"}, {"d"});
  GraphBuilder(before).Output("d");
  EXPECT_TRUE(RunPass(CreateConstantFoldingPass(), before));
  Graph expected;
  GraphBuilder(expected).Const("d", {1, 2}, {2}).Output("d");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerConstantFolding, SkipsANodeWithoutKernelAndFoldsTheRest) {
  Graph before;
  GraphBuilder(before).Const("a", {1, 2}, {2}).Const("b", {3, 4}, {2});
  GraphBuilder(before).Op("Sin", {"a"}, {"s"});  // a schema, but no kernel anywhere
  GraphBuilder(before).Op("Add", {"a", "b"}, {"t"});
  GraphBuilder(before).Op("Mul", {"s", "t"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateConstantFoldingPass(), before));

  Graph expected;
  GraphBuilder(expected).Const("a", {1, 2}, {2}).Const("t", {4, 6}, {2});
  GraphBuilder(expected).Op("Sin", {"a"}, {"s"});
  GraphBuilder(expected).Op("Mul", {"s", "t"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerConstantFolding, FoldsShapeOfAStaticShapeOnly) {
  Graph before;
  GraphBuilder(before).Input("x", F32({2, 3})).Input("s", F32({Dim::Symbol("batch"), 3}));
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Shape", {"r"}, {"static_shape"});
  GraphBuilder(before).Op("Shape", {"s"}, {"dynamic_shape"});
  GraphBuilder(before).Output("static_shape").Output("dynamic_shape");
  ASSERT_TRUE(InferShapes(before, Registries().schemas).ok());
  EXPECT_TRUE(RunPass(CreateConstantFoldingPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({2, 3})).Input("s", F32({Dim::Symbol("batch"), 3}));
  GraphBuilder(expected).ConstI64("static_shape", {2, 3}, {2});
  GraphBuilder(expected).Op("Relu", {"x"}, {"r"});  // dead now: DCE's business, not folding's
  GraphBuilder(expected).Op("Shape", {"s"}, {"dynamic_shape"});
  GraphBuilder(expected).Output("static_shape").Output("dynamic_shape");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerConstantFolding, ShapeHonoursStartAndEnd) {
  Graph before;
  GraphBuilder(before).Input("x", F32({2, 3, 5}));
  GraphBuilder(before).Op("Shape", {"x"}, {"tail"}, {{"start", Attribute::Int(-2)}});
  GraphBuilder(before).Op("Shape", {"x"}, {"mid"}, {{"start", Attribute::Int(1)}, {"end", Attribute::Int(-1)}});
  GraphBuilder(before).Output("tail").Output("mid");
  EXPECT_TRUE(RunPass(CreateConstantFoldingPass(), before));
  Graph expected;
  GraphBuilder(expected).Input("x", F32({2, 3, 5})).ConstI64("tail", {3, 5}, {2}).ConstI64("mid", {3}, {1});
  GraphBuilder(expected).Output("tail").Output("mid");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

// ---------------- IdentityElimination ----------------

TEST(OptimizerIdentityElimination, RemovesIdentityChains) {
  Graph before;
  GraphBuilder(before).Input("x", F32({4}));
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Identity", {"r"}, {"i1"});
  GraphBuilder(before).Op("Identity", {"i1"}, {"i2"});
  GraphBuilder(before).Op("Neg", {"i2"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateIdentityEliminationPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({4}));
  GraphBuilder(expected).Op("Relu", {"x"}, {"r"});
  GraphBuilder(expected).Op("Neg", {"r"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerIdentityElimination, RemovesNoOpCastReshapeAndInferenceDropout) {
  Graph before;
  GraphBuilder(before).Input("x", F32({Dim::Symbol("batch"), 3})).ConstI64("same", {0, 3}, {2});
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Cast", {"r"}, {"c"}, CastTo(DType::kFloat32));
  GraphBuilder(before).Op("Reshape", {"c", "same"}, {"s"});
  GraphBuilder(before).Op("Dropout", {"s"}, {"d", "mask"});
  GraphBuilder(before).Op("Neg", {"d"}, {"y"});
  GraphBuilder(before).Output("y");
  ASSERT_TRUE(InferShapes(before, Registries().schemas).ok());
  EXPECT_TRUE(RunPass(CreateIdentityEliminationPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({Dim::Symbol("batch"), 3}));
  GraphBuilder(expected).Op("Relu", {"x"}, {"r"});
  GraphBuilder(expected).Op("Neg", {"r"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerIdentityElimination, KeepsRealCastsReshapesAndTrainingDropout) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2, 3})).Input("train", ValueType(DType::kBool, Dims{}));
  GraphBuilder(g).ConstI64("other", {3, 2}, {2}).Const("ratio", {0.1f}, {});
  GraphBuilder(g).Op("Relu", {"x"}, {"r"});
  GraphBuilder(g).Op("Cast", {"r"}, {"c"}, CastTo(DType::kFloat64));
  GraphBuilder(g).Op("Reshape", {"r", "other"}, {"s"});
  GraphBuilder(g).Op("Dropout", {"r", "ratio", "train"}, {"d"});
  GraphBuilder(g).Op("Dropout", {"x"}, {"d2", "used_mask"});  // inference, but the mask is read
  GraphBuilder(g).Output("c").Output("s").Output("d").Output("used_mask");
  ASSERT_TRUE(InferShapes(g, Registries().schemas).ok());
  std::string text = GraphToText(g);
  EXPECT_FALSE(RunPass(CreateIdentityEliminationPass(), g));
  EXPECT_EQ(GraphToText(g), text);
}

TEST(OptimizerIdentityElimination, KeepsTheCopyBetweenAGraphInputAndAGraphOutput) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Identity", {"x"}, {"y"});
  GraphBuilder(g).Output("y");
  std::string text = GraphToText(g);
  EXPECT_FALSE(RunPass(CreateIdentityEliminationPass(), g));
  EXPECT_EQ(GraphToText(g), text);
}

TEST(OptimizerIdentityElimination, AGraphOutputKeepsItsNameWhenItsIdentityGoes) {
  Graph before;
  GraphBuilder(before).Input("x", F32({2}));
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Identity", {"r"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateIdentityEliminationPass(), before));
  EXPECT_EQ(before.output_names(), std::vector<std::string>{"y"});
  EXPECT_EQ(before.outputs()[0], before.FindValue("r"));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({2}));
  GraphBuilder(expected).Op("Relu", {"x"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

// ---------------- CommonSubexpressionElimination ----------------

TEST(OptimizerCse, MergesIdenticalNodesAndCascades) {
  Graph before;
  GraphBuilder(before).Input("x", F32({4}));
  GraphBuilder(before).Op("Relu", {"x"}, {"r1"});
  GraphBuilder(before).Op("Relu", {"x"}, {"r2"});
  GraphBuilder(before).Op("Neg", {"r1"}, {"n1"});
  GraphBuilder(before).Op("Neg", {"r2"}, {"n2"});
  GraphBuilder(before).Op("Add", {"n1", "n2"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateCommonSubexpressionEliminationPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({4}));
  GraphBuilder(expected).Op("Relu", {"x"}, {"r"});
  GraphBuilder(expected).Op("Neg", {"r"}, {"n"});
  GraphBuilder(expected).Op("Add", {"n", "n"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerCse, MergesOnlyEqualAttributes) {
  Graph before;
  GraphBuilder(before).Input("x", F32({4}));
  GraphBuilder(before).Op("Cast", {"x"}, {"a"}, CastTo(DType::kFloat64));
  GraphBuilder(before).Op("Cast", {"x"}, {"b"}, CastTo(DType::kFloat64));
  GraphBuilder(before).Op("Cast", {"x"}, {"c"}, CastTo(DType::kInt64));
  GraphBuilder(before).Op("Mul", {"a", "b"}, {"y"});
  GraphBuilder(before).Output("y").Output("c");
  EXPECT_TRUE(RunPass(CreateCommonSubexpressionEliminationPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({4}));
  GraphBuilder(expected).Op("Cast", {"x"}, {"a"}, CastTo(DType::kFloat64));
  GraphBuilder(expected).Op("Cast", {"x"}, {"c"}, CastTo(DType::kInt64));
  GraphBuilder(expected).Op("Mul", {"a", "a"}, {"y"});
  GraphBuilder(expected).Output("y").Output("c");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerCse, NeverMergesRandomOps) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("RandomUniformLike", {"x"}, {"u1"});
  GraphBuilder(g).Op("RandomUniformLike", {"x"}, {"u2"});
  GraphBuilder(g).Op("Add", {"u1", "u2"}, {"y"});
  GraphBuilder(g).Output("y");
  std::string text = GraphToText(g);
  EXPECT_FALSE(RunPass(CreateCommonSubexpressionEliminationPass(), g));
  EXPECT_EQ(GraphToText(g), text);
}

TEST(OptimizerCse, MergedGraphOutputsKeepTheirNames) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Relu", {"x"}, {"y1"});
  GraphBuilder(g).Op("Relu", {"x"}, {"y2"});
  GraphBuilder(g).Output("y1").Output("y2");
  EXPECT_TRUE(RunPass(CreateCommonSubexpressionEliminationPass(), g));
  EXPECT_EQ(g.output_names(), (std::vector<std::string>{"y1", "y2"}));
  EXPECT_EQ(g.outputs()[0], g.outputs()[1]);
  EXPECT_EQ(GraphToText(g),
            "graph(x: float32[4]) {\n"
            "  y1 = Relu(x)\n"
            "  return y1, y2 <- y1\n"
            "}\n");
}

TEST(OptimizerCse, DoesNotMergeAwayAKeptValue) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  GraphBuilder(g).Op("Relu", {"x"}, {"r1"});
  GraphBuilder(g).Op("Relu", {"x"}, {"r2"});
  GraphBuilder(g).Op("Add", {"r1", "r2"}, {"y"});
  GraphBuilder(g).Output("y");
  EXPECT_FALSE(RunPass(CreateCommonSubexpressionEliminationPass(), g, {"r2"}));
  EXPECT_NE(g.FindValue("r2"), nullptr);
}

// A recompute copy repeats a forward node for the backward on purpose (the memory optimizer frees
// the forward's value early): it is never merged back, nor is anything merged into it; ordinary
// duplicates around it still merge.
TEST(OptimizerCse, NeverMergesRecomputeCopies) {
  Graph before;
  GraphBuilder(before).Input("x", F32({4}));
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Neg", {"r"}, {"forward"});
  GraphBuilder(before).Op("Relu", {"x"}, {"r_copy"})->set_recompute(true);
  GraphBuilder(before).Op("Relu", {"x"}, {"r_dup"});
  GraphBuilder(before).Op("Mul", {"forward", "r_copy"}, {"m"});
  GraphBuilder(before).Op("Add", {"m", "r_dup"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateCommonSubexpressionEliminationPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({4}));
  GraphBuilder(expected).Op("Relu", {"x"}, {"r"});
  GraphBuilder(expected).Op("Neg", {"r"}, {"forward"});
  GraphBuilder(expected).Op("Relu", {"x"}, {"r_copy"})->set_recompute(true);
  GraphBuilder(expected).Op("Mul", {"forward", "r_copy"}, {"m"});
  GraphBuilder(expected).Op("Add", {"m", "r"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
  EXPECT_NE(GraphToText(before).find("Relu(x) [recompute]"), std::string::npos) << GraphToText(before);
}

TEST(OptimizerCse, ANodePlacedLikeARecomputeCopyIsOne) {
  Graph g;
  GraphBuilder(g).Input("x", F32({4}));
  Node* copy = GraphBuilder(g).Op("Relu", {"x"}, {"r_copy"});
  copy->set_recompute(true);
  Node* fused = GraphBuilder(g).Op("Neg", {"r_copy"}, {"y"});
  GraphBuilder(g).Output("y");
  g.PlaceLike(fused, copy);
  EXPECT_TRUE(fused->recompute());
  EXPECT_EQ(fused->order_key(), copy->order_key());
}

// ---------------- DeadCodeElimination ----------------

TEST(OptimizerDce, RemovesDeadChainsAndTheirConstants) {
  Graph before;
  GraphBuilder(before).Input("x", F32({2})).Const("c", {1, 2}, {2});
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Add", {"r", "c"}, {"dead"});
  GraphBuilder(before).Op("Neg", {"dead"}, {"dead2"});
  GraphBuilder(before).Op("Neg", {"x"}, {"y"});
  GraphBuilder(before).Output("y");
  EXPECT_TRUE(RunPass(CreateDeadCodeEliminationPass(), before));

  Graph expected;
  GraphBuilder(expected).Input("x", F32({2}));
  GraphBuilder(expected).Op("Neg", {"x"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerDce, KeepsOutputsKeptValuesAndSideEffects) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Relu", {"x"}, {"kept"});
  GraphBuilder(g).Op("Neg", {"x"}, {"y"});
  GraphBuilder(g).Op("YieldOp", {"y"}, {"grad"}, {}, kMicrosoftDomain);
  GraphBuilder(g).Output("y");
  std::string text = GraphToText(g);
  EXPECT_FALSE(RunPass(CreateDeadCodeEliminationPass(), g, {"kept"}));
  EXPECT_EQ(GraphToText(g), text);
}

// ---------------- Shape inference ----------------

TEST(OptimizerShapeInference, PropagatesSymbolicDimsAndConstantValues) {
  Graph g;
  GraphBuilder(g).Input("x", F32({Dim::Symbol("batch"), 4})).Const("w", {1, 2, 3, 4}, {4});
  GraphBuilder(g).ConstI64("shape", {0, 2, -1}, {3});
  GraphBuilder(g).Op("Add", {"x", "w"}, {"s"});
  GraphBuilder(g).Op("Reshape", {"s", "shape"}, {"y"});
  GraphBuilder(g).Op("Cast", {"y"}, {"z"}, CastTo(DType::kFloat16));
  GraphBuilder(g).Output("z");
  ASSERT_TRUE(InferShapes(g, Registries().schemas).ok());
  EXPECT_EQ(g.FindValue("s")->type().ToString(), "float32[batch, 4]");
  EXPECT_EQ(g.FindValue("y")->type().ToString(), "float32[batch, 2, ?]");
  EXPECT_EQ(g.FindValue("z")->type().ToString(), "float16[batch, 2, ?]");
}

TEST(OptimizerShapeInference, KeepsADeclaredOutputTypeWhenInferenceKnowsNothing) {
  Graph g;
  GraphBuilder(g).Input("x", F32({3}));
  GraphBuilder(g).Op("Opaque", {"x"}, {"y"});
  GraphBuilder(g).Output("y", ValueType(DType::kInt32, Dims{Dim::Symbol("n")}));
  ASSERT_TRUE(InferShapes(g, Registries().schemas).ok());
  EXPECT_EQ(g.FindValue("y")->type().ToString(), "int32[n]");
}

TEST(OptimizerShapeInference, AShapeErrorNamesTheNode) {
  Graph g;
  GraphBuilder(g).Input("a", F32({3})).Input("b", F32({4}));
  GraphBuilder(g).Op("Add", {"a", "b"}, {"y"}, {}, "", "bad_add");
  GraphBuilder(g).Output("y");
  Status s = InferShapes(g, Registries().schemas);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidModel);
  EXPECT_NE(s.message().find("bad_add"), std::string::npos) << s.message();
}

// ---------------- PassManager and the pipeline ----------------

TEST(OptimizerPipeline, LevelsListTheirPassesInOrder) {
  EXPECT_TRUE(BuildPipeline(OptLevel::kDisableAll).passes().empty());
  std::vector<std::string> names;
  PassManager basic = BuildPipeline(OptLevel::kBasic);
  for (const auto& p : basic.passes()) names.push_back(p->name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"ShapeInference", "ConstantFolding", "InlineConstantIf", "IdentityElimination",
                                      "CommonSubexpressionElimination", "DeadCodeElimination"}));
  EXPECT_GE(BuildPipeline(OptLevel::kAll).passes().size(), names.size());
}

TEST(OptimizerPipeline, BasicPipelineReachesAFixpoint) {
  // Shape(r) folds, which makes Reshape(r, shape) a no-op once shapes are re-inferred; the two
  // Relu(x) merge, and what is left of the shape computation dies.
  Graph before;
  GraphBuilder(before).Input("x", F32({2, 3})).Const("one", {1}, {1}).Const("two", {2}, {1});
  GraphBuilder(before).Op("Relu", {"x"}, {"r"});
  GraphBuilder(before).Op("Relu", {"x"}, {"r_again"});
  GraphBuilder(before).Op("Shape", {"r"}, {"shape"});
  GraphBuilder(before).Op("Reshape", {"r", "shape"}, {"reshaped"});
  GraphBuilder(before).Op("Identity", {"reshaped"}, {"i"});
  GraphBuilder(before).Op("Add", {"one", "two"}, {"three"});
  GraphBuilder(before).Op("Mul", {"i", "three"}, {"m"});
  GraphBuilder(before).Op("Add", {"m", "r_again"}, {"y"});
  GraphBuilder(before).Output("y");

  PassContext ctx = Registries().Context();
  ctx.verify_after_each_pass = true;
  std::vector<std::string> logged;
  ctx.log = [&](const std::string& line) { logged.push_back(line); };
  PassManager pm = BuildPipeline(OptLevel::kBasic);
  Status s = pm.Run(before, ctx);
  ASSERT_TRUE(s.ok()) << s.ToString();

  Graph expected;
  GraphBuilder(expected).Input("x", F32({2, 3})).Const("three", {3}, {1});
  GraphBuilder(expected).Op("Relu", {"x"}, {"r"});
  GraphBuilder(expected).Op("Mul", {"r", "three"}, {"m"});
  GraphBuilder(expected).Op("Add", {"m", "r"}, {"y"});
  GraphBuilder(expected).Output("y");
  EXPECT_EQ(GraphToText(before), GraphToText(expected));

  EXPECT_EQ(logged, pm.applied());
  EXPECT_EQ(pm.applied(), (std::vector<std::string>{
                              "ShapeInference: refined value types", "ConstantFolding: folded 2 nodes into constants",
                              "IdentityElimination: removed 1 no-op node",  // Identity
                              "CommonSubexpressionElimination: merged 1 duplicate node",
                              "ShapeInference: refined value types",        // Reshape's output is now static
                              "IdentityElimination: removed 1 no-op node",  // so the Reshape goes
                          }));

  // A second run finds nothing left to do.
  ASSERT_TRUE(pm.Run(before, ctx).ok());
  EXPECT_TRUE(pm.applied().empty()) << ::testing::PrintToString(pm.applied());
}

class BreakingPass final : public GraphPass {
 public:
  const char* name() const override { return "BreakingPass"; }
  Status Run(Graph& graph, PassContext&, bool* changed) override {
    *changed = true;
    return graph.AddNode("NoSuchOp", "", {graph.inputs()[0]->name()}, {"junk"}).status();
  }
};

class FailingPass final : public GraphPass {
 public:
  const char* name() const override { return "FailingPass"; }
  Status Run(Graph&, PassContext&, bool* changed) override {
    *changed = false;
    return RuntimeError("something went wrong");
  }
};

TEST(OptimizerPipeline, VerifyAfterEachPassNamesThePassThatBrokeTheGraph) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2}));
  GraphBuilder(g).Op("Relu", {"x"}, {"y"});
  GraphBuilder(g).Output("y");
  PassManager pm;
  pm.Add(CreateDeadCodeEliminationPass());
  pm.Add(std::make_unique<BreakingPass>());
  PassContext ctx = Registries().Context();
  ctx.verify_after_each_pass = true;
  Status s = pm.Run(g, ctx);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotImplemented);
  EXPECT_NE(s.message().find("after optimizer pass BreakingPass"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NoSuchOp"), std::string::npos) << s.message();
}

TEST(OptimizerPipeline, APassErrorNamesThePass) {
  Graph g;
  GraphBuilder(g).Input("x", F32({2})).Output("x");
  PassManager pm;
  pm.Add(std::make_unique<FailingPass>());
  PassContext ctx = Registries().Context();
  Status s = pm.Run(g, ctx);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kRuntimeError);
  EXPECT_NE(s.message().find("FailingPass"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tob
