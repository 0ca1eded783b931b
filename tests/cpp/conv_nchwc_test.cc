// The blocked (NCHWc) convolution: its host-callable pieces (conv_nchwc.h: the reorders, the
// weight packing, the register tile against float64 for every row count, both block counts,
// strided rows and border taps), the NchwcLayout pass's golden rewrites and the convs it must
// leave alone, and whole sessions on the blocked path (strides, pads, dilations, channel counts
// that do not fill a block, Z and Relu) against a float64 reference, asserting the path ran.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "conv_reference.h"
#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "ops/fused_elementwise_program.h"
#include "optimizer/passes.h"
#include "providers/cpu/nn/conv_nchwc.h"
#include "runtime/session.h"
#include "tensor_test_util.h"

namespace tob {
namespace {

using conv_nchwc::kBlock;
using testing::RandomTensor;

using conv_testing::Random;

TEST(ConvNchwc, ReordersRoundTripAndZeroTheSpareLanes) {
  for (int64_t C : {1, 16, 20, 37}) {
    const int64_t HW = 70, Cb = conv_nchwc::Blocks(C);
    const std::vector<float> x = Random(static_cast<size_t>(C * HW), 3);
    std::vector<float> blocked(static_cast<size_t>(Cb * HW * kBlock), std::nanf(""));
    conv_nchwc::ReorderToBlocked(x.data(), C, HW, 0, Cb, blocked.data());
    for (int64_t cb = 0; cb < Cb; ++cb)
      for (int64_t i = 0; i < HW; ++i)
        for (int64_t l = 0; l < kBlock; ++l) {
          const int64_t c = cb * kBlock + l;
          ASSERT_EQ(blocked[(cb * HW + i) * kBlock + l], c < C ? x[c * HW + i] : 0.f) << C << " " << c << " " << i;
        }
    std::vector<float> back(x.size(), std::nanf(""));
    conv_nchwc::ReorderFromBlocked(blocked.data(), C, HW, 0, Cb, back.data());
    EXPECT_EQ(back, x) << "C " << C;
  }
}

TEST(ConvNchwc, PaddedCopyHasZeroBorders) {
  const int64_t Cb = 2, H = 5, W = 7, pt = 1, pl = 2, Hp = 8, Wp = 10;
  const std::vector<float> x = Random(static_cast<size_t>(Cb * H * W * kBlock), 9);
  std::vector<float> y(static_cast<size_t>(Cb * Hp * Wp * kBlock), std::nanf(""));
  conv_nchwc::PadBlocked(x.data(), H, W, pt, pl, Hp, Wp, 0, Cb, y.data());
  for (int64_t cb = 0; cb < Cb; ++cb)
    for (int64_t h = 0; h < Hp; ++h)
      for (int64_t w = 0; w < Wp; ++w)
        for (int64_t l = 0; l < kBlock; ++l) {
          const int64_t ih = h - pt, iw = w - pl;
          const float want = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[((cb * H + ih) * W + iw) * kBlock + l] : 0.f;
          ASSERT_EQ(y[((cb * Hp + h) * Wp + w) * kBlock + l], want) << cb << " " << h << " " << w << " " << l;
        }
}

TEST(ConvNchwc, PackedWeightsAreBlocks) {
  const int64_t M = 20, C = 35, KK = 3;
  const std::vector<float> w = Random(static_cast<size_t>(M * C * KK), 5);
  const int64_t Mb = conv_nchwc::Blocks(M), Cb = conv_nchwc::Blocks(C);
  const int64_t stride = conv_nchwc::PackedBlockStride(C, KK);
  ASSERT_EQ(stride, Cb * KK * kBlock * kBlock + conv_nchwc::kWeightBlockPad);
  std::vector<float> p(static_cast<size_t>(Mb * stride), std::nanf(""));
  conv_nchwc::PackWeights(w.data(), M, C, KK, p.data());
  for (float v : p) ASSERT_FALSE(std::isnan(v)) << "a float of the packed weights was not written";
  for (int64_t m = 0; m < Mb * kBlock; ++m)
    for (int64_t c = 0; c < Cb * kBlock; ++c)
      for (int64_t k = 0; k < KK; ++k) {
        const float got =
            p[(m / kBlock) * stride + (((c / kBlock) * KK + k) * kBlock + c % kBlock) * kBlock + m % kBlock];
        ASSERT_EQ(got, m < M && c < C ? w[(m * C + c) * KK + k] : 0.f) << m << " " << c << " " << k;
      }
}

// The tile against float64 over random taps (some of them border taps with positions outside),
// every row count, one and two output blocks, unit and strided positions, bias, Z and Relu.
TEST(ConvNchwc, TileMatchesFloat64) {
  const int64_t ntaps = 23, span = 4000, wblock = ntaps * 256 + 48;
  const std::vector<float> x = Random(static_cast<size_t>(span), 11);
  const std::vector<float> w = Random(static_cast<size_t>(2 * wblock), 13);
  const std::vector<float> bias = Random(32, 17);
  std::mt19937 gen(19);
  for (int64_t xs : {int64_t{16}, int64_t{32}}) {
    for (int rows = 1; rows <= conv_nchwc::kTileRows; ++rows) {
      std::vector<conv_nchwc::Tap> taps(static_cast<size_t>(ntaps));
      const uint32_t full = (1u << rows) - 1;
      for (int64_t t = 0; t < ntaps; ++t) {
        taps[t].x = static_cast<int64_t>(gen() % static_cast<uint32_t>(span - kBlock - (rows - 1) * xs));
        taps[t].w = t * 256 + (t % 3) * 16;
        taps[t].valid = t % 4 == 1 ? (gen() & full) : full;
      }
      for (int blocks : {1, 2})
        for (int variant = 0; variant < 3; ++variant) {
          SCOPED_TRACE(::testing::Message()
                       << "xs " << xs << " rows " << rows << " blocks " << blocks << " variant " << variant);
          const bool with_bias = variant >= 1, with_z = variant == 2, relu = variant != 1;
          const int64_t yblock = 16 * 13 + 16;
          const std::vector<float> z = Random(static_cast<size_t>(2 * yblock), 23 + rows);
          std::vector<float> got(static_cast<size_t>(2 * yblock), -7.f), scalar(got), split(got);
          const float* bp = with_bias ? bias.data() : nullptr;
          const float* zp = with_z ? z.data() : nullptr;
          // With a prefetch range (the second block's weights, as the conv passes the next K block's):
          // prefetching changes no result.
          conv_nchwc::Tile(rows, blocks, x.data(), xs, taps.data(), ntaps, w.data(), wblock, bp, zp, relu, true, true,
                           got.data(), yblock, w.data() + wblock / 2, wblock / 2 - 16);
          conv_nchwc::TileScalar(rows, blocks, x.data(), xs, taps.data(), ntaps, w.data(), wblock, bp, zp, relu, true,
                                 true, scalar.data(), yblock);
          // The taps in two K blocks, the second accumulated onto the first (as conv_nchwc.cc runs them).
          const int64_t k1 = 9;
          conv_nchwc::Tile(rows, blocks, x.data(), xs, taps.data(), k1, w.data(), wblock, bp, zp, relu, true, false,
                           split.data(), yblock);
          conv_nchwc::Tile(rows, blocks, x.data(), xs, taps.data() + k1, ntaps - k1, w.data(), wblock, bp, zp, relu,
                           false, true, split.data(), yblock);
          for (int v = 0; v < 2; ++v)
            for (int r = 0; r < 13; ++r)
              for (int j = 0; j < kBlock; ++j) {
                const size_t at = static_cast<size_t>(v * yblock + r * kBlock + j);
                if (v >= blocks || r >= rows) {
                  ASSERT_EQ(got[at], -7.f) << "wrote outside the tile at " << v << "," << r << "," << j;
                  ASSERT_EQ(split[at], -7.f) << "wrote outside the tile at " << v << "," << r << "," << j;
                  continue;
                }
                double want = with_bias ? bias[v * kBlock + j] : 0.0;
                for (int64_t t = 0; t < ntaps; ++t) {
                  if (!((taps[t].valid >> r) & 1u)) continue;
                  for (int ci = 0; ci < kBlock; ++ci)
                    want +=
                        static_cast<double>(x[taps[t].x + r * xs + ci]) * w[taps[t].w + v * wblock + ci * kBlock + j];
                }
                if (with_z) want += z[at];
                if (relu && want < 0) want = 0;
                ASSERT_NEAR(got[at], want, 1e-4) << v << "," << r << "," << j;
                ASSERT_NEAR(scalar[at], want, 1e-4) << v << "," << r << "," << j;
                ASSERT_NEAR(split[at], want, 1e-4) << "split " << v << "," << r << "," << j;
              }
        }
    }
  }
}

// ---- the pass ----

AttributeMap ConvAttrs(std::vector<int64_t> pads, std::vector<int64_t> strides = {1, 1},
                       std::vector<int64_t> dilations = {1, 1}) {
  return {{"pads", Attribute::Ints(std::move(pads))},
          {"strides", Attribute::Ints(std::move(strides))},
          {"dilations", Attribute::Ints(std::move(dilations))}};
}

// x [1, 32, 10, 9] -> FusedConv 1x1 (W1 [24, 32], Relu) -> a -> Conv 3x3 pad 1 (W2 [32, 24]) -> c
// -> FusedConv 1x1 (W3 [32, 32]) + Z = x, Relu -> y, and a -> MaxPool -> p: the first two stay
// blocked between themselves, x enters once (read as X and as Z), the pool reads a blocked.
void BuildChain(Graph& g) {
  testing::GraphBuilder b(g);
  g.SetOpset("com.microsoft", 1);
  b.Input("x", testing::F32({1, 32, 10, 9}));
  EXPECT_TRUE(g.AddInitializer("W1", RandomTensor<float>({24, 32, 1, 1}, -0.3, 0.3, 31)).ok());
  EXPECT_TRUE(g.AddInitializer("B1", RandomTensor<float>({24}, -1, 1, 32)).ok());
  EXPECT_TRUE(g.AddInitializer("W2", RandomTensor<float>({32, 24, 3, 3}, -0.2, 0.2, 33)).ok());
  EXPECT_TRUE(g.AddInitializer("W3", RandomTensor<float>({32, 32, 1, 1}, -0.3, 0.3, 34)).ok());
  b.Op("FusedConv", {"x", "W1", "B1"}, {"a"}, {{"activation", Attribute::String("Relu")}}, "com.microsoft", "c1");
  b.Op("Conv", {"a", "W2"}, {"c"}, ConvAttrs({1, 1, 1, 1}), "", "c2");
  b.Op("FusedConv", {"c", "W3", "", "x"}, {"y"}, {{"activation", Attribute::String("Relu")}}, "com.microsoft", "c3");
  b.Op("MaxPool", {"a"}, {"p"}, {{"kernel_shape", Attribute::Ints({2, 2})}});
  b.Output("y").Output("p");
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op_type() == op;
  return n;
}

TEST(OptimizerNchwcLayout, GoldenChain) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  Graph g;
  BuildChain(g);
  ASSERT_TRUE(testing::RunPassWithBuiltins(CreateNchwcLayoutPass(), g));
  EXPECT_EQ(Count(g, "NchwcConv"), 3);
  EXPECT_EQ(Count(g, "NchwcMaxPool"), 1);
  EXPECT_EQ(Count(g, "Conv") + Count(g, "FusedConv") + Count(g, "MaxPool"), 0);
  EXPECT_EQ(Count(g, "ReorderToNchwc"), 1);    // x, read as c1's X and c3's Z
  EXPECT_EQ(Count(g, "ReorderFromNchwc"), 2);  // p and y, the graph outputs
  // c2 reads c1's blocked output, c3 reads c2's; the pool (blocked, conv_nchwc_stem_test) reads c1's.
  for (const Node* n : g.nodes()) {
    if (n->op_type() == "NchwcMaxPool") {
      ASSERT_NE(n->input(0)->producer(), nullptr);
      EXPECT_EQ(n->input(0)->producer()->op_type(), "NchwcConv");
    }
    if (n->op_type() == "NchwcConv") {
      const Node* from = n->input(0)->producer();
      ASSERT_NE(from, nullptr);
      EXPECT_TRUE(from->op_type() == "NchwcConv" || from->op_type() == "ReorderToNchwc") << from->op_type();
      std::string act;
      ASSERT_TRUE(n->GetAttr("activation", &act, std::string()).ok());
      EXPECT_EQ(act, n->name().rfind("c2", 0) == 0 ? "" : "Relu") << n->name();
      if (n->inputs().size() > 3 && n->input(3) != nullptr)
        EXPECT_EQ(n->input(3)->producer()->op_type(), "ReorderToNchwc");
    }
  }
  const ValueType& y = g.outputs()[0]->type();
  EXPECT_EQ(y.ToString(), testing::F32({1, 32, 10, 9}).ToString());
}

TEST(OptimizerNchwcLayout, GoldenMustNotFire) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  struct Case {
    const char* what;
    std::function<void(Graph&)> build;
  };
  const std::vector<Case> cases = {
      {"weights fed as a graph input",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({1, 32, 6, 6})).Input("W", testing::F32({16, 32, 1, 1}));
         b.Op("Conv", {"x", "W"}, {"y"});
         b.Output("y");
       }},
      {"a dynamic batch",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({Dim::Symbol("N"), 32, 6, 6}));
         EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({16, 32, 1, 1}, -1, 1, 3)).ok());
         b.Op("Conv", {"x", "W"}, {"y"});
         b.Output("y");
       }},
      {"groups",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({1, 32, 6, 6}));
         EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({32, 16, 3, 3}, -1, 1, 3)).ok());
         b.Op("Conv", {"x", "W"}, {"y"}, {{"group", Attribute::Int(2)}});
         b.Output("y");
       }},
      {"an activation other than Relu",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({1, 32, 6, 6}));
         EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({16, 32, 1, 1}, -1, 1, 3)).ok());
         b.Op("FusedConv", {"x", "W"}, {"y"}, {{"activation", Attribute::String("Sigmoid")}}, "com.microsoft");
         b.Output("y");
       }},
      {"float64",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", ValueType(DType::kFloat64, Dims{1, 32, 6, 6}));
         EXPECT_TRUE(g.AddInitializer("W", RandomTensor<double>({16, 32, 1, 1}, -1, 1, 3)).ok());
         b.Op("Conv", {"x", "W"}, {"y"});
         b.Output("y");
       }},
      {"a 1-D conv",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({1, 32, 6}));
         EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({16, 32, 1}, -1, 1, 3)).ok());
         b.Op("Conv", {"x", "W"}, {"y"});
         b.Output("y");
       }},
  };
  for (const Case& c : cases) {
    Graph before, expected;
    c.build(before);
    c.build(expected);
    EXPECT_FALSE(testing::RunPassWithBuiltins(CreateNchwcLayoutPass(), before)) << c.what;
    Status inferred = InferShapes(expected, OpSchemaRegistry::Global());
    EXPECT_EQ(GraphToText(before), GraphToText(expected)) << c.what;
  }
}

// ---- whole sessions on the blocked path against float64 ----

Dims ToDims(const Shape& shape) {
  Dims d;
  for (int64_t e : shape) d.push_back(Dim(e));
  return d;
}

struct SessionCase {
  conv_testing::Conv2DCase conv;
  bool bias, z, relu;
};

// One conv (as FusedConv when it has Z or Relu) on a session at kAll (the pass on) and the float64
// reference; asserts the conv ran as NchwcConv.
void RunCase(const SessionCase& c, uint32_t seed) {
  const conv_testing::Conv2DCase& cv = c.conv;
  Tensor x = RandomTensor<float>(cv.x, -1, 1, seed);
  Tensor w = RandomTensor<float>(cv.w, -0.5, 0.5, seed + 1);
  Tensor bias = RandomTensor<float>({cv.w[0]}, -1, 1, seed + 2);
  Shape out_shape;
  std::vector<double> want = conv_testing::RefConv2D(cv, x, w, c.bias ? &bias : nullptr, &out_shape);
  Tensor z = RandomTensor<float>(out_shape, -1, 1, seed + 3);
  const std::vector<double> zv = testing::ToDoubles(z);
  for (size_t i = 0; i < want.size(); ++i) {
    if (c.z) want[i] += zv[i];
    if (c.relu && want[i] < 0) want[i] = 0;
  }
  auto g = std::make_unique<Graph>();
  testing::GraphBuilder b(*g);
  g->SetOpset("com.microsoft", 1);
  b.Input("x", testing::F32(ToDims(cv.x)));
  b.Input("z", testing::F32(ToDims(out_shape)));
  EXPECT_TRUE(g->AddInitializer("W", w).ok());
  EXPECT_TRUE(g->AddInitializer("B", bias).ok());
  AttributeMap attrs = ConvAttrs(cv.pads, cv.strides, cv.dilations);
  std::vector<std::string> inputs{"x", "W", c.bias ? "B" : ""};
  if (c.z) inputs.push_back("z");
  if (c.relu) attrs["activation"] = Attribute::String("Relu");
  if (c.z || c.relu) {
    b.Op("FusedConv", inputs, {"y"}, attrs, "com.microsoft");
  } else {
    b.Op("Conv", inputs, {"y"}, attrs);
  }
  b.Output("y");
  SessionOptions opts;
  opts.optimization_level = OptLevel::kAll;
  opts.intra_op_threads = 2;
  auto s = Session::Create(std::move(g), opts);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Count(s.value()->graph(), "NchwcConv"), 1);
  const int64_t before = conv_nchwc::BlockedConvsRun();
  std::vector<Tensor> outs;
  ASSERT_TRUE(s.value()->Run({"x", "z"}, {x, z}, {}, &outs).ok());
  EXPECT_EQ(conv_nchwc::BlockedConvsRun(), before + 1);
  testing::ExpectClose(outs[0], out_shape, want, 1e-4, 1e-4, "y");
}

TEST(ConvNchwc, SessionsMatchFloat64) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  const std::vector<SessionCase> cases = {
      // pointwise, channels filling blocks, 2 output blocks, Z + Relu (a ResNet block's last conv)
      {{{2, 32, 7, 7}, {64, 32, 1, 1}}, true, true, true},
      // pointwise with odd channel counts: 20 -> 24 (partial blocks in and out), an odd block count
      {{{1, 20, 5, 11}, {40, 20, 1, 1}}, true, false, true},
      // 3x3 pad 1 (border taps on both sides), 3 output blocks
      {{{1, 16, 9, 14}, {48, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, false, true},
      // 3x3 stride 2 pad 1 with partial blocks
      {{{2, 17, 11, 13}, {21, 17, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, false, true, false},
      // 1x1 stride 2 (a downsample branch)
      {{{1, 32, 14, 14}, {64, 32, 1, 1}, {2, 2}}, true, false, false},
      // 5x3 kernel, dilation 2x1, uneven pads, stride 1x2, rows wider than a tile
      {{{1, 24, 12, 30}, {16, 24, 5, 3}, {1, 2}, {2, 1}, {3, 0, 1, 2}}, true, true, true},
      // 7x7 stride 2 pad 3
      {{{1, 16, 20, 20}, {32, 16, 7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}}, true, false, true},
      // 3x3 pad 1 on 7 x 7, Z and Relu, 2 images
      {{{2, 32, 7, 7}, {32, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, true, true},
      // 3x3 unpadded, dilation 2
      {{{1, 16, 12, 11}, {16, 16, 3, 3}, {1, 1}, {2, 2}}, true, false, false},
      // Packed weights over 256 KiB (the weight-major order, which prefetches the next K block and
      // the next pair's weights): 3x3 pad 1 on 14 x 14 (rows grouped 5 + 5 + 4), an odd output
      // block count (a last pair of one block), 2 images, Z and Relu
      {{{2, 128, 14, 14}, {80, 128, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, true, true},
      // pointwise with 196 positions in chunks of 66 + 66 + 64, weight-major
      {{{1, 512, 14, 14}, {144, 512, 1, 1}}, true, false, true},
      // 3x3 stride 2 pad 1, weight-major, partial output block
      {{{1, 96, 15, 15}, {120, 96, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, false, false, true},
  };
  uint32_t seed = 100;
  for (const SessionCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ShapeToString(c.conv.x) << " w " << ShapeToString(c.conv.w));
    RunCase(c, seed += 10);
  }
}

// A chain on one session: blocked values pass between convs; same numbers as the session with the
// pass off (TOB_NCHWC=0, read when the session is created), whose convs are held to float64 above
// and in conv_fused_test.
TEST(ConvNchwc, ChainMatchesThePassOff) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  Tensor x = RandomTensor<float>({1, 32, 10, 9}, -1, 1, 71);
  std::vector<Tensor> outs[2];
  for (int on = 0; on < 2; ++on) {
    if (on) {
      unsetenv("TOB_NCHWC");
    } else {
      setenv("TOB_NCHWC", "0", 1);
    }
    auto g = std::make_unique<Graph>();
    BuildChain(*g);
    SessionOptions opts;
    opts.optimization_level = OptLevel::kAll;
    opts.intra_op_threads = 2;
    auto s = Session::Create(std::move(g), opts);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(Count(s.value()->graph(), "NchwcConv"), on ? 3 : 0);
    ASSERT_TRUE(s.value()->Run({"x"}, {x}, {}, &outs[on]).ok());
  }
  unsetenv("TOB_NCHWC");
  for (int i = 0; i < 2; ++i)
    testing::ExpectClose(outs[1][i], outs[0][i].shape(), testing::ToDoubles(outs[0][i]), 1e-5, 1e-5, "output");
}

// The blocked ops are the engine's own (ai.tob), but a model may still name them: each refuses what
// it cannot run with an error naming the node and the culprit.
TEST(ConvNchwc, BadNodesAreNamed) {
  using tensor_test::ExpectFailure;
  auto conv = [](Shape x, Shape w) {
    testing::OpTester t("NchwcConv", 1, kTobDomain);
    t.Input("X", RandomTensor<float>(x)).Input("W", RandomTensor<float>(w)).Output("Y", {}, {});
    return t;
  };
  auto group = conv({1, 1, 4, 4, 16}, {16, 16, 3, 3});
  group.Attr("group", Attribute::Int(2));
  ExpectFailure(group, "group must be 1, got 2");
  auto activation = conv({1, 1, 4, 4, 16}, {16, 16, 3, 3});
  activation.Attr("activation", Attribute::String("Sigmoid"));
  ExpectFailure(activation, "activation must be empty or Relu, got 'Sigmoid'");
  auto unblocked = conv({1, 16, 4, 4}, {16, 16, 3, 3});
  ExpectFailure(unblocked, "X must be blocked [N, Cb, H, W, 16]");
  auto channels = conv({1, 1, 4, 4, 16}, {16, 32, 3, 3});
  ExpectFailure(channels, "has 32 input channels, X has 1 blocks");
  testing::OpTester f64("NchwcConv", 1, kTobDomain);
  f64.Input("X", RandomTensor<double>({1, 1, 4, 4, 16})).Input("W", RandomTensor<double>({16, 16, 3, 3}));
  f64.Output("Y", {}, {});
  ExpectFailure(f64, "must be float32, got float64");

  testing::OpTester to("ReorderToNchwc", 1, kTobDomain);
  to.Input("X", RandomTensor<float>({2, 16, 4})).Output("Y", {}, {});
  ExpectFailure(to, "X must be [N, C, H, W]");
  testing::OpTester from_none("ReorderFromNchwc", 1, kTobDomain);
  from_none.Input("X", RandomTensor<float>({1, 2, 4, 4, 16})).Output("Y", {}, {});
  ExpectFailure(from_none, "attribute channels must be positive, got -1");
  testing::OpTester from("ReorderFromNchwc", 1, kTobDomain);
  from.Attr("channels", Attribute::Int(40)).Input("X", RandomTensor<float>({1, 2, 4, 4, 16})).Output("Y", {}, {});
  ExpectFailure(from, "X has 2 blocks, 40 channels need 3");
}

}  // namespace
}  // namespace tob
