// The blocked layout at a network's stem: the conv that reads an NCHW image and writes blocked
// output (conv_nchwc_nchw_input.h: weight packing, the register tile against float64 over every
// row count, both block counts, strided positions, bias and Relu) and the blocked MaxPool
// (pool_nchwc.h: against a float64 window maximum over strides, pads, dilations, partial windows
// and NaN); the NchwcLayout pass's golden stem -> MaxPool -> conv chain and what it must leave
// alone; whole sessions on both ops against float64 (odd channel counts that fill no block),
// asserting the blocked ops ran.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "conv_reference.h"
#include "graph_pass_test_util.h"
#include "op_tester.h"
#include "ops/fused_elementwise_program.h"
#include "optimizer/passes.h"
#include "providers/cpu/nn/conv_nchwc.h"
#include "providers/cpu/nn/conv_nchwc_nchw_input.h"
#include "providers/cpu/nn/pool_nchwc.h"
#include "runtime/session.h"
#include "tensor_test_util.h"

namespace tob {
namespace {

using conv_nchwc::kBlock;
using conv_testing::Random;
using testing::RandomTensor;

TEST(ConvNchwcStem, PackedWeightsAreRowsOfOutputLanes) {
  const int64_t M = 20, C = 3, KK = 5;
  const std::vector<float> w = Random(static_cast<size_t>(M * C * KK), 5);
  const int64_t Mb = conv_nchwc::Blocks(M), stride = conv_nchwc::NchwInputBlockStride(C, KK);
  ASSERT_EQ(stride, C * KK * kBlock + conv_nchwc::kNchwInputBlockPad);
  std::vector<float> p(static_cast<size_t>(Mb * stride), std::nanf(""));
  conv_nchwc::PackWeightsNchwInput(w.data(), M, C, KK, p.data());
  for (float v : p) ASSERT_FALSE(std::isnan(v)) << "a float of the packed weights was not written";
  for (int64_t m = 0; m < Mb * kBlock; ++m)
    for (int64_t t = 0; t < C * KK; ++t)
      ASSERT_EQ(p[(m / kBlock) * stride + t * kBlock + m % kBlock], m < M ? w[m * C * KK + t] : 0.f) << m << " " << t;
}

// The tile against float64 over random tap offsets, every row count, one and two output blocks,
// unit and stride-2 positions, with and without bias and Relu; a NaN input stays NaN through Relu.
TEST(ConvNchwcStem, TileMatchesFloat64) {
  const int64_t ntaps = 27, span = 3000, wblock = ntaps * kBlock + 16;
  std::vector<float> x = Random(static_cast<size_t>(span), 11);
  const std::vector<float> w = Random(static_cast<size_t>(2 * wblock), 13);
  const std::vector<float> bias = Random(32, 17);
  std::mt19937 gen(19);
  for (int64_t xs : {int64_t{1}, int64_t{2}}) {
    for (int rows = 1; rows <= conv_nchwc::kTileRows; ++rows) {
      std::vector<int64_t> xoff(static_cast<size_t>(ntaps));
      for (int64_t& o : xoff) o = static_cast<int64_t>(gen() % static_cast<uint32_t>(span - 1 - (rows - 1) * xs));
      for (int blocks : {1, 2})
        for (int variant = 0; variant < 4; ++variant) {
          SCOPED_TRACE(::testing::Message()
                       << "xs " << xs << " rows " << rows << " blocks " << blocks << " variant " << variant);
          const bool with_bias = variant & 1, relu = variant & 2;
          const int64_t yblock = kBlock * 13 + 16;
          std::vector<float> got(static_cast<size_t>(2 * yblock), -7.f), scalar(got);
          const float* bp = with_bias ? bias.data() : nullptr;
          conv_nchwc::TileNchwInput(rows, blocks, x.data(), xs, xoff.data(), ntaps, w.data(), wblock, bp, relu,
                                    got.data(), yblock);
          conv_nchwc::TileNchwInputScalar(rows, blocks, x.data(), xs, xoff.data(), ntaps, w.data(), wblock, bp, relu,
                                          scalar.data(), yblock);
          for (int v = 0; v < 2; ++v)
            for (int r = 0; r < 13; ++r)
              for (int j = 0; j < kBlock; ++j) {
                const size_t at = static_cast<size_t>(v * yblock + r * kBlock + j);
                if (v >= blocks || r >= rows) {
                  ASSERT_EQ(got[at], -7.f) << "wrote outside the tile at " << v << "," << r << "," << j;
                  continue;
                }
                double want = with_bias ? bias[v * kBlock + j] : 0.0;
                for (int64_t t = 0; t < ntaps; ++t)
                  want += static_cast<double>(x[xoff[t] + r * xs]) * w[v * wblock + t * kBlock + j];
                if (relu && want < 0) want = 0;
                ASSERT_NEAR(got[at], want, 1e-4) << v << "," << r << "," << j;
                ASSERT_NEAR(scalar[at], want, 1e-4) << v << "," << r << "," << j;
              }
        }
    }
  }
  // A NaN read by position 0 of a one-row tile: NaN in every lane, Relu or not (torch's relu keeps NaN).
  std::vector<int64_t> xoff{0, 5};
  x[5] = std::nanf("");
  for (bool relu : {false, true}) {
    std::vector<float> got(kBlock), scalar(kBlock);
    conv_nchwc::TileNchwInput(1, 1, x.data(), 1, xoff.data(), 2, w.data(), wblock, nullptr, relu, got.data(), kBlock);
    conv_nchwc::TileNchwInputScalar(1, 1, x.data(), 1, xoff.data(), 2, w.data(), wblock, nullptr, relu, scalar.data(),
                                    kBlock);
    for (int j = 0; j < kBlock; ++j) {
      EXPECT_TRUE(std::isnan(got[j])) << "relu " << relu << " lane " << j;
      EXPECT_TRUE(std::isnan(scalar[j])) << "relu " << relu << " lane " << j;
    }
  }
}

// ---- the blocked MaxPool's rows against a float64 window maximum ----

struct PoolCase {
  conv_nchwc::PoolWindow2D p;
  const char* what;
};

PoolCase MakePool(int64_t H, int64_t W, int64_t K, int64_t s, int64_t pad_begin, int64_t pad_end, int64_t d,
                  const char* what) {
  auto out = [&](int64_t in) { return (in + pad_begin + pad_end - (K - 1) * d - 1) / s + 1; };
  return {{H, W, out(H), out(W), K, K, s, s, d, d, pad_begin, pad_begin}, what};
}

TEST(PoolNchwc, RowsMatchFloat64WithNaN) {
  const std::vector<PoolCase> cases = {
      MakePool(112, 112, 3, 2, 1, 1, 1, "ResNet's stem pool, 3x3 s2 p1"),
      MakePool(13, 11, 3, 2, 1, 1, 1, "3x3 s2 p1 on odd sizes"),
      MakePool(9, 10, 3, 1, 1, 1, 1, "3x3 s1 p1"),
      MakePool(10, 10, 2, 2, 0, 0, 1, "2x2 s2"),
      MakePool(12, 9, 3, 1, 2, 2, 1, "3x3 s1 with pads of 2 (windows of one tap at the corners)"),
      MakePool(11, 12, 3, 2, 1, 1, 2, "3x3 s2 p1, dilation 2"),
      MakePool(9, 9, 2, 2, 0, 1, 1, "2x2 s2, ceil_mode's extra column (pad at the end)"),
      MakePool(7, 7, 7, 1, 0, 0, 1, "the whole plane"),
  };
  for (const PoolCase& c : cases) {
    const conv_nchwc::PoolWindow2D& p = c.p;
    SCOPED_TRACE(c.what);
    ASSERT_TRUE(conv_nchwc::WindowsAllTouchInput(p));
    std::vector<float> x = Random(static_cast<size_t>(p.H * p.W * kBlock), 29);
    // NaN in a few lanes at a few positions; the last 5 lanes zero as a partial block's spare lanes.
    for (int64_t i = 0; i < p.H * p.W; ++i) {
      for (int64_t l = 11; l < kBlock; ++l) x[i * kBlock + l] = 0.f;
      if (i % 17 == 3) x[i * kBlock + i % 11] = std::nanf("");
    }
    std::vector<float> got(static_cast<size_t>(p.OH * p.OW * kBlock), -7.f), scalar(got);
    conv_nchwc::MaxPoolBlockedRows(x.data(), p, 0, p.OH / 2, got.data());
    conv_nchwc::MaxPoolBlockedRows(x.data(), p, p.OH / 2, p.OH, got.data());
    conv_nchwc::MaxPoolBlockedRowsScalar(x.data(), p, 0, p.OH, scalar.data());
    int nans = 0;
    for (int64_t oh = 0; oh < p.OH; ++oh)
      for (int64_t ow = 0; ow < p.OW; ++ow)
        for (int64_t l = 0; l < kBlock; ++l) {
          double want = -std::numeric_limits<double>::infinity();
          bool nan = false;
          for (int64_t kh = 0; kh < p.KH; ++kh)
            for (int64_t kw = 0; kw < p.KW; ++kw) {
              const int64_t ih = oh * p.sh - p.pt + kh * p.dh, iw = ow * p.sw - p.pl + kw * p.dw;
              if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
              const double v = x[(ih * p.W + iw) * kBlock + l];
              nan = nan || std::isnan(v);
              want = std::max(want, v);
            }
          const size_t at = static_cast<size_t>((oh * p.OW + ow) * kBlock + l);
          if (nan) {
            ++nans;
            ASSERT_TRUE(std::isnan(got[at])) << oh << "," << ow << "," << l;
            ASSERT_TRUE(std::isnan(scalar[at])) << oh << "," << ow << "," << l;
            continue;
          }
          ASSERT_EQ(got[at], want) << oh << "," << ow << "," << l;
          ASSERT_EQ(scalar[at], want) << oh << "," << ow << "," << l;
        }
    EXPECT_GT(nans, 0) << "no window saw a NaN";
  }
  // A dilation that steps over a 1-pixel input from the padding: the window has no tap inside.
  EXPECT_FALSE(conv_nchwc::WindowsAllTouchInput({1, 1, 1, 1, 3, 3, 1, 1, 2, 2, 1, 1}));
}

// ---- the pass ----

AttributeMap ConvAttrs(std::vector<int64_t> pads, std::vector<int64_t> strides = {1, 1}) {
  return {{"pads", Attribute::Ints(std::move(pads))}, {"strides", Attribute::Ints(std::move(strides))}};
}

AttributeMap PoolAttrs(int64_t k, int64_t s, int64_t pad) {
  return {{"kernel_shape", Attribute::Ints({k, k})},
          {"strides", Attribute::Ints({s, s})},
          {"pads", Attribute::Ints({pad, pad, pad, pad})}};
}

// x [1, 3, 32, 30] -> FusedConv 7x7 s2 p3 (W1 [24, 3], Relu) -> a -> MaxPool 3x3 s2 p1 -> p
// -> FusedConv 1x1 (W2 [24, 24]) + Z = p, Relu -> y: ResNet's stem in small, nothing reordered
// in, one reorder out for the graph output.
void BuildStem(Graph& g) {
  testing::GraphBuilder b(g);
  g.SetOpset("com.microsoft", 1);
  b.Input("x", testing::F32({1, 3, 32, 30}));
  EXPECT_TRUE(g.AddInitializer("W1", RandomTensor<float>({24, 3, 7, 7}, -0.3, 0.3, 41)).ok());
  EXPECT_TRUE(g.AddInitializer("B1", RandomTensor<float>({24}, -1, 1, 42)).ok());
  EXPECT_TRUE(g.AddInitializer("W2", RandomTensor<float>({24, 24, 1, 1}, -0.3, 0.3, 43)).ok());
  AttributeMap stem = ConvAttrs({3, 3, 3, 3}, {2, 2});
  stem["activation"] = Attribute::String("Relu");
  b.Op("FusedConv", {"x", "W1", "B1"}, {"a"}, stem, "com.microsoft", "stem");
  b.Op("MaxPool", {"a"}, {"p"}, PoolAttrs(3, 2, 1), "", "pool");
  b.Op("FusedConv", {"p", "W2", "", "p"}, {"y"}, {{"activation", Attribute::String("Relu")}}, "com.microsoft", "c2");
  b.Output("y");
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node* node : g.nodes()) n += node->op_type() == op;
  return n;
}

const Node* Producer(const Node* n, int i) { return n->input(i) != nullptr ? n->input(i)->producer() : nullptr; }

TEST(OptimizerNchwcLayout, GoldenStemPoolChain) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  Graph g;
  BuildStem(g);
  ASSERT_TRUE(testing::RunPassWithBuiltins(CreateNchwcLayoutPass(), g));
  EXPECT_EQ(Count(g, "NchwcConvNchwInput"), 1);
  EXPECT_EQ(Count(g, "NchwcMaxPool"), 1);
  EXPECT_EQ(Count(g, "NchwcConv"), 1);
  EXPECT_EQ(Count(g, "Conv") + Count(g, "FusedConv") + Count(g, "MaxPool"), 0);
  EXPECT_EQ(Count(g, "ReorderToNchwc"), 0);
  EXPECT_EQ(Count(g, "ReorderFromNchwc"), 1);  // y, the graph output
  for (const Node* n : g.nodes()) {
    if (n->op_type() == "NchwcConvNchwInput") {
      EXPECT_EQ(Producer(n, 0), nullptr) << "the stem reads the graph input x as it is";
      std::string act;
      ASSERT_TRUE(n->GetAttr("activation", &act, std::string()).ok());
      EXPECT_EQ(act, "Relu");
      EXPECT_EQ(n->output(0)->type().ToString(), testing::F32({1, 2, 16, 15, 16}).ToString());
    }
    if (n->op_type() == "NchwcMaxPool") {
      ASSERT_NE(Producer(n, 0), nullptr);
      EXPECT_EQ(Producer(n, 0)->op_type(), "NchwcConvNchwInput");
      EXPECT_EQ(n->output(0)->type().ToString(), testing::F32({1, 2, 8, 8, 16}).ToString());
    }
    if (n->op_type() == "NchwcConv") {
      EXPECT_EQ(Producer(n, 0)->op_type(), "NchwcMaxPool");
      EXPECT_EQ(Producer(n, 3)->op_type(), "NchwcMaxPool");
    }
  }
  EXPECT_EQ(g.outputs()[0]->type().ToString(), testing::F32({1, 24, 8, 8}).ToString());
}

TEST(OptimizerNchwcLayout, GoldenStemMustNotFire) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  struct Case {
    const char* what;
    std::function<void(Graph&)> build;
  };
  auto stem = [](Graph& g, Dims x, Shape w, AttributeMap attrs) {
    testing::GraphBuilder b(g);
    b.Input("x", testing::F32(std::move(x)));
    EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>(w, -1, 1, 3)).ok());
    b.Op("Conv", {"x", "W"}, {"y"}, std::move(attrs));
    b.Output("y");
  };
  const std::vector<Case> cases = {
      {"a stem with a dynamic batch",
       [&](Graph& g) {
         stem(g, {Dim::Symbol("N"), 3, 12, 12}, {16, 3, 3, 3}, {});
       }},
      {"a stem with dynamic image sizes",
       [&](Graph& g) {
         stem(g, {1, 3, Dim::Symbol("H"), Dim::Symbol("W")}, {16, 3, 3, 3}, {});
       }},
      {"a stem with groups",
       [&](Graph& g) {
         stem(g, {1, 4, 12, 12}, {8, 2, 3, 3}, {{"group", Attribute::Int(2)}});
       }},
      {"a stem whose weights are a graph input",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({1, 3, 12, 12})).Input("W", testing::F32({16, 3, 3, 3}));
         b.Op("Conv", {"x", "W"}, {"y"});
         b.Output("y");
       }},
      {"a stem with Z (no NCHW-input conv takes a residual)",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         g.SetOpset("com.microsoft", 1);
         b.Input("x", testing::F32({1, 3, 12, 12})).Input("z", testing::F32({1, 16, 10, 10}));
         EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({16, 3, 3, 3}, -1, 1, 3)).ok());
         b.Op("FusedConv", {"x", "W", "", "z"}, {"y"}, {}, "com.microsoft");
         b.Output("y");
       }},
      {"a stem of 8 output channels (its readers would take them NCHW)",
       [&](Graph& g) {
         stem(g, {1, 3, 12, 12}, {8, 3, 3, 3}, {});
       }},
      {"a MaxPool of an NCHW value",
       [](Graph& g) {
         testing::GraphBuilder b(g);
         b.Input("x", testing::F32({1, 16, 12, 12}));
         b.Op("MaxPool", {"x"}, {"y"}, PoolAttrs(3, 2, 1));
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

// A MaxPool the blocked pool cannot take stays NCHW behind a reorder even when it reads a
// converted stem: with Indices, or with a window wholly in the padding.
TEST(OptimizerNchwcLayout, PoolsLeftAlone) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  for (int variant = 0; variant < 2; ++variant) {
    Graph g;
    testing::GraphBuilder b(g);
    b.Input("x", testing::F32({1, 3, 9, 9}));
    EXPECT_TRUE(g.AddInitializer("W", RandomTensor<float>({16, 3, 3, 3}, -1, 1, 3)).ok());
    b.Op("Conv", {"x", "W"}, {"a"});  // a: [1, 16, 7, 7]
    if (variant == 0) {
      b.Op("MaxPool", {"a"}, {"p", "i"}, PoolAttrs(3, 2, 1));
      b.Output("p").Output("i");
    } else {
      // 2x2 taps 8 apart with pads of 4 on a 7x7 input: output row 3 reads rows -1 and 7, none inside.
      AttributeMap attrs = {{"kernel_shape", Attribute::Ints({2, 2})},
                            {"dilations", Attribute::Ints({8, 8})},
                            {"pads", Attribute::Ints({4, 4, 4, 4})}};
      b.Op("MaxPool", {"a"}, {"p"}, attrs);
      b.Output("p");
    }
    ASSERT_TRUE(testing::RunPassWithBuiltins(CreateNchwcLayoutPass(), g));
    EXPECT_EQ(Count(g, "NchwcConvNchwInput"), 1) << variant;
    EXPECT_EQ(Count(g, "NchwcMaxPool"), 0) << variant;
    EXPECT_EQ(Count(g, "MaxPool"), 1) << variant;
    EXPECT_EQ(Count(g, "ReorderFromNchwc"), 1) << variant;
  }
}

// ---- whole sessions against float64 ----

Dims ToDims(const Shape& shape) {
  Dims d;
  for (int64_t e : shape) d.push_back(Dim(e));
  return d;
}

struct StemCase {
  conv_testing::Conv2DCase conv;
  bool bias, relu;
  int pool_k = 0, pool_s = 1, pool_pad = 0;  // a MaxPool after the conv when pool_k > 0
  bool ceil_mode = false;
};

// The conv (and a MaxPool after it) on a session at kAll; the float64 reference; asserts the
// blocked ops ran.
void RunStem(const StemCase& c, uint32_t seed, bool with_nan) {
  const conv_testing::Conv2DCase& cv = c.conv;
  Tensor x = RandomTensor<float>(cv.x, -1, 1, seed);
  if (with_nan) x.data<float>()[x.numel() / 3] = std::nanf("");
  Tensor w = RandomTensor<float>(cv.w, -0.5, 0.5, seed + 1);
  Tensor bias = RandomTensor<float>({cv.w[0]}, -1, 1, seed + 2);
  Shape conv_shape;
  std::vector<double> want = conv_testing::RefConv2D(cv, x, w, c.bias ? &bias : nullptr, &conv_shape);
  for (double& v : want)
    if (c.relu && v < 0) v = 0;
  Shape out_shape = conv_shape;
  if (c.pool_k > 0) {
    const int64_t N = conv_shape[0], M = conv_shape[1], H = conv_shape[2], W = conv_shape[3];
    // ceil_mode rounds the window count up, dropping a last window that would start in the end padding.
    auto out = [&](int64_t in) {
      const int64_t span = in + 2 * c.pool_pad - c.pool_k;
      int64_t o = (c.ceil_mode ? (span + c.pool_s - 1) / c.pool_s : span / c.pool_s) + 1;
      if (c.ceil_mode && (o - 1) * c.pool_s >= in + c.pool_pad) --o;
      return o;
    };
    const int64_t OH = out(H), OW = out(W);
    std::vector<double> pooled;
    for (int64_t nm = 0; nm < N * M; ++nm)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double best = -INFINITY;
          bool nan = false;
          for (int64_t kh = 0; kh < c.pool_k; ++kh)
            for (int64_t kw = 0; kw < c.pool_k; ++kw) {
              const int64_t ih = oh * c.pool_s - c.pool_pad + kh, iw = ow * c.pool_s - c.pool_pad + kw;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = want[(nm * H + ih) * W + iw];
              nan = nan || std::isnan(v);
              best = std::max(best, v);
            }
          pooled.push_back(nan ? NAN : best);
        }
    want = pooled;
    out_shape = {N, M, OH, OW};
  }
  auto g = std::make_unique<Graph>();
  testing::GraphBuilder b(*g);
  g->SetOpset("com.microsoft", 1);
  b.Input("x", testing::F32(ToDims(cv.x)));
  EXPECT_TRUE(g->AddInitializer("W", w).ok());
  EXPECT_TRUE(g->AddInitializer("B", bias).ok());
  AttributeMap attrs = {{"pads", Attribute::Ints(cv.pads)},
                        {"strides", Attribute::Ints(cv.strides)},
                        {"dilations", Attribute::Ints(cv.dilations)}};
  std::vector<std::string> inputs{"x", "W", c.bias ? "B" : ""};
  if (c.relu) {
    attrs["activation"] = Attribute::String("Relu");
    b.Op("FusedConv", inputs, {"a"}, attrs, "com.microsoft");
  } else {
    b.Op("Conv", inputs, {"a"}, attrs);
  }
  if (c.pool_k > 0) {
    AttributeMap pool = PoolAttrs(c.pool_k, c.pool_s, c.pool_pad);
    if (c.ceil_mode) pool["ceil_mode"] = Attribute::Int(1);
    b.Op("MaxPool", {"a"}, {"y"}, pool);
  } else {
    b.Op("Identity", {"a"}, {"y"});
  }
  b.Output("y");
  SessionOptions opts;
  opts.optimization_level = OptLevel::kAll;
  opts.intra_op_threads = 2;
  auto s = Session::Create(std::move(g), opts);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Count(s.value()->graph(), "NchwcConvNchwInput"), 1);
  EXPECT_EQ(Count(s.value()->graph(), "NchwcMaxPool"), c.pool_k > 0 ? 1 : 0);
  const int64_t convs = conv_nchwc::NchwInputConvsRun(), pools = conv_nchwc::BlockedPoolsRun();
  std::vector<Tensor> outs;
  ASSERT_TRUE(s.value()->Run({"x"}, {x}, {}, &outs).ok());
  EXPECT_EQ(conv_nchwc::NchwInputConvsRun(), convs + 1);
  EXPECT_EQ(conv_nchwc::BlockedPoolsRun(), pools + (c.pool_k > 0 ? 1 : 0));
  if (with_nan) {
    int nans = 0;
    for (double v : want) nans += std::isnan(v);
    EXPECT_GT(nans, 0) << "the NaN reached no output";
  }
  testing::ExpectClose(outs[0], out_shape, want, 1e-4, 1e-4, "y");
}

TEST(ConvNchwcStem, SessionsMatchFloat64) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  const std::vector<StemCase> cases = {
      // ResNet's stem in small: 7x7 s2 p3, 3 -> 64 channels, Relu, then MaxPool 3x3 s2 p1
      {{{1, 3, 40, 38}, {64, 3, 7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}}, true, true, 3, 2, 1},
      // one channel, 5x5 unpadded, 20 outputs (a partial block), no bias, no Relu
      {{{2, 1, 17, 23}, {20, 1, 5, 5}}, false, false},
      // 15 channels (one short of a block), 3x3 p1, 3 output blocks, Relu, MaxPool 2x2 s2
      {{{1, 15, 12, 30}, {40, 15, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true, true, 2, 2, 0},
      // 5 channels, stride 1x2, dilation 2x1, uneven pads, rows wider than a tile, MaxPool 3x3 s1 p1
      {{{2, 5, 14, 31}, {16, 5, 3, 5}, {1, 2}, {2, 1}, {2, 0, 1, 3}}, true, false, 3, 1, 1},
      // 3 channels, 3x3 s2 p1 to 16 x 15, then MaxPool 3x3 s2 with ceil_mode: a last row and
      // column of windows that reach past the input
      {{{1, 3, 31, 29}, {16, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, true, true, 3, 2, 0, true},
      // 2 channels, 1x1 stride 2 (no padding, no taps beside the position)
      {{{1, 2, 9, 9}, {24, 2, 1, 1}, {2, 2}}, true, true},
  };
  uint32_t seed = 200;
  for (const StemCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "x " << ShapeToString(c.conv.x) << " w " << ShapeToString(c.conv.w));
    RunStem(c, seed += 10, false);
  }
  // NaN in the image: the convs it reaches give NaN, Relu keeps it, the pool propagates it.
  RunStem(cases[0], 300, true);
}

// The stem chain on one session matches the session with the pass off (TOB_NCHWC=0), whose ops are
// held to float64 in conv_fused_test and pool_test, and with TOB_NCHWC=convs (the stem and the
// pool NCHW, the 1x1 conv blocked behind a reorder: the layout before the stem ops).
TEST(ConvNchwcStem, ChainMatchesThePassOff) {
  if (!conv_nchwc::Avx512Available()) GTEST_SKIP() << "the pass runs only where the CPU has AVX-512";
  Tensor x = RandomTensor<float>({1, 3, 32, 30}, -1, 1, 71);
  const char* values[] = {"0", "convs", nullptr};
  std::vector<Tensor> outs[3];
  for (int i = 0; i < 3; ++i) {
    if (values[i] != nullptr) {
      setenv("TOB_NCHWC", values[i], 1);
    } else {
      unsetenv("TOB_NCHWC");
    }
    auto g = std::make_unique<Graph>();
    BuildStem(*g);
    SessionOptions opts;
    opts.optimization_level = OptLevel::kAll;
    opts.intra_op_threads = 2;
    auto s = Session::Create(std::move(g), opts);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const Graph& graph = s.value()->graph();
    EXPECT_EQ(Count(graph, "NchwcMaxPool"), i == 2 ? 1 : 0) << i;
    EXPECT_EQ(Count(graph, "NchwcConvNchwInput"), i == 2 ? 1 : 0) << i;
    EXPECT_EQ(Count(graph, "NchwcConv"), i == 0 ? 0 : 1) << i;
    EXPECT_EQ(Count(graph, "ReorderToNchwc"), i == 1 ? 1 : 0) << i;
    ASSERT_TRUE(s.value()->Run({"x"}, {x}, {}, &outs[i]).ok());
  }
  unsetenv("TOB_NCHWC");
  for (int i = 1; i < 3; ++i)
    testing::ExpectClose(outs[i][0], outs[0][0].shape(), testing::ToDoubles(outs[0][0]), 1e-5, 1e-5,
                         values[i] ? "convs" : "on");
}

TEST(ConvNchwcStem, BadNodesAreNamed) {
  using tensor_test::ExpectFailure;
  auto conv = [](Shape x, Shape w) {
    testing::OpTester t("NchwcConvNchwInput", 1, kTobDomain);
    t.Input("X", RandomTensor<float>(x)).Input("W", RandomTensor<float>(w)).Output("Y", {}, {});
    return t;
  };
  auto group = conv({1, 4, 6, 6}, {16, 2, 3, 3});
  group.Attr("group", Attribute::Int(2));
  ExpectFailure(group, "group must be 1, got 2");
  auto activation = conv({1, 3, 6, 6}, {16, 3, 3, 3});
  activation.Attr("activation", Attribute::String("Tanh"));
  ExpectFailure(activation, "activation must be empty or Relu, got 'Tanh'");
  auto blocked = conv({1, 1, 6, 6, 16}, {16, 3, 3, 3});
  ExpectFailure(blocked, "X must be [N, C, H, W]");
  auto channels = conv({1, 3, 6, 6}, {16, 4, 3, 3});
  ExpectFailure(channels, "has 4 input channels, X has 3");
  testing::OpTester f64("NchwcConvNchwInput", 1, kTobDomain);
  f64.Input("X", RandomTensor<double>({1, 3, 6, 6})).Input("W", RandomTensor<double>({16, 3, 3, 3}));
  f64.Output("Y", {}, {});
  ExpectFailure(f64, "must be float32, got float64");

  auto pool = [](Shape x, AttributeMap attrs) {
    testing::OpTester t("NchwcMaxPool", 1, kTobDomain);
    for (auto& [k, v] : attrs) t.Attr(k, v);
    t.Input("X", RandomTensor<float>(x)).Output("Y", {}, {});
    return t;
  };
  auto unblocked = pool({1, 16, 6, 6}, PoolAttrs(3, 2, 1));
  ExpectFailure(unblocked, "X must be blocked [N, Cb, H, W, 16]");
  auto one_dim = pool({1, 1, 6, 6, 16}, {{"kernel_shape", Attribute::Ints({3})}});
  ExpectFailure(one_dim, "kernel_shape must have 2 dims");
  AttributeMap empty_window = {{"kernel_shape", Attribute::Ints({2, 2})},
                               {"dilations", Attribute::Ints({3, 3})},
                               {"pads", Attribute::Ints({2, 2, 2, 2})}};
  auto in_padding = pool({1, 1, 1, 1, 16}, empty_window);
  ExpectFailure(in_padding, "lies entirely in the padding");
}

}  // namespace
}  // namespace tob
