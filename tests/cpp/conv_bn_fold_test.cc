// ConvBatchNormFolding: fires on Conv -> inference BatchNormalization with constant parameters
// and gives the same numbers as the unfused graph (float64 tolerance); must not fire when the
// Conv output has another reader, a parameter is not constant or the BatchNormalization trains.
// The golden tests (Before / Expected) show the rewrite itself.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;

// x[1,3,8,8] -> Conv(W[4,3,3,3], B?) -> BatchNormalization -> y ; `extra_reader` adds Relu(conv).
std::unique_ptr<Graph> ConvBn(bool with_bias, bool extra_reader, bool mean_is_input) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, Dims{1, 3, 8, 8})).ok());
  EXPECT_TRUE(g->AddInitializer("W", RandomTensor<float>({4, 3, 3, 3}, -1, 1, 11)).ok());
  std::vector<std::string> conv_in = {"x", "W"};
  if (with_bias) {
    EXPECT_TRUE(g->AddInitializer("B", RandomTensor<float>({4}, -1, 1, 12)).ok());
    conv_in.push_back("B");
  }
  EXPECT_TRUE(g->AddInitializer("scale", RandomTensor<float>({4}, 0.5, 2, 13)).ok());
  EXPECT_TRUE(g->AddInitializer("beta", RandomTensor<float>({4}, -1, 1, 14)).ok());
  if (mean_is_input) EXPECT_TRUE(g->AddInput("mean", ValueType(DType::kFloat32, Dims{4})).ok());
  else EXPECT_TRUE(g->AddInitializer("mean", RandomTensor<float>({4}, -1, 1, 15)).ok());
  EXPECT_TRUE(g->AddInitializer("var", RandomTensor<float>({4}, 0.5, 2, 16)).ok());
  AttributeMap conv_attrs{{"pads", Attribute::Ints({1, 1, 1, 1})}};
  EXPECT_TRUE(g->AddNode("Conv", "", conv_in, {"c"}, conv_attrs, "conv").ok());
  AttributeMap bn_attrs{{"epsilon", Attribute::Float(1e-3f)}};
  EXPECT_TRUE(g->AddNode("BatchNormalization", "", {"c", "scale", "beta", "mean", "var"}, {"y"}, bn_attrs, "bn").ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  if (extra_reader) {
    EXPECT_TRUE(g->AddNode("Relu", "", {"c"}, {"r"}, {}, "relu").ok());
    EXPECT_TRUE(g->AddOutput("r").ok());
  }
  return g;
}

std::vector<Tensor> RunGraph(std::unique_ptr<Graph> g, OptLevel level, bool mean_is_input, int* bn_nodes) {
  SessionOptions opts;
  opts.optimization_level = level;
  opts.intra_op_threads = 1;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  *bn_nodes = 0;
  for (const Node* n : s.value()->graph().nodes()) *bn_nodes += n->op_type() == "BatchNormalization";
  std::vector<std::string> names = {"x"};
  std::vector<Tensor> feeds = {RandomTensor<float>({1, 3, 8, 8}, -2, 2, 17)};
  if (mean_is_input) {
    names.push_back("mean");
    feeds.push_back(RandomTensor<float>({4}, -1, 1, 15));
  }
  std::vector<Tensor> out;
  EXPECT_TRUE(s.value()->Run(names, feeds, {}, &out).ok());
  return out;
}

void ExpectSame(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    testing::ExpectClose(a[i], b[i].shape(), testing::ToDoubles(b[i]), 1e-4, 1e-5, "output " + std::to_string(i));
}

TEST(OptimizerConvBnFold, FoldsAndKeepsTheNumbers) {
  for (bool bias : {false, true}) {
    int bn_unfused = 0, bn_fused = 0;
    auto reference = RunGraph(ConvBn(bias, false, false), OptLevel::kDisableAll, false, &bn_unfused);
    auto fused = RunGraph(ConvBn(bias, false, false), OptLevel::kAll, false, &bn_fused);
    EXPECT_EQ(bn_unfused, 1);
    EXPECT_EQ(bn_fused, 0) << "with bias=" << bias;
    ExpectSame(fused, reference);
  }
}

TEST(OptimizerConvBnFold, MustNotFireWhenConvOutputHasAnotherReader) {
  int bn_nodes = 0;
  auto reference = RunGraph(ConvBn(true, true, false), OptLevel::kDisableAll, false, &bn_nodes);
  auto optimized = RunGraph(ConvBn(true, true, false), OptLevel::kAll, false, &bn_nodes);
  EXPECT_EQ(bn_nodes, 1);
  ExpectSame(optimized, reference);
}

TEST(OptimizerConvBnFold, MustNotFireWhenAStatisticIsNotConstant) {
  int bn_nodes = 0;
  auto reference = RunGraph(ConvBn(true, false, true), OptLevel::kDisableAll, true, &bn_nodes);
  auto optimized = RunGraph(ConvBn(true, false, true), OptLevel::kAll, true, &bn_nodes);
  EXPECT_EQ(bn_nodes, 1);
  ExpectSame(optimized, reference);
}

// ConstantOfShape(value 0.02, shape from an initializer) of `shape`, read by `reader`.
std::unique_ptr<Graph> FilledConstantGraph(const Shape& shape, bool as_conv_weight) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  Shape x_shape = as_conv_weight ? Shape{1, shape[1], 4, 4} : shape;
  EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, DimsFromShape(x_shape))).ok());
  EXPECT_TRUE(
      g->AddInitializer("shape", Tensor::FromVector<int64_t>(shape, {static_cast<int64_t>(shape.size())})).ok());
  AttributeMap fill{{"value", Attribute::TensorValue(Tensor::FromVector<float>({0.02f}, {1}))}};
  EXPECT_TRUE(g->AddNode("ConstantOfShape", "", {"shape"}, {"w"}, fill, "fill").ok());
  if (as_conv_weight) EXPECT_TRUE(g->AddNode("Conv", "", {"x", "w"}, {"y"}, {}, "conv").ok());
  else EXPECT_TRUE(g->AddNode("Add", "", {"x", "w"}, {"y"}, {}, "add").ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  return g;
}

int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op_type() == op;
  return n;
}

TEST(OptimizerConstantFoldingLimits, LargeParametersAreFoldedLargeActivationsAreNot) {
  // 512x64x3x3 float32 = 1.1 MiB, past the folding growth limit.
  for (bool as_weight : {true, false}) {
    Shape shape = as_weight ? Shape{512, 64, 3, 3} : Shape{300000};
    auto s = Session::Create(FilledConstantGraph(shape, as_weight), SessionOptions{});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(CountOps(s.value()->graph(), "ConstantOfShape"), as_weight ? 0 : 1) << "as_weight=" << as_weight;
    // Same numbers as the unoptimised graph.
    SessionOptions none;
    none.optimization_level = OptLevel::kDisableAll;
    auto ref = Session::Create(FilledConstantGraph(shape, as_weight), none);
    ASSERT_TRUE(ref.ok());
    Shape x_shape = as_weight ? Shape{1, 64, 4, 4} : shape;
    Tensor x = RandomTensor<float>(x_shape, -1, 1, 21);
    std::vector<Tensor> a, b;
    ASSERT_TRUE(s.value()->Run({"x"}, {x}, {}, &a).ok());
    ASSERT_TRUE(ref.value()->Run({"x"}, {x}, {}, &b).ok());
    ExpectSame(a, b);
  }
}

// ---- golden: the graph before and the graph expected after the pass alone ----

// x[1,2,5,5] -> Conv(W[3,2,3,3], B) {pads 1} -> BatchNormalization {epsilon} -> y
void BuildConvBn(Graph& g, bool mean_is_input, int64_t training_mode) {
  testing::GraphBuilder b(g);
  b.Input("x", testing::F32({1, 2, 5, 5}));
  EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({3, 2, 3, 3}, -1, 1, 21)).ok());
  EXPECT_TRUE(g.AddInitializer("B", RandomTensor<float>({3}, -1, 1, 22)).ok());
  EXPECT_TRUE(g.AddInitializer("scale", RandomTensor<float>({3}, 0.5, 2, 23)).ok());
  EXPECT_TRUE(g.AddInitializer("beta", RandomTensor<float>({3}, -1, 1, 24)).ok());
  if (mean_is_input) b.Input("mean", testing::F32({3}));
  else EXPECT_TRUE(g.AddInitializer("mean", RandomTensor<float>({3}, -1, 1, 25)).ok());
  EXPECT_TRUE(g.AddInitializer("var", RandomTensor<float>({3}, 0.5, 2, 26)).ok());
  b.Op("Conv", {"x", "W", "B"}, {"c"}, {{"pads", Attribute::Ints({1, 1, 1, 1})}}, "", "conv");
  AttributeMap bn{{"epsilon", Attribute::Float(1e-3f)}};
  if (training_mode != 0) bn["training_mode"] = Attribute::Int(training_mode);
  b.Op("BatchNormalization", {"c", "scale", "beta", "mean", "var"}, {"y"}, bn, "", "bn");
  b.Output("y");
}

TEST(OptimizerConvBnFolding, GoldenFoldsTheBatchNormIntoTheConv) {
  Graph before;
  BuildConvBn(before, /*mean_is_input=*/false, /*training_mode=*/0);
  EXPECT_TRUE(testing::RunPassWithBuiltins(CreateConvBatchNormFoldingPass(), before));

  // One Conv on two new constants; the old parameters are gone with the nodes that read them.
  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("x", testing::F32({1, 2, 5, 5}));
  // Values are compared below against float64; the structure needs only the names and shapes.
  ASSERT_TRUE(expected.AddInitializer("conv_W_bn__0", RandomTensor<float>({3, 2, 3, 3})).ok());
  ASSERT_TRUE(expected.AddInitializer("conv_B_bn__1", RandomTensor<float>({3})).ok());
  b.Op("Conv", {"x", "conv_W_bn__0", "conv_B_bn__1"}, {"y"}, {{"pads", Attribute::Ints({1, 1, 1, 1})}});
  b.Output("y");
  ASSERT_EQ(testing::StructureText(before), testing::StructureText(expected));

  // W' = W s, B' = (B - mean) s + beta, s = scale / sqrt(var + eps), in float64 from the
  // parameters of an unfolded copy.
  Graph original;
  BuildConvBn(original, false, 0);
  auto at = [](const Graph& g, const char* name, int64_t i) {
    return double(g.FindValue(name)->initializer()->data<float>()[i]);
  };
  for (int64_t o = 0; o < 3; ++o) {
    const double s = at(original, "scale", o) / std::sqrt(at(original, "var", o) + 1e-3);
    for (int64_t k = 0; k < 18; ++k)
      EXPECT_NEAR(at(before, "conv_W_bn__0", o * 18 + k), at(original, "W", o * 18 + k) * s, 1e-6);
    EXPECT_NEAR(at(before, "conv_B_bn__1", o),
                (at(original, "B", o) - at(original, "mean", o)) * s + at(original, "beta", o), 1e-6);
  }
}

TEST(OptimizerConvBnFolding, GoldenMustNotFire) {
  for (auto [mean_is_input, training_mode] : {std::pair{true, int64_t{0}}, std::pair{false, int64_t{1}}}) {
    Graph before, expected;
    BuildConvBn(before, mean_is_input, training_mode);
    BuildConvBn(expected, mean_is_input, training_mode);
    EXPECT_FALSE(testing::RunPassWithBuiltins(CreateConvBatchNormFoldingPass(), before));
    EXPECT_EQ(GraphToText(before), GraphToText(expected)) << "mean_is_input " << mean_is_input;
  }
  // The Conv output has a second reader: folding would need the Conv twice.
  Graph before, expected;
  for (Graph* g : {&before, &expected}) {
    BuildConvBn(*g, false, 0);
    testing::GraphBuilder(*g).Op("Relu", {"c"}, {"r"});
    testing::GraphBuilder(*g).Output("r");
  }
  EXPECT_FALSE(testing::RunPassWithBuiltins(CreateConvBatchNormFoldingPass(), before));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

}  // namespace
}  // namespace tob
