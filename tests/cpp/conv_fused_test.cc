// Conv's tiled 2-D path (several column blocks, partial output rows, output channels split across
// threads) and com.microsoft FusedConv (bias, Z, every activation) against a float64 reference:
// the naive window sum, then Z, then the activation in double.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "conv_reference.h"
#include "op_tester.h"
#include "tensor_test_util.h"

namespace tob {
namespace {

using conv_testing::Conv2DCase;
using conv_testing::RefActivation;
using conv_testing::RefConv2D;
using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

template <typename T = float>
void RunCase(const Conv2DCase& c, bool bias, const std::string& act = "", std::vector<float> params = {},
             bool with_z = false, int threads = 2) {
  SCOPED_TRACE(::testing::Message() << "X " << ShapeToString(c.x) << " W " << ShapeToString(c.w) << " group " << c.group
                                    << " act '" << act << "' Z " << with_z << " threads " << threads);
  Tensor x = RandomTensor<T>(c.x, -1, 1, 21), w = RandomTensor<T>(c.w, -1, 1, 22);
  Tensor b = RandomTensor<T>({c.w[0]}, -1, 1, 23);
  Shape out_shape;
  std::vector<double> expected = RefConv2D(c, x, w, bias ? &b : nullptr, &out_shape);
  Tensor z = RandomTensor<T>(out_shape, -1, 1, 24);
  if (with_z) {
    std::vector<double> zv = ToDoubles(z);
    for (size_t i = 0; i < expected.size(); ++i) expected[i] += zv[i];
  }
  for (double& v : expected) v = RefActivation(act, params, v);
  const bool fused = !act.empty() || with_z;
  OpTester t(fused ? "FusedConv" : "Conv", fused ? 1 : 11, fused ? "com.microsoft" : "");
  t.Attr("kernel_shape", Attribute::Ints({c.w[2], c.w[3]}));
  t.Attr("strides", Attribute::Ints(c.strides)).Attr("dilations", Attribute::Ints(c.dilations));
  t.Attr("pads", Attribute::Ints(c.pads)).Attr("group", Attribute::Int(c.group));
  if (!act.empty()) t.Attr("activation", Attribute::String(act));
  if (!params.empty()) t.Attr("activation_params", Attribute::Floats(params));
  t.Input("X", x).Input("W", w);
  if (bias) t.Input("B", b);
  else if (with_z) t.Input("", Tensor());
  if (with_z) t.Input("Z", z);
  // Sums of up to a few hundred float32 products of values in [-1, 1].
  const double tol = std::is_same_v<T, double> ? 1e-10 : 2e-4;
  t.Output("Y", out_shape, expected, tol, tol).Threads(threads).Run();
}

TEST(ConvTiled, ManyColumnBlocksAndPartialRows) {
  // out 61 x 47 = 2867 positions, kernel_dim 3 * 9 * 5 = 135 rows: several column blocks whose
  // edges fall inside output rows; stride, dilation and asymmetric pads on the way.
  Conv2DCase c{{2, 5, 63, 49}, {7, 5, 3, 3}};
  RunCase(c, true);
  c.strides = {2, 1};
  c.dilations = {1, 2};
  c.pads = {1, 0, 2, 1};
  RunCase(c, true);
  RunCase(c, false, "", {}, false, 1);
  // Deep input: a block holds few columns.
  RunCase(Conv2DCase{{1, 96, 23, 19}, {5, 96, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}}, true);
}

TEST(ConvTiled, OutputChannelsSplitWhenColumnsAreFew) {
  // 5 x 5 output, one image: fewer column blocks than threads, so channels are split (also with
  // a channel count that is no multiple of 16).
  RunCase(Conv2DCase{{1, 8, 7, 7}, {40, 8, 3, 3}}, true, "", {}, false, 2);
  RunCase(Conv2DCase{{1, 8, 7, 7}, {45, 8, 3, 3}}, true, "Relu", {}, true, 3);
  RunCase(Conv2DCase{{1, 16, 5, 5}, {3, 16, 1, 1}}, true, "", {}, false, 4);  // Mg < 16
}

TEST(ConvTiled, PointwiseGroupsAndDoubles) {
  RunCase(Conv2DCase{{3, 12, 9, 11}, {20, 12, 1, 1}}, true);
  RunCase(Conv2DCase{{2, 12, 9, 11}, {9, 4, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 3}, false);
  RunCase(Conv2DCase{{2, 6, 9, 8}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 2}, true, "Sigmoid");
  RunCase<double>(Conv2DCase{{2, 9, 13, 12}, {9, 3, 3, 2}, {1, 2}, {2, 1}, {2, 1, 0, 1}, 3}, true, "Gelu", {}, true);
}

TEST(FusedConv, EveryActivationWithAndWithoutZ) {
  const Conv2DCase c{{2, 4, 11, 9}, {6, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}};
  const std::vector<std::pair<std::string, std::vector<float>>> acts = {{"Relu", {}},
                                                                        {"Tanh", {}},
                                                                        {"Sigmoid", {}},
                                                                        {"LeakyRelu", {0.1f}},
                                                                        {"Clip", {-0.5f, 0.75f}},
                                                                        {"HardSigmoid", {0.3f, 0.4f}},
                                                                        {"Gelu", {}},
                                                                        {"FastGelu", {}},
                                                                        {"Silu", {}}};
  for (const auto& [act, params] : acts) {
    RunCase(c, true, act, params, false);
    RunCase(c, false, act, params, true);
  }
}

TEST(FusedConv, DepthwiseAndThreeDimensionalTakeThePlaneEpilogue) {
  // Depthwise 7x7 (ConvNeXt's), odd size, batch 2.
  RunCase(Conv2DCase{{2, 6, 13, 11}, {6, 1, 7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 6}, true, "Relu", {}, true);
  RunCase(Conv2DCase{{2, 3, 10, 9}, {6, 1, 3, 3}, {2, 1}, {1, 2}, {1, 1, 1, 1}, 3}, true, "Silu");
  // Wide rows with padded edges: 7x7 with pad 3, and 3x3 with dilation 2, asymmetric pads and a
  // channel multiplier of 2, in float64 too.
  RunCase(Conv2DCase{{2, 4, 9, 45}, {4, 1, 7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 4}, true);
  RunCase(Conv2DCase{{1, 3, 6, 40}, {6, 1, 3, 3}, {1, 1}, {2, 2}, {1, 2, 0, 1}, 3}, false, "Relu");
  RunCase<double>(Conv2DCase{{1, 2, 5, 37}, {2, 1, 7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 2}, true);
  // 3-D: Z and Clip after the column path; the reference is the 1x1x1 conv written as sums.
  Tensor x = RandomTensor<float>({2, 3, 2, 3, 4}, -1, 1, 31), w = RandomTensor<float>({4, 3, 1, 1, 1}, -1, 1, 32);
  Tensor z = RandomTensor<float>({2, 4, 2, 3, 4}, -1, 1, 33);
  std::vector<double> xv = ToDoubles(x), wv = ToDoubles(w), zv = ToDoubles(z), expected;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t m = 0; m < 4; ++m)
      for (int64_t p = 0; p < 24; ++p) {
        double s = zv[(n * 4 + m) * 24 + p];
        for (int64_t ci = 0; ci < 3; ++ci) s += xv[(n * 3 + ci) * 24 + p] * wv[m * 3 + ci];
        expected.push_back(std::min(std::max(s, -0.25), 0.5));
      }
  OpTester t("FusedConv", 1, "com.microsoft");
  t.Attr("kernel_shape", Attribute::Ints({1, 1, 1}))
      .Attr("activation", Attribute::String("Clip"))
      .Attr("activation_params", Attribute::Floats({-0.25f, 0.5f}));
  t.Input("X", x).Input("W", w).Input("", Tensor()).Input("Z", z);
  t.Output("Y", {2, 4, 2, 3, 4}, expected, 1e-5, 1e-5).Run();
}

TEST(FusedConv, RejectsUnknownActivationAndWrongParams) {
  for (const auto& [act, params] :
       std::vector<std::pair<std::string, std::vector<float>>>{{"Swish", {}}, {"Clip", {0.f}}, {"Relu", {1.f}}}) {
    OpTester t("FusedConv", 1, "com.microsoft");
    t.Attr("kernel_shape", Attribute::Ints({1, 1})).Attr("activation", Attribute::String(act));
    if (!params.empty()) t.Attr("activation_params", Attribute::Floats(params));
    t.Input("X", RandomTensor<float>({1, 2, 3, 3}, -1, 1, 41)).Input("W", RandomTensor<float>({2, 2, 1, 1}, -1, 1, 42));
    t.Output("Y", {1, 2, 3, 3}, std::vector<double>(18, 0.0));
    auto result = t.Compute();
    ASSERT_FALSE(result.ok()) << act;
    EXPECT_NE(result.status().message().find("activation"), std::string::npos) << result.status().ToString();
  }
}

TEST(FusedConv, RejectsZOfAnotherShape) {
  OpTester t("FusedConv", 1, "com.microsoft");
  t.Attr("kernel_shape", Attribute::Ints({1, 1})).Attr("activation", Attribute::String("Relu"));
  t.Input("X", RandomTensor<float>({1, 2, 3, 3}, -1, 1, 43)).Input("W", RandomTensor<float>({2, 2, 1, 1}, -1, 1, 44));
  t.Input("", Tensor()).Input("Z", RandomTensor<float>({1, 2, 3, 4}, -1, 1, 45));
  t.Output("Y", {1, 2, 3, 3}, std::vector<double>(18, 0.0));
  auto result = t.Compute();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("Z must be"), std::string::npos) << result.status().ToString();
}

}  // namespace
}  // namespace tob
