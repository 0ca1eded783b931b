// ConvActivationFusion: golden rewrites (Conv -> activation, Conv -> Sum/Add -> activation, SiLU
// as Mul(y, Sigmoid(y)), Clip with constant bounds) and the cases where it must not fire (another
// reader of the Conv output, a broadcast residual, a kept value); whole sessions with and without
// the optimizer give the same numbers (the unfused graph's Conv and activations are checked
// against float64 in nn_ops_test / conv_fused_test).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;

const AttributeMap kPads{{"pads", Attribute::Ints({1, 1, 1, 1})}};

// x[2,3,6,5] -> Conv(W[4,3,3,3], B) {pads 1} -> c, then `tail` builds the rest from "c".
template <typename Tail>
void BuildConv(Graph& g, Tail&& tail) {
  testing::GraphBuilder b(g);
  b.Input("x", testing::F32({2, 3, 6, 5}));
  b.Input("r", testing::F32({2, 4, 6, 5}));
  EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({4, 3, 3, 3}, -1, 1, 51)).ok());
  EXPECT_TRUE(g.AddInitializer("B", RandomTensor<float>({4}, -1, 1, 52)).ok());
  b.Op("Conv", {"x", "W", "B"}, {"c"}, kPads, "", "conv");
  tail(b);
}

// The fused graph: FusedConv(x, W, B[, r]) -> y.
void BuildFused(Graph& g, const std::string& act, std::vector<float> params, bool with_r, const std::string& out) {
  testing::GraphBuilder b(g);
  b.Input("x", testing::F32({2, 3, 6, 5}));
  b.Input("r", testing::F32({2, 4, 6, 5}));
  EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({4, 3, 3, 3}, -1, 1, 51)).ok());
  EXPECT_TRUE(g.AddInitializer("B", RandomTensor<float>({4}, -1, 1, 52)).ok());
  AttributeMap attrs = kPads;
  attrs["activation"] = Attribute::String(act);
  if (!params.empty()) attrs["activation_params"] = Attribute::Floats(params);
  std::vector<std::string> inputs{"x", "W", "B"};
  if (with_r) inputs.push_back("r");
  b.Op("FusedConv", inputs, {out}, attrs, "com.microsoft");
  b.Output(out);
}

void ExpectFusesTo(Graph& before, const std::string& act, std::vector<float> params, bool with_r) {
  ASSERT_TRUE(testing::RunPassWithBuiltins(CreateConvActivationFusionPass(), before));
  Graph expected;
  BuildFused(expected, act, std::move(params), with_r, "y");
  EXPECT_EQ(testing::StructureText(before), testing::StructureText(expected));
}

TEST(OptimizerConvActivationFusion, GoldenConvRelu) {
  Graph before;
  BuildConv(before, [](testing::GraphBuilder& b) {
    b.Op("Relu", {"c"}, {"y"});
    b.Output("y");
  });
  ExpectFusesTo(before, "Relu", {}, false);
}

TEST(OptimizerConvActivationFusion, GoldenResidualSumThenRelu) {
  for (const char* op : {"Sum", "Add"}) {
    Graph before;
    BuildConv(before, [&](testing::GraphBuilder& b) {
      b.Op(op, {"r", "c"}, {"s"});
      b.Op("Relu", {"s"}, {"y"});
      b.Output("y");
    });
    ExpectFusesTo(before, "Relu", {}, true);
  }
}

TEST(OptimizerConvActivationFusion, GoldenSiluClipLeakyRelu) {
  Graph silu;
  BuildConv(silu, [](testing::GraphBuilder& b) {
    b.Op("Sigmoid", {"c"}, {"s"});
    b.Op("Mul", {"c", "s"}, {"y"});
    b.Output("y");
  });
  ExpectFusesTo(silu, "Silu", {}, false);

  Graph clip;
  BuildConv(clip, [](testing::GraphBuilder& b) {
    b.Const("lo", {0.f}, {}).Const("hi", {6.f}, {});
    b.Op("Clip", {"c", "lo", "hi"}, {"y"});
    b.Output("y");
  });
  ASSERT_TRUE(testing::RunPassWithBuiltins(CreateConvActivationFusionPass(), clip));
  const Node* fused = clip.outputs()[0]->producer();
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(fused->op_type(), "FusedConv");
  std::vector<float> params;
  ASSERT_TRUE(fused->GetAttr("activation_params", &params).ok());
  EXPECT_EQ(params, (std::vector<float>{0.f, 6.f}));

  Graph leaky;
  BuildConv(leaky, [](testing::GraphBuilder& b) {
    b.Op("LeakyRelu", {"c"}, {"y"}, {{"alpha", Attribute::Float(0.2f)}});
    b.Output("y");
  });
  ExpectFusesTo(leaky, "LeakyRelu", {0.2f}, false);
}

TEST(OptimizerConvActivationFusion, GoldenMustNotFire) {
  std::vector<std::function<void(testing::GraphBuilder&)>> tails = {
      // The Conv output is also a graph output.
      [](testing::GraphBuilder& b) {
        b.Op("Relu", {"c"}, {"y"});
        b.Output("y").Output("c");
      },
      // A Tanh whose input another node reads too (as a GeluGrad reads GELU's in training).
      [](testing::GraphBuilder& b) {
        b.Op("Tanh", {"c"}, {"y"});
        b.Op("Neg", {"c"}, {"n"});
        b.Output("y").Output("n");
      },
      // A residual that broadcasts is not Z.
      [](testing::GraphBuilder& b) {
        b.Const("bias", {1.f, 2.f, 3.f, 4.f}, {1, 4, 1, 1});
        b.Op("Add", {"c", "bias"}, {"s"});
        b.Op("Relu", {"s"}, {"y"});
        b.Output("y");
      },
      // The sum has a second reader.
      [](testing::GraphBuilder& b) {
        b.Op("Add", {"c", "r"}, {"s"});
        b.Op("Relu", {"s"}, {"y"});
        b.Output("y").Output("s");
      },
      // Clip whose bound is computed at run time.
      [](testing::GraphBuilder& b) {
        b.Op("ReduceMax", {"r"}, {"hi"}, {{"keepdims", Attribute::Int(0)}});
        b.Op("Clip", {"c", "", "hi"}, {"y"});
        b.Output("y");
      },
  };
  for (size_t i = 0; i < tails.size(); ++i) {
    Graph before, expected;
    BuildConv(before, tails[i]);
    BuildConv(expected, tails[i]);
    EXPECT_FALSE(testing::RunPassWithBuiltins(CreateConvActivationFusionPass(), before)) << "case " << i;
    EXPECT_EQ(GraphToText(before), GraphToText(expected)) << "case " << i;
  }
}

// A ResNet basic block: Conv-Relu, Conv + shortcut Sum, Relu, then a Conv-Sigmoid-Mul (SiLU) head.
std::unique_ptr<Graph> ResidualBlock() {
  auto g = std::make_unique<Graph>();
  testing::GraphBuilder b(*g);
  b.Input("x", testing::F32({2, 8, 9, 7}));
  EXPECT_TRUE(g->AddInitializer("W1", RandomTensor<float>({8, 8, 3, 3}, -0.3, 0.3, 61)).ok());
  EXPECT_TRUE(g->AddInitializer("B1", RandomTensor<float>({8}, -1, 1, 62)).ok());
  EXPECT_TRUE(g->AddInitializer("W2", RandomTensor<float>({8, 8, 3, 3}, -0.3, 0.3, 63)).ok());
  EXPECT_TRUE(g->AddInitializer("W3", RandomTensor<float>({4, 8, 1, 1}, -1, 1, 64)).ok());
  b.Op("Conv", {"x", "W1", "B1"}, {"c1"}, kPads);
  b.Op("Relu", {"c1"}, {"a1"});
  b.Op("Conv", {"a1", "W2"}, {"c2"}, kPads);
  b.Op("Sum", {"c2", "x"}, {"s"});
  b.Op("Relu", {"s"}, {"a2"});
  b.Op("Conv", {"a2", "W3"}, {"c3"});
  b.Op("Sigmoid", {"c3"}, {"g"});
  b.Op("Mul", {"g", "c3"}, {"y"});
  b.Output("y");
  return g;
}

TEST(OptimizerConvActivationFusion, SessionKeepsTheNumbers) {
  Tensor x = RandomTensor<float>({2, 8, 9, 7}, -2, 2, 65);
  std::vector<Tensor> outs[2];
  for (int optimized = 0; optimized < 2; ++optimized) {
    SessionOptions opts;
    opts.optimization_level = optimized ? OptLevel::kAll : OptLevel::kDisableAll;
    opts.intra_op_threads = 2;
    auto s = Session::Create(ResidualBlock(), opts);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    int fused = 0, convs = 0;
    for (const Node* n : s.value()->graph().nodes()) {
      fused += n->op_type() == "FusedConv";
      convs += n->op_type() == "Conv";
    }
    EXPECT_EQ(fused, optimized ? 3 : 0);
    EXPECT_EQ(convs, optimized ? 0 : 3);
    ASSERT_TRUE(s.value()->Run({"x"}, {x}, {}, &outs[optimized]).ok());
  }
  testing::ExpectClose(outs[1][0], outs[0][0].shape(), testing::ToDoubles(outs[0][0]), 1e-5, 1e-5, "y");
}

}  // namespace
}  // namespace tob
