// IR: builder, def-use links, topological order, cycle and dangling-edge detection.
#include <gtest/gtest.h>

#include "ir/graph.h"

namespace tob {
namespace {

ValueType F32(Dims dims) { return ValueType(DType::kFloat32, std::move(dims)); }

TEST(Graph, BuilderKeepsDefUseLinks) {
  Graph g;
  g.SetOpset("", 17);
  ASSERT_TRUE(g.AddInput("x", F32({Dim::Symbol("batch"), 4})).ok());
  ASSERT_TRUE(g.AddInitializer("w", Tensor::FromVector<float>({1, 2, 3, 4}, {4})).ok());
  auto add = g.AddNode("Add", "", {"x", "w"}, {"y"});
  ASSERT_TRUE(add.ok());
  auto relu = g.AddNode("Relu", "", {"y"}, {"z"});
  ASSERT_TRUE(relu.ok());
  ASSERT_TRUE(g.AddOutput("z").ok());

  Value* y = g.FindValue("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->producer(), add.value());
  ASSERT_EQ(y->uses().size(), 1u);
  EXPECT_EQ(y->uses()[0].node, relu.value());
  EXPECT_NE(g.FindValue("w")->initializer(), nullptr);
  EXPECT_EQ(g.Opset("ai.onnx"), 17);

  auto order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok());
  ASSERT_EQ(order.value().size(), 2u);
  EXPECT_EQ(order.value()[0], add.value());
}

TEST(Graph, TopologicalOrderKeepsTheModelsOrderWhereEdgesAllow) {
  // c = Neg(x) is ready first but was built last: it runs last, after the chain a -> b. A node a
  // pass put in place of another (PlaceLike) runs where that node would have.
  Graph g;
  g.SetOpset("", 17);
  ASSERT_TRUE(g.AddInput("x", ValueType(DType::kFloat32, Dims{2})).ok());
  auto a = g.AddNode("Relu", "", {"x"}, {"a"}, {}, "a");
  auto b = g.AddNode("Relu", "", {"a"}, {"b"}, {}, "b");
  auto c = g.AddNode("Neg", "", {"x"}, {"c"}, {}, "c");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order.value(), (std::vector<Node*>{a.value(), b.value(), c.value()}));

  auto d = g.AddNode("Neg", "", {"x"}, {"d"}, {}, "d");
  ASSERT_TRUE(d.ok());
  g.PlaceLike(d.value(), a.value());
  order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order.value(), (std::vector<Node*>{a.value(), d.value(), b.value(), c.value()}));
}

TEST(Graph, DanglingInputIsAnInvalidModel) {
  Graph g;
  auto n = g.AddNode("Relu", "", {"missing"}, {"y"}, {}, "r");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidModel);
  EXPECT_NE(n.status().message().find("missing"), std::string::npos);
}

TEST(Graph, DuplicateDefinitionIsAnInvalidModel) {
  Graph g;
  ASSERT_TRUE(g.AddInput("x", F32({2})).ok());
  ASSERT_TRUE(g.AddNode("Relu", "", {"x"}, {"y"}).ok());
  auto dup = g.AddNode("Neg", "", {"x"}, {"y"});
  EXPECT_FALSE(dup.ok());
}

TEST(Graph, AttributeTypeMismatchNamesTheAttribute) {
  Graph g;
  ASSERT_TRUE(g.AddInput("x", F32({2})).ok());
  AttributeMap attrs;
  attrs["axis"] = Attribute::Float(1.0f);
  auto n = g.AddNode("Softmax", "", {"x"}, {"y"}, attrs, "sm");
  ASSERT_TRUE(n.ok());
  int64_t axis = 0;
  Status s = n.value()->GetAttr("axis", &axis, -1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'axis' must be INT, got FLOAT"), std::string::npos) << s.message();
}

TEST(Graph, RemoveNodeAndReplaceUses) {
  Graph g;
  ASSERT_TRUE(g.AddInput("x", F32({2})).ok());
  auto id = g.AddNode("Identity", "", {"x"}, {"y"});
  ASSERT_TRUE(g.AddNode("Relu", "", {"y"}, {"z"}).ok());
  ASSERT_TRUE(g.AddOutput("z").ok());
  Value* y = g.FindValue("y");
  ASSERT_TRUE(g.ReplaceAllUses(y, g.FindValue("x")).ok());
  ASSERT_TRUE(g.RemoveNode(id.value()).ok());
  EXPECT_EQ(g.num_nodes(), 1u);
  EXPECT_EQ(g.FindValue("y"), nullptr);
  EXPECT_EQ(g.nodes()[0]->input(0)->name(), "x");
}

}  // namespace
}  // namespace tob
