// MatMulTransposeFusion: 2-D Transposes feeding MatMul/Gemm become trans flags, and a Transpose of a
// bias-free product becomes a Gemm with swapped operands; the numbers equal the unfused graph's
// (checked against a float64 reference), and a Transpose with another reader is kept for it.
// The golden tests (Before / Expected) show the rewrite itself.
#include <gtest/gtest.h>

#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "optimizer/passes.h"
#include "runtime/session.h"

namespace tob {
namespace {

using testing::RandomTensor;

// The backward of a Linear layer, as AOTAutograd writes it:
//   dX = MatMul(dY, W)                   (no transpose)
//   dW = Transpose(MatMul(Transpose(dY), X))
//   Z  = Gemm(X, Transpose(W2), b)       (the forward's addmm(b, x, t(w)))
// plus, when `extra_reader`, Relu(Transpose(W2)) which keeps that Transpose alive.
std::unique_ptr<Graph> LinearBackward(bool extra_reader) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  EXPECT_TRUE(g->AddInput("dY", ValueType(DType::kFloat32, Dims{6, 5})).ok());
  EXPECT_TRUE(g->AddInput("X", ValueType(DType::kFloat32, Dims{6, 4})).ok());
  EXPECT_TRUE(g->AddInput("W2", ValueType(DType::kFloat32, Dims{3, 4})).ok());
  EXPECT_TRUE(g->AddInitializer("b", RandomTensor<float>({3}, -1, 1, 3)).ok());
  AttributeMap perm{{"perm", Attribute::Ints({1, 0})}};
  EXPECT_TRUE(g->AddNode("Transpose", "", {"dY"}, {"dYt"}, perm, "t_dy").ok());
  EXPECT_TRUE(g->AddNode("MatMul", "", {"dYt", "X"}, {"dWt"}, {}, "mm").ok());
  EXPECT_TRUE(g->AddNode("Transpose", "", {"dWt"}, {"dW"}, perm, "t_dw").ok());
  EXPECT_TRUE(g->AddNode("Transpose", "", {"W2"}, {"W2t"}, {}, "t_w2").ok());  // default perm: [1, 0]
  EXPECT_TRUE(g->AddNode("Gemm", "", {"X", "W2t", "b"}, {"Z"}, {}, "gemm").ok());
  EXPECT_TRUE(g->AddOutput("dW").ok());
  EXPECT_TRUE(g->AddOutput("Z").ok());
  if (extra_reader) {
    EXPECT_TRUE(g->AddNode("Relu", "", {"W2t"}, {"R"}, {}, "relu").ok());
    EXPECT_TRUE(g->AddOutput("R").ok());
  }
  return g;
}

struct Result {
  std::vector<Tensor> outputs;
  int transposes = 0;
};

Result RunLinearBackward(bool extra_reader, OptLevel level, const std::vector<Tensor>& feeds) {
  SessionOptions opts;
  opts.optimization_level = level;
  opts.intra_op_threads = 1;
  auto s = Session::Create(LinearBackward(extra_reader), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  Result r;
  for (const Node* n : s.value()->graph().nodes()) r.transposes += n->op_type() == "Transpose";
  EXPECT_TRUE(s.value()->Run({"dY", "X", "W2"}, feeds, {}, &r.outputs).ok());
  return r;
}

TEST(OptimizerMatMulTransposeFusion, FoldsEveryTransposeAndKeepsTheNumbers) {
  const Tensor dy = RandomTensor<float>({6, 5}, -1, 1, 1), x = RandomTensor<float>({6, 4}, -1, 1, 2),
               w2 = RandomTensor<float>({3, 4}, -1, 1, 4);
  Result fused = RunLinearBackward(false, OptLevel::kAll, {dy, x, w2});
  EXPECT_EQ(fused.transposes, 0);
  // float64 references: dW = dY^T X ([5, 4]) transposed -> [4, 5]; Z = X W2^T + b.
  const Tensor& dw = fused.outputs[0];
  ASSERT_EQ(dw.shape(), (Shape{4, 5}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) {
      double ref = 0;
      for (int r = 0; r < 6; ++r) ref += double(dy.data<float>()[r * 5 + j]) * x.data<float>()[r * 4 + i];
      EXPECT_NEAR(dw.data<float>()[i * 5 + j], ref, 1e-5);
    }
  Result plain = RunLinearBackward(false, OptLevel::kBasic, {dy, x, w2});
  ASSERT_EQ(plain.outputs[1].numel(), fused.outputs[1].numel());
  for (int64_t i = 0; i < plain.outputs[1].numel(); ++i)
    EXPECT_NEAR(fused.outputs[1].data<float>()[i], plain.outputs[1].data<float>()[i], 1e-5);
}

TEST(OptimizerMatMulTransposeFusion, KeepsATransposeAnotherNodeReads) {
  const Tensor dy = RandomTensor<float>({6, 5}, -1, 1, 1), x = RandomTensor<float>({6, 4}, -1, 1, 2),
               w2 = RandomTensor<float>({3, 4}, -1, 1, 4);
  Result fused = RunLinearBackward(true, OptLevel::kAll, {dy, x, w2});
  EXPECT_EQ(fused.transposes, 1);  // W2t still feeds the Relu
  const Tensor& relu = fused.outputs[2];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_FLOAT_EQ(relu.data<float>()[i * 3 + j], std::max(0.f, w2.data<float>()[j * 4 + i]));
}

// ---- golden: the graph before and the graph expected after the pass alone ----

TEST(OptimizerMatMulTransposeFusion, GoldenTransposesBecomeGemmFlags) {
  std::unique_ptr<Graph> before = LinearBackward(/*extra_reader=*/false);
  EXPECT_TRUE(testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), *before));

  // dW = (dY^T X)^T = X^T dY: one Gemm with swapped operands; Z's Transpose of W2 is transB.
  // The operand Transposes lose their readers and stay for DeadCodeElimination.
  Graph expected;
  testing::GraphBuilder b(expected);
  b.Input("dY", testing::F32({6, 5})).Input("X", testing::F32({6, 4})).Input("W2", testing::F32({3, 4}));
  ASSERT_TRUE(expected.AddInitializer("b", *before->FindValue("b")->initializer()).ok());
  b.Op("Transpose", {"dY"}, {"dYt"}, {{"perm", Attribute::Ints({1, 0})}});
  b.Op("Transpose", {"W2"}, {"W2t"});
  b.Op("Gemm", {"X", "dY"}, {"dW"}, {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(0)}});
  b.Op("Gemm", {"X", "W2", "b"}, {"Z"}, {{"transA", Attribute::Int(0)}, {"transB", Attribute::Int(1)}});
  b.Output("dW").Output("Z");
  EXPECT_EQ(GraphToText(*before), GraphToText(expected));
}

TEST(OptimizerMatMulTransposeFusion, GoldenMustNotFire) {
  // A batched (3-D) MatMul, a Transpose that is not [1, 0], and an int64 MatMul stay as they are.
  auto build = [](Graph& g) {
    testing::GraphBuilder b(g);
    b.Input("A", testing::F32({2, 3, 4})).Input("B", testing::F32({2, 3, 5}));
    b.Input("I", ValueType(DType::kInt64, Dims{3, 4})).Input("J", ValueType(DType::kInt64, Dims{3, 2}));
    b.Op("Transpose", {"A"}, {"At"}, {{"perm", Attribute::Ints({0, 2, 1})}});
    b.Op("MatMul", {"At", "B"}, {"P"});
    b.Op("Transpose", {"I"}, {"It"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("MatMul", {"It", "J"}, {"Q"});
    b.Output("P").Output("Q");
  };
  Graph before, expected;
  build(before);
  build(expected);
  EXPECT_FALSE(testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), before));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

}  // namespace
}  // namespace tob
