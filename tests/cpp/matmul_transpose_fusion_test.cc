// MatMulTransposeFusion: 2-D Transposes feeding MatMul/Gemm become trans flags, and a Transpose of a
// bias-free product becomes a Gemm with swapped operands; the numbers equal the unfused graph's
// (checked against a float64 reference), and a Transpose with another reader is kept for it.
// The golden tests (Before / Expected) show the rewrite itself. Batched products: a Transpose of
// the last two axes becomes FusedMatMul's transA / transB, in CPU-only sessions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "core/domain.h"
#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "optimizer/passes.h"
#include "providers/cpu/nn/sgemm_packed.h"
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
  // Transposes that are not a swap of the last two axes ([1, 0, 2] moves a batch axis, [0, 2, 1, 3]
  // the head axis, no perm reverses all three axes), products of a vector, and an int64 MatMul
  // stay as they are; so does a bfloat16 MatMul of two matrices at opset 12, where Gemm has no
  // bfloat16.
  auto build = [](Graph& g, int opset) {
    testing::GraphBuilder b(g, opset);
    b.Input("A", testing::F32({2, 3, 4})).Input("B", testing::F32({3, 4, 5}));
    b.Input("C", testing::F32({2, 3, 4, 5})).Input("D", testing::F32({2, 4, 5, 6}));
    b.Input("E", testing::F32({4, 3, 2})).Input("v", testing::F32({3}));
    b.Input("F", testing::F32({2, 3, 4})).Input("G", testing::F32({2, 5}));
    b.Input("I", ValueType(DType::kInt64, Dims{3, 4})).Input("J", ValueType(DType::kInt64, Dims{3, 2}));
    b.Input("L", ValueType(DType::kInt64, Dims{2, 4, 3})).Input("N", ValueType(DType::kInt64, Dims{2, 4, 2}));
    b.Input("H", ValueType(DType::kBFloat16, Dims{3, 4})).Input("K", ValueType(DType::kBFloat16, Dims{3, 2}));
    b.Op("Transpose", {"A"}, {"At"}, {{"perm", Attribute::Ints({1, 0, 2})}});
    b.Op("MatMul", {"At", "B"}, {"P"});
    b.Op("Transpose", {"C"}, {"Ct"}, {{"perm", Attribute::Ints({0, 2, 1, 3})}});
    b.Op("MatMul", {"Ct", "D"}, {"S"});
    b.Op("Transpose", {"E"}, {"Et"}, {{"perm", Attribute::Ints({0, 2, 1})}});
    b.Op("MatMul", {"Et", "v"}, {"T"});
    b.Op("Transpose", {"F"}, {"Ft"});
    b.Op("MatMul", {"Ft", "G"}, {"O"});
    b.Op("Transpose", {"L"}, {"Lt"}, {{"perm", Attribute::Ints({0, 2, 1})}});
    b.Op("MatMul", {"Lt", "N"}, {"U"});
    b.Op("Transpose", {"I"}, {"It"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("MatMul", {"It", "J"}, {"Q"});
    b.Op("Transpose", {"H"}, {"Ht"}, {{"perm", Attribute::Ints({1, 0})}});
    b.Op("MatMul", {"Ht", "K"}, {"R"});
    b.Output("P").Output("S").Output("T").Output("O").Output("U").Output("Q").Output("R");
  };
  Graph before, expected;
  build(before, 12);
  build(expected, 12);
  EXPECT_FALSE(testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), before));
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

// ---- batched products: last-two-axes Transposes become FusedMatMul's flags ----

// Attention's backward as AOTAutograd writes it (3-D, heads folded into the batch), plus a 3-D x
// 2-D product, a product whose only reader transposes it, and a FusedMatMul already transposing A:
//   dV = MatMul(Transpose(P), dO)      dP = MatMul(dO, Transpose(V))
//   Y  = MatMul(X, Transpose(W))       Rt = Transpose(MatMul(Q, K3))
//   F  = FusedMatMul(G, Transpose(H), transA = 1, alpha = 0.5)
void BuildAttentionBackward(Graph& g, DType t) {
  testing::GraphBuilder b(g, 17);
  g.SetOpset(kMicrosoftDomain, 1);
  auto type = [t](Dims d) { return ValueType(t, std::move(d)); };
  b.Input("P", type({4, 6, 6})).Input("dO", type({4, 6, 5})).Input("V", type({4, 6, 5}));
  b.Input("X", type({2, 6, 5})).Input("W", type({3, 5}));
  b.Input("Q", type({4, 6, 5})).Input("K3", type({4, 5, 7}));
  b.Input("G", type({2, 1, 5, 6})).Input("H", type({3, 4, 5}));
  const AttributeMap swap3{{"perm", Attribute::Ints({0, 2, 1})}};
  b.Op("Transpose", {"P"}, {"Pt"}, swap3);
  b.Op("MatMul", {"Pt", "dO"}, {"dV"});
  b.Op("Transpose", {"V"}, {"Vt"}, swap3);
  b.Op("MatMul", {"dO", "Vt"}, {"dP"});
  b.Op("Transpose", {"W"}, {"Wt"});  // no perm: [1, 0] at rank 2
  b.Op("MatMul", {"X", "Wt"}, {"Y"});
  b.Op("MatMul", {"Q", "K3"}, {"R"});
  b.Op("Transpose", {"R"}, {"Rt"}, swap3);
  b.Op("Transpose", {"H"}, {"Ht"}, swap3);
  b.Op("FusedMatMul", {"G", "Ht"}, {"F"}, {{"transA", Attribute::Int(1)}, {"alpha", Attribute::Float(0.5f)}},
       kMicrosoftDomain);
  b.Output("dV").Output("dP").Output("Y").Output("Rt").Output("F");
}

TEST(OptimizerMatMulTransposeFusion, GoldenBatchedTransposesBecomeFusedMatMulFlags) {
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    Graph before;
    BuildAttentionBackward(before, t);
    EXPECT_TRUE(testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), before));

    // (Q K3)^T = K3^T Q^T: the operands swap places, both transposed. The Transposes lose their
    // readers and stay for DeadCodeElimination.
    Graph expected;
    testing::GraphBuilder e(expected);
    auto type = [t](Dims d) { return ValueType(t, std::move(d)); };
    e.Input("P", type({4, 6, 6})).Input("dO", type({4, 6, 5})).Input("V", type({4, 6, 5}));
    e.Input("X", type({2, 6, 5})).Input("W", type({3, 5}));
    e.Input("Q", type({4, 6, 5})).Input("K3", type({4, 5, 7}));
    e.Input("G", type({2, 1, 5, 6})).Input("H", type({3, 4, 5}));
    const AttributeMap swap3{{"perm", Attribute::Ints({0, 2, 1})}};
    const Attribute one = Attribute::Int(1);
    e.Op("Transpose", {"P"}, {"Pt"}, swap3);
    e.Op("FusedMatMul", {"P", "dO"}, {"dV"}, {{"transA", one}}, kMicrosoftDomain);
    e.Op("Transpose", {"V"}, {"Vt"}, swap3);
    e.Op("FusedMatMul", {"dO", "V"}, {"dP"}, {{"transB", one}}, kMicrosoftDomain);
    e.Op("Transpose", {"W"}, {"Wt"});
    e.Op("FusedMatMul", {"X", "W"}, {"Y"}, {{"transB", one}}, kMicrosoftDomain);
    e.Op("FusedMatMul", {"K3", "Q"}, {"Rt"}, {{"transA", one}, {"transB", one}}, kMicrosoftDomain);
    e.Op("Transpose", {"H"}, {"Ht"}, swap3);
    e.Op("FusedMatMul", {"G", "H"}, {"F"}, {{"transA", one}, {"transB", one}, {"alpha", Attribute::Float(0.5f)}},
         kMicrosoftDomain);
    e.Output("dV").Output("dP").Output("Y").Output("Rt").Output("F");
    EXPECT_EQ(GraphToText(before), GraphToText(expected)) << DTypeName(t);
  }
}

TEST(OptimizerMatMulTransposeFusion, BatchedFoldWaitsForCpuOnlySessions) {
  // No other provider has a FusedMatMul kernel: where a device provider would run the products
  // (PassContext::elementwise_fusion off), batched Transposes stay.
  Graph before, expected;
  BuildAttentionBackward(before, DType::kFloat32);
  BuildAttentionBackward(expected, DType::kFloat32);
  ASSERT_TRUE(InferShapes(before, OpSchemaRegistry::Global()).ok());
  PassContext ctx;
  ctx.elementwise_fusion = false;
  bool changed = true;
  ASSERT_TRUE(CreateMatMulTransposeFusionPass()->Run(before, ctx, &changed).ok());
  EXPECT_FALSE(changed);
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

TEST(OptimizerMatMulTransposeFusion, BatchedFoldOffUnderItsSwitch) {
  // TOB_BATCHED_MATMUL_TRANSPOSE=0 (A/B runs), read at each run of the pass: batched Transposes stay.
  Graph before, expected;
  BuildAttentionBackward(before, DType::kFloat32);
  BuildAttentionBackward(expected, DType::kFloat32);
  ASSERT_EQ(setenv("TOB_BATCHED_MATMUL_TRANSPOSE", "0", 1), 0);
  const bool changed = testing::RunPassWithBuiltins(CreateMatMulTransposeFusionPass(), before);
  unsetenv("TOB_BATCHED_MATMUL_TRANSPOSE");
  EXPECT_FALSE(changed);
  EXPECT_EQ(GraphToText(before), GraphToText(expected));
}

// Runs the attention backward through a session at `level`; counts its Transpose and FusedMatMul nodes.
struct BatchedRun {
  std::vector<Tensor> outputs;
  int transposes = 0, fused = 0;
};

BatchedRun RunAttentionBackward(DType t, OptLevel level, const std::vector<Tensor>& feeds) {
  auto g = std::make_unique<Graph>();
  BuildAttentionBackward(*g, t);
  SessionOptions opts;
  opts.optimization_level = level;
  opts.intra_op_threads = 1;
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  BatchedRun r;
  if (!s.ok()) return r;
  for (const Node* n : s.value()->graph().nodes()) {
    r.transposes += n->op_type() == "Transpose";
    r.fused += n->op_type() == "FusedMatMul";
  }
  Status run = s.value()->Run({"P", "dO", "V", "X", "W", "Q", "K3", "G", "H"}, feeds, {}, &r.outputs);
  EXPECT_TRUE(run.ok()) << run.ToString();
  return r;
}

// float64 alpha * op(A) @ op(B) for 3-D / 4-D operands with numpy batch broadcasting (right-aligned).
std::vector<double> Product(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const int64_t ar = as[as.size() - 2], ac = as.back(), br = bs[bs.size() - 2], bc = bs.back();
  const int64_t M = ta ? ac : ar, K = ta ? ar : ac, N = tb ? br : bc;
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t rank = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), rank - ab.size(), 1);
  bb.insert(bb.begin(), rank - bb.size(), 1);
  Shape ob(rank);
  for (size_t i = 0; i < rank; ++i) ob[i] = std::max(ab[i], bb[i]);
  const std::vector<double> ad = testing::ToDoubles(a), bd = testing::ToDoubles(b);
  std::vector<double> out;
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < NumElements(ob); ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < rank; ++d) {
      ao = ao * ab[d] + (ab[d] == 1 ? 0 : idx[d]);
      bo = bo * bb[d] + (bb[d] == 1 ? 0 : idx[d]);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += ad[ao * ar * ac + (ta ? k * ac + m : m * ac + k)] * bd[bo * br * bc + (tb ? n * bc + k : k * bc + n)];
        out.push_back(alpha * s);
      }
    for (int64_t d = static_cast<int64_t>(rank) - 1; d >= 0 && ++idx[d] == ob[d]; --d) idx[d] = 0;
  }
  return out;
}

TEST(OptimizerMatMulTransposeFusion, BatchedProductsMatchFloat64) {
  // At the default level every Transpose goes (DCE sweeps the folded ones) and the five products
  // run as FusedMatMul; each result matches the float64 product of the same operands (Rt is
  // (Q K3)^T, read back transposed), float32 to 1e-5, bfloat16 / float16 within one rounding.
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(t));
    auto make = [t](const Shape& s, uint32_t seed) {
      const Tensor f = RandomTensor<float>(s, -1, 1, seed);
      if (t == DType::kFloat32) return f;
      std::vector<BFloat16> vb;
      std::vector<Float16> vh;
      for (int64_t i = 0; i < f.numel(); ++i) {
        vb.push_back(BFloat16(f.data<float>()[i]));
        vh.push_back(Float16(f.data<float>()[i]));
      }
      return t == DType::kBFloat16 ? Tensor::FromVector<BFloat16>(vb, s) : Tensor::FromVector<Float16>(vh, s);
    };
    const std::vector<Tensor> feeds = {make({4, 6, 6}, 1), make({4, 6, 5}, 2),    make({4, 6, 5}, 3),
                                       make({2, 6, 5}, 4), make({3, 5}, 5),       make({4, 6, 5}, 6),
                                       make({4, 5, 7}, 7), make({2, 1, 5, 6}, 8), make({3, 4, 5}, 9)};
    BatchedRun fused = RunAttentionBackward(t, OptLevel::kAll, feeds);
    EXPECT_EQ(fused.transposes, 0);
    EXPECT_EQ(fused.fused, 5);
    ASSERT_EQ(fused.outputs.size(), 5u);
    const double rel = t == DType::kFloat32 ? 1e-6 : std::ldexp(1.0, t == DType::kBFloat16 ? -8 : -11);
    auto expect = [&](const Tensor& got, const std::vector<double>& want, const Shape& shape, const char* what) {
      testing::ExpectClose(got, shape, want, rel, 1e-5, what);
    };
    const auto& f = feeds;
    expect(fused.outputs[0], Product(f[0], f[1], true, false, 1), {4, 6, 5}, "dV");
    expect(fused.outputs[1], Product(f[1], f[2], false, true, 1), {4, 6, 6}, "dP");
    expect(fused.outputs[2], Product(f[3], f[4], false, true, 1), {2, 6, 3}, "Y");
    expect(fused.outputs[3], Product(f[6], f[5], true, true, 1), {4, 7, 6}, "Rt");
    expect(fused.outputs[4], Product(f[7], f[8], true, true, 0.5), {2, 3, 6, 4}, "F");
    // At the basic level nothing folds: Transpose copies + MatMul. A transposed operand read in
    // place gives the copy's sums bit for bit (the same products summed in the same order); the
    // swapped product Rt = K3^T Q^T runs other tiles, so it is only as close as the reference.
    BatchedRun plain = RunAttentionBackward(t, OptLevel::kBasic, feeds);
    EXPECT_EQ(plain.transposes, 5);
    ASSERT_EQ(plain.outputs.size(), 5u);
    for (size_t i : {0, 1, 2, 4})
      EXPECT_EQ(testing::ToDoubles(fused.outputs[i]), testing::ToDoubles(plain.outputs[i])) << "output " << i;
    testing::ExpectClose(fused.outputs[3], plain.outputs[3].shape(), testing::ToDoubles(plain.outputs[3]), 2 * rel,
                         1e-5, "Rt against the unfused graph");
  }
}

TEST(OptimizerMatMulTransposeFusion, BatchedProductWithAPackedConstantWeight) {
  // A float32 initializer W read transposed (FusedMatMul transB = 1) is packed once per session
  // (MatMul's PrePack) and every product reads the panels: Y = X W^T with A's batch folded into
  // the rows, and Z = X2^T W^T once the Transpose of the 2-D X2 is folded into transA.
  auto g = std::make_unique<Graph>();
  testing::GraphBuilder b(*g, 17);
  const Tensor w = RandomTensor<float>({40, 24}, -1, 1, 21);
  ASSERT_TRUE(g->AddInitializer("W", w).ok());
  b.Input("X", testing::F32({3, 150, 24})).Input("X2", testing::F32({24, 130}));
  const AttributeMap trans_b{{"transB", Attribute::Int(1)}};
  b.Op("FusedMatMul", {"X", "W"}, {"Y"}, trans_b, kMicrosoftDomain);
  b.Op("Transpose", {"X2"}, {"X2t"}, {{"perm", Attribute::Ints({1, 0})}});
  b.Op("FusedMatMul", {"X2t", "W"}, {"Z"}, trans_b, kMicrosoftDomain);
  b.Output("Y").Output("Z");
  g->SetOpset(kMicrosoftDomain, 1);
  SessionOptions opts;
  opts.intra_op_threads = 2;
  auto s = Session::Create(std::move(g), opts);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  int transposes = 0;
  for (const Node* n : s.value()->graph().nodes()) transposes += n->op_type() == "Transpose";
  EXPECT_EQ(transposes, 0);
  const Tensor x = RandomTensor<float>({3, 150, 24}, -1, 1, 22), x2 = RandomTensor<float>({24, 130}, -1, 1, 23);
  std::vector<Tensor> out;
  RunStats stats;
  ASSERT_TRUE(s.value()->Run({"X", "X2"}, {x, x2}, {"Y", "Z"}, &out, &stats).ok());
  if (SgemmAvailable()) EXPECT_EQ(stats.prepacked_constants, 2);
  testing::ExpectClose(out[0], {3, 150, 40}, Product(x, w, false, true, 1), 1e-5, 1e-5, "Y");
  testing::ExpectClose(out[1], {130, 40}, Product(x2, w, true, true, 1), 1e-5, 1e-5, "Z");
}

}  // namespace
}  // namespace tob
