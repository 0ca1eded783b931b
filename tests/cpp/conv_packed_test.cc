// Conv / FusedConv with constant float32 weights packed once per session (OpKernel::PrePack into
// sgemm_packed.h's panels) and the transposed tiles that read them (Y^T = col^T W^T,
// conv_packed.h): whole sessions against a float64 reference over strides, pads, dilations,
// groups, 1x1, 7x7 stride 2, the narrow images of ResNet's last stage (7x7 = 49 positions), channel
// counts that are no multiple of a panel, several column blocks, with and without bias, Z and
// Relu, at 1 and 2 threads; the same graph with W fed (nothing to pack) as a second check; and
// that the packed path ran (the weight packed once at initialisation, tiles counted). Also the
// batch-folded path of images with a few output positions each (ConvBatchFold).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conv_reference.h"
#include "core/env_switch.h"
#include "op_tester.h"
#include "providers/cpu/nn/conv_packed.h"
#include "providers/cpu/nn/sgemm_packed.h"
#include "runtime/session.h"

namespace tob {
namespace {

using conv_testing::Conv2DCase;
using conv_testing::RefConv2D;
using testing::RandomTensor;
using testing::ToDoubles;

// TOB_CONV_IMPLICIT for one scope ("" leaves it unset), restored afterwards.
class ScopedImplicit {
 public:
  explicit ScopedImplicit(const char* value) {
    const char* old = std::getenv(kName);
    had_ = old != nullptr;
    if (had_) saved_ = old;
    if (value[0] != '\0') setenv(kName, value, 1);
    else unsetenv(kName);
  }
  ~ScopedImplicit() {
    if (had_) setenv(kName, saved_.c_str(), 1);
    else unsetenv(kName);
  }

 private:
  static constexpr const char* kName = "TOB_CONV_IMPLICIT";
  bool had_ = false;
  std::string saved_;
};

struct Fusion {
  bool bias = true, z = false, relu = false;
  std::string act = "";  // another activation (FusedConv's attribute), with its params
  std::vector<float> params = {};
};

// One Conv (or FusedConv when Z or Relu) node; W and B initializers when weights_constant, else
// graph inputs.
std::unique_ptr<Session> ConvSession(const Conv2DCase& c, const Fusion& f, const Tensor& w, const Tensor& b,
                                     const Shape& out_shape, bool weights_constant, int threads) {
  auto g = std::make_unique<Graph>();
  g->SetOpset("", 17);
  g->SetOpset("com.microsoft", 1);
  EXPECT_TRUE(g->AddInput("x", ValueType(DType::kFloat32, DimsFromShape(c.x))).ok());
  if (weights_constant) {
    EXPECT_TRUE(g->AddInitializer("w", w).ok());
    if (f.bias) EXPECT_TRUE(g->AddInitializer("b", b).ok());
  } else {
    EXPECT_TRUE(g->AddInput("w", ValueType(DType::kFloat32, DimsFromShape(w.shape()))).ok());
    if (f.bias) EXPECT_TRUE(g->AddInput("b", ValueType(DType::kFloat32, DimsFromShape(b.shape()))).ok());
  }
  if (f.z) EXPECT_TRUE(g->AddInput("z", ValueType(DType::kFloat32, DimsFromShape(out_shape))).ok());
  AttributeMap attrs;
  attrs["kernel_shape"] = Attribute::Ints({c.w[2], c.w[3]});
  attrs["strides"] = Attribute::Ints(c.strides);
  attrs["dilations"] = Attribute::Ints(c.dilations);
  attrs["pads"] = Attribute::Ints(c.pads);
  attrs["group"] = Attribute::Int(c.group);
  const bool fused = f.z || f.relu || !f.act.empty();
  if (f.relu) attrs["activation"] = Attribute::String("Relu");
  if (!f.act.empty()) attrs["activation"] = Attribute::String(f.act);
  if (!f.params.empty()) attrs["activation_params"] = Attribute::Floats(f.params);
  std::vector<std::string> inputs{"x", "w", f.bias ? "b" : ""};
  if (f.z) inputs.push_back("z");
  EXPECT_TRUE(
      g->AddNode(fused ? "FusedConv" : "Conv", fused ? "com.microsoft" : "", inputs, {"y"}, std::move(attrs), "conv")
          .ok());
  EXPECT_TRUE(g->AddOutput("y").ok());
  SessionOptions opts;
  opts.intra_op_threads = threads;
  opts.optimization_level = OptLevel::kDisableAll;  // the node as built
  auto s = Session::Create(std::move(g), opts);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

void RunPacked(const Conv2DCase& c, const Fusion& f, int threads = 2, uint32_t seed = 1) {
  SCOPED_TRACE(::testing::Message() << "X " << ShapeToString(c.x) << " W " << ShapeToString(c.w) << " group " << c.group
                                    << " bias " << f.bias << " Z " << f.z << " Relu " << f.relu << " act '" << f.act
                                    << "' threads " << threads);
  const Tensor x = RandomTensor<float>(c.x, -1, 1, seed), w = RandomTensor<float>(c.w, -1, 1, seed + 1);
  const Tensor b = RandomTensor<float>({c.w[0]}, -1, 1, seed + 2);
  Shape out_shape;
  std::vector<double> expected = RefConv2D(c, x, w, f.bias ? &b : nullptr, &out_shape);
  const Tensor z = RandomTensor<float>(out_shape, -1, 1, seed + 3);
  if (f.z) {
    const std::vector<double> zv = ToDoubles(z);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += zv[i];
  }
  if (f.relu)
    for (double& v : expected) v = std::max(v, 0.0);
  if (!f.act.empty())
    for (double& v : expected) v = conv_testing::RefActivation(f.act, f.params, v);

  // The transposed tiles take every shape but those where the per-call GEMM measured faster (1x1
  // with a stride, pointwise with K <= 128 into >= 256 channels); those pack nothing.
  const bool pointwise = c.w[2] == 1 && c.w[3] == 1 && c.strides == std::vector<int64_t>{1, 1} &&
                         c.pads == std::vector<int64_t>{0, 0, 0, 0};
  const bool transposed =
      conv_packed::TransposedWins(c.w[0] / c.group, c.w[1] * c.w[2] * c.w[3], c.w[2] * c.w[3], pointwise);
  const int64_t packs = transposed ? c.group : 0;
  const int64_t packs_before = PackedSgemmB::packs_made();
  auto packed = ConvSession(c, f, w, b, out_shape, true, threads);
  auto fed = ConvSession(c, f, w, b, out_shape, false, threads);
  ASSERT_TRUE(packed && fed);
  EXPECT_EQ(PackedSgemmB::packs_made() - packs_before, packs);  // one per group, at initialisation

  std::vector<std::string> names{"x"};
  std::vector<Tensor> feeds{x};
  if (f.z) {
    names.push_back("z");
    feeds.push_back(z);
  }
  // The packed session under each choice of the implicit-GEMM switch (read on every call): the
  // default rule, the transposed tiles of im2col columns (=0) and the implicit GEMM (=1).
  std::vector<Tensor> got, want;
  for (const char* mode : {"", "0", "1"}) {
    SCOPED_TRACE(::testing::Message() << "TOB_CONV_IMPLICIT=" << mode);
    ScopedImplicit scoped(mode);
    RunStats stats;
    const int64_t tiles_before = conv_packed::PackedTilesRun(), implicit_before = conv_packed::ImplicitConvsRun();
    ASSERT_TRUE(packed->Run(names, feeds, {}, &got, &stats).ok());
    const int64_t tiles = conv_packed::PackedTilesRun() - tiles_before;
    const int64_t implicit = conv_packed::ImplicitConvsRun() - implicit_before;
    if (transposed) {
      // Exactly one of the two packed paths ran; =0 / =1 pick which.
      EXPECT_EQ(tiles > 0, implicit == 0);
      if (mode[0] == '0') EXPECT_EQ(implicit, 0);
      if (mode[0] == '1') EXPECT_EQ(implicit, 1);
      EXPECT_EQ(stats.prepacked_constants, 1);
      EXPECT_GE(stats.prepacked_bytes, static_cast<size_t>(w.numel()) * sizeof(float));
    } else {
      EXPECT_EQ(tiles, 0);
      EXPECT_EQ(implicit, 0);
      EXPECT_EQ(stats.prepacked_constants, 0);
    }
    // Sums of up to ~1200 float32 products of values in [-1, 1].
    testing::ExpectClose(got[0], out_shape, expected, 2e-4, 2e-4, "packed");
  }
  names.push_back("w");
  feeds.push_back(w);
  if (f.bias) {
    names.push_back("b");
    feeds.push_back(b);
  }
  ASSERT_TRUE(fed->Run(names, feeds, {}, &want).ok());
  EXPECT_EQ(PackedSgemmB::packs_made() - packs_before, packs);  // runs never re-pack
  testing::ExpectClose(want[0], out_shape, expected, 2e-4, 2e-4, "fed weights");
}

#define SKIP_WITHOUT_SGEMM()                                                \
  if (!SgemmAvailable() || !conv_packed::TransposedWins(64, 576, 9, false)) \
  GTEST_SKIP() << "this CPU has no AVX-512 (or TOB_SGEMM=0 / TOB_CONV_PACKED=0): the packed path is not used"

TEST(ConvPacked, StridesPadsDilationsAndFusions) {
  SKIP_WITHOUT_SGEMM();
  Conv2DCase c{{2, 5, 23, 19}, {40, 5, 3, 3}};
  RunPacked(c, {});
  RunPacked(c, {false, true, true}, 1, 11);
  c.strides = {2, 1};
  c.dilations = {1, 2};
  c.pads = {1, 0, 2, 1};
  RunPacked(c, {true, true, false}, 2, 21);
  RunPacked(c, {false, false, true}, 2, 31);
  // K > 256 (several K blocks of the packed panels), channels no multiple of a panel.
  RunPacked(Conv2DCase{{1, 64, 12, 11}, {70, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {true, true, true}, 2, 41);
}

TEST(ConvPacked, PointwiseStemAndNarrowImages) {
  SKIP_WITHOUT_SGEMM();
  // 1x1 stride 1 (the GEMM reads X in place) and stride 2, with a residual Z and Relu.
  RunPacked(Conv2DCase{{2, 48, 15, 13}, {100, 48, 1, 1}}, {true, true, true}, 2, 51);
  // (1x1 with a stride keeps the per-call GEMM: nothing packed, the tiles not transposed.)
  RunPacked(Conv2DCase{{1, 40, 14, 14}, {96, 40, 1, 1}, {2, 2}}, {true, false, true}, 1, 61);
  // Pointwise 64 -> 256 keeps the per-call GEMM (nothing packed).
  RunPacked(Conv2DCase{{1, 64, 9, 10}, {256, 64, 1, 1}}, {true, true, true}, 2, 65);
  // The stem: 7x7 stride 2 pad 3 on 3 channels (K = 147).
  RunPacked(Conv2DCase{{1, 3, 40, 36}, {64, 3, 7, 7}, {2, 2}, {1, 1}, {3, 3, 3, 3}}, {true, false, true}, 2, 71);
  // ResNet's last stage: 7x7 images, 49 positions; 3x3 pad 1 and 1x1, channels split across
  // threads in whole panels (and a last part of 8 channels, a 16-wide panel).
  RunPacked(Conv2DCase{{1, 64, 7, 7}, {96, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {true, false, true}, 2, 81);
  RunPacked(Conv2DCase{{1, 128, 7, 7}, {200, 128, 1, 1}}, {true, true, true}, 2, 91);
  RunPacked(Conv2DCase{{1, 32, 7, 7}, {40, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {false, false, false}, 3, 101);
}

TEST(ConvPacked, GroupsBatchesAndManyColumnBlocks) {
  SKIP_WITHOUT_SGEMM();
  // Groups (each packed on its own), batch 2, Mg not a multiple of 32.
  RunPacked(Conv2DCase{{2, 12, 9, 11}, {90, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3}, {true, true, true}, 2, 111);
  RunPacked(Conv2DCase{{2, 8, 10, 9}, {36, 4, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 2}, {false, false, true}, 1, 121);
  // 256 channels over 30 x 30 = 900 positions: the positions x channels block is capped, so the
  // image runs in several column blocks whose edges fall inside output rows.
  RunPacked(Conv2DCase{{1, 16, 30, 30}, {256, 16, 1, 1}}, {true, true, true}, 2, 131);
}

// The implicit-GEMM path (conv_implicit.h) on geometries beyond ResNet's: strides 2 and 3 with
// dilations, asymmetric pads, 5x5 and 1x3 kernels, odd channel counts that fill no
// panel (17: a 32-wide panel; 8: a 16-wide one), 3 input channels, groups and batches. RunPacked
// runs each under the default rule and both forced paths.
TEST(ConvPacked, ImplicitGemmGeometries) {
  SKIP_WITHOUT_SGEMM();
  RunPacked(Conv2DCase{{2, 7, 17, 21}, {17, 7, 3, 3}, {2, 2}, {2, 1}, {1, 0, 2, 1}}, {true, true, true}, 2, 201);
  RunPacked(Conv2DCase{{1, 3, 26, 23}, {8, 3, 5, 5}, {3, 2}, {1, 1}, {2, 2, 1, 0}}, {false, false, true}, 1, 211);
  RunPacked(Conv2DCase{{1, 9, 13, 16}, {33, 9, 1, 3}, {1, 1}, {1, 3}, {0, 3, 0, 3}}, {true, true, false}, 2, 221);
  RunPacked(Conv2DCase{{3, 6, 11, 12}, {51, 2, 3, 3}, {1, 2}, {2, 2}, {2, 2, 2, 2}, 3}, {true, false, true}, 2, 231);
  // Dilation 3 at stride 1, and a 7x7 grid of positions with 300 channels (10 panels, parts).
  RunPacked(Conv2DCase{{1, 20, 12, 14}, {24, 20, 3, 3}, {1, 1}, {3, 3}, {3, 2, 3, 2}}, {true, true, true}, 2, 241);
  RunPacked(Conv2DCase{{1, 40, 7, 7}, {300, 40, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {true, true, true}, 2, 251);
}

// Activations other than Relu on the packed paths (they run over Y's rows after the store), with Z
// and bias, under the default rule and both forced paths (RunPacked).
TEST(ConvPacked, OtherActivations) {
  SKIP_WITHOUT_SGEMM();
  const Conv2DCase c{{1, 12, 9, 10}, {40, 12, 3, 3}, {2, 1}, {1, 1}, {1, 1, 0, 2}};
  RunPacked(c, {true, true, false, "Sigmoid", {}}, 2, 261);
  RunPacked(c, {true, true, false, "LeakyRelu", {0.2f}}, 1, 271);
  RunPacked(c, {false, true, false, "Clip", {-0.25f, 0.5f}}, 2, 281);
  RunPacked(Conv2DCase{{1, 24, 7, 7}, {70, 24, 1, 1}}, {true, false, false, "Tanh", {}}, 2, 291);  // 1x1: the tiles
}

// Batches of images with a few output positions each fold into one GEMM (conv_packed::BatchFoldWins,
// conv.cc's BatchFoldedConv2D) where their weights are not pre-packed: against the float64 reference,
// with fed weights (folded) and constant ones (packed: the per-image tiles; not packed: folded), bias,
// Z and Relu, groups, strides and pads.
void RunFolded(const Conv2DCase& c, const Fusion& f, int threads, uint32_t seed) {
  SCOPED_TRACE(::testing::Message() << "X " << ShapeToString(c.x) << " W " << ShapeToString(c.w) << " group " << c.group
                                    << " threads " << threads);
  const Tensor x = RandomTensor<float>(c.x, -1, 1, seed), w = RandomTensor<float>(c.w, -1, 1, seed + 1);
  const Tensor b = RandomTensor<float>({c.w[0]}, -1, 1, seed + 2);
  Shape out_shape;
  std::vector<double> expected = RefConv2D(c, x, w, f.bias ? &b : nullptr, &out_shape);
  ASSERT_TRUE(conv_packed::BatchFoldWins(out_shape[0], out_shape[2] * out_shape[3], false));
  const Tensor z = RandomTensor<float>(out_shape, -1, 1, seed + 3);
  if (f.z) {
    const std::vector<double> zv = ToDoubles(z);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += zv[i];
  }
  if (f.relu)
    for (double& v : expected) v = std::max(v, 0.0);
  for (bool constant : {true, false}) {
    auto s = ConvSession(c, f, w, b, out_shape, constant, threads);
    ASSERT_TRUE(s);
    std::vector<std::string> names{"x"};
    std::vector<Tensor> feeds{x};
    if (f.z) {
      names.push_back("z");
      feeds.push_back(z);
    }
    if (!constant) {
      names.push_back("w");
      feeds.push_back(w);
      if (f.bias) {
        names.push_back("b");
        feeds.push_back(b);
      }
    }
    const int64_t folds_before = conv_packed::BatchFoldsRun();
    std::vector<Tensor> got;
    RunStats stats;
    ASSERT_TRUE(s->Run(names, feeds, {}, &got, &stats).ok());
    // Pre-packed constant weights keep the per-image packed tiles; everything else folds.
    EXPECT_EQ(conv_packed::BatchFoldsRun() - folds_before, stats.prepacked_constants > 0 ? 0 : 1);
    testing::ExpectClose(got[0], out_shape, expected, 2e-4, 2e-4, constant ? "folded, constant W" : "folded, fed W");
  }
}

#define SKIP_WITH_FOLD_SWITCH()                           \
  if (!EnvSwitchValue(EnvSwitch::kConvBatchFold).empty()) \
  GTEST_SKIP() << "TOB_CONV_BATCH_FOLD is set: the default choice is not in force"

TEST(ConvBatchFold, FewPositionsPerImageFoldTheBatch) {
  SKIP_WITH_FOLD_SWITCH();
  // ResNet's last stages at 32x32 images: 1x1 outputs (3x3 pad 1, and stride 2 from 2x2), 2x2.
  RunFolded(Conv2DCase{{4, 64, 1, 1}, {96, 64, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, {true, true, true}, 2, 151);
  RunFolded(Conv2DCase{{4, 32, 2, 2}, {48, 32, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, {false, false, true}, 1, 161);
  RunFolded(Conv2DCase{{3, 24, 4, 4}, {40, 24, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, {true, false, false}, 2, 171);
  // 1x1 with a stride, an odd batch; 3x3 = 9 positions (the most folded) with groups and uneven pads.
  RunFolded(Conv2DCase{{5, 16, 4, 4}, {32, 16, 1, 1}, {2, 2}}, {true, true, false}, 2, 181);
  RunFolded(Conv2DCase{{2, 12, 4, 4}, {18, 4, 3, 3}, {1, 1}, {1, 1}, {0, 1, 1, 0}, 3}, {true, false, true}, 3, 191);
}

TEST(ConvBatchFold, OneImageOrManyPositionsKeepThePerImagePaths) {
  SKIP_WITH_FOLD_SWITCH();
  EXPECT_FALSE(conv_packed::BatchFoldWins(1, 1, false));
  EXPECT_FALSE(conv_packed::BatchFoldWins(8, conv_packed::kMaxFoldedPositions + 1, false));
  EXPECT_TRUE(conv_packed::BatchFoldWins(2, conv_packed::kMaxFoldedPositions, false));
  EXPECT_FALSE(conv_packed::BatchFoldWins(4, 1, true));  // pre-packed weights keep the per-image tiles
}

TEST(ConvPacked, DoublesAndDepthwiseAreNotPacked) {
  // float64 weights and depthwise convs keep their paths: nothing packed.
  const int64_t packs_before = PackedSgemmB::packs_made();
  const Conv2DCase c{{1, 6, 9, 9}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 6};
  const Tensor w = RandomTensor<float>(c.w, -1, 1, 141), b = RandomTensor<float>({6}, -1, 1, 142);
  auto s = ConvSession(c, {}, w, b, {1, 6, 9, 9}, true, 2);
  ASSERT_TRUE(s);
  std::vector<Tensor> got;
  RunStats stats;
  ASSERT_TRUE(s->Run({"x"}, {RandomTensor<float>(c.x, -1, 1, 143)}, {}, &got, &stats).ok());
  EXPECT_EQ(stats.prepacked_constants, 0);
  EXPECT_EQ(PackedSgemmB::packs_made(), packs_before);
}

}  // namespace
}  // namespace tob
