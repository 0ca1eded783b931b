// MatMulTransposeFusion: 2-D Transposes feeding MatMul/Gemm become trans flags, and a Transpose of a
// bias-free product becomes a Gemm with swapped operands; the numbers equal the unfused graph's
// (checked against a float64 reference), and a Transpose with another reader is kept for it.
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

TEST(OptimizerMatMulTransposeFusion, GoldenSixteenBitProductsToo) {
  // Autocast's Linear backward in bfloat16 (opset 13 and later: Gemm takes bfloat16) and float16.
  for (DType t : {DType::kBFloat16, DType::kFloat16}) {
    Graph before;
    testing::GraphBuilder b(before);
    b.Input("dY", ValueType(t, Dims{6, 5})).Input("X", ValueType(t, Dims{6, 4}));
    b.Op("Transpose", {"dY"}, {"dYt"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("MatMul", {"dYt", "X"}, {"dW"});
    b.Output("dW");
    EXPECT_TRUE(testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), before));

    Graph expected;
    testing::GraphBuilder e(expected);
    e.Input("dY", ValueType(t, Dims{6, 5})).Input("X", ValueType(t, Dims{6, 4}));
    e.Op("Transpose", {"dY"}, {"dYt"}, {{"perm", Attribute::Ints({1, 0})}});
    e.Op("Gemm", {"dY", "X"}, {"dW"}, {{"transA", Attribute::Int(1)}, {"transB", Attribute::Int(0)}});
    e.Output("dW");
    EXPECT_EQ(GraphToText(before), GraphToText(expected)) << DTypeName(t);
  }
}

TEST(OptimizerMatMulTransposeFusion, SixteenBitProductsMatchFloat64) {
  // dW = (dY^T X)^T and Z = X W2^T + b in bfloat16: every Transpose folded, each result within one
  // rounding to bfloat16 of the float64 product of the same (bfloat16) operands.
  auto narrowed = [](const Tensor& f) {
    std::vector<BFloat16> v;
    for (int64_t i = 0; i < f.numel(); ++i) v.push_back(BFloat16(f.data<float>()[i]));
    return Tensor::FromVector<BFloat16>(v, f.shape());
  };
  auto g = std::make_unique<Graph>();
  testing::GraphBuilder b(*g, 17);
  b.Input("dY", ValueType(DType::kBFloat16, Dims{6, 5})).Input("X", ValueType(DType::kBFloat16, Dims{6, 4}));
  AttributeMap perm{{"perm", Attribute::Ints({1, 0})}};
  b.Op("Transpose", {"dY"}, {"dYt"}, perm);
  b.Op("MatMul", {"dYt", "X"}, {"dWt"});
  b.Op("Transpose", {"dWt"}, {"dW"}, perm);
  b.Output("dW");
  const Tensor dy = narrowed(RandomTensor<float>({6, 5}, -1, 1, 1)),
               x = narrowed(RandomTensor<float>({6, 4}, -1, 1, 2));
  SessionOptions opts;
  opts.intra_op_threads = 1;
  auto s = Session::Create(std::move(g), opts);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (const Node* n : s.value()->graph().nodes()) EXPECT_NE(n->op_type(), "Transpose");
  std::vector<Tensor> out;
  ASSERT_TRUE(s.value()->Run({"dY", "X"}, {dy, x}, {}, &out).ok());
  ASSERT_EQ(out[0].shape(), (Shape{4, 5}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j) {
      double ref = 0;
      for (int r = 0; r < 6; ++r)
        ref += double(float(dy.data<BFloat16>()[r * 5 + j])) * double(float(x.data<BFloat16>()[r * 4 + i]));
      EXPECT_NEAR(float(out[0].data<BFloat16>()[i * 5 + j]), ref, std::abs(ref) * std::ldexp(1.0, -8) + 1e-6);
    }
}

TEST(OptimizerMatMulTransposeFusion, GoldenMustNotFire) {
  // A batched (3-D) MatMul, a Transpose that is not [1, 0], and an int64 MatMul stay as they are;
  // so does a bfloat16 MatMul at opset 12, where Gemm has no bfloat16.
  auto build = [](Graph& g, int opset) {
    testing::GraphBuilder b(g, opset);
    b.Input("A", testing::F32({2, 3, 4})).Input("B", testing::F32({2, 3, 5}));
    b.Input("I", ValueType(DType::kInt64, Dims{3, 4})).Input("J", ValueType(DType::kInt64, Dims{3, 2}));
    b.Input("H", ValueType(DType::kBFloat16, Dims{3, 4})).Input("K", ValueType(DType::kBFloat16, Dims{3, 2}));
    b.Op("Transpose", {"A"}, {"At"}, {{"perm", Attribute::Ints({0, 2, 1})}});
    b.Op("MatMul", {"At", "B"}, {"P"});
    b.Op("Transpose", {"I"}, {"It"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("MatMul", {"It", "J"}, {"Q"});
    b.Op("Transpose", {"H"}, {"Ht"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("MatMul", {"Ht", "K"}, {"R"});
    b.Output("P").Output("Q").Output("R");
  };
  Graph before, expected;
  build(before, 12);
  build(expected, 12);
  EXPECT_FALSE(testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), before));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

}  // namespace
}  // namespace tob
