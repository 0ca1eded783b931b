// Conv's tiled 2-D path (several column blocks, partial output rows, output channels split across
// threads) and com.microsoft FusedConv (bias, Z, every activation) against a float64 reference:
// the naive window sum, then Z, then the activation in double.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "op_tester.h"
#include "tensor_test_util.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

struct Conv2DCase {
  Shape x, w;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1}, pads{0, 0, 0, 0};  // pads: top, left, bottom, right
  int64_t group = 1;
};

std::vector<double> RefConv2D(const Conv2DCase& c, const Tensor& x, const Tensor& w, const Tensor* b,
                              Shape* out_shape) {
  const int64_t N = c.x[0], C = c.x[1], H = c.x[2], W = c.x[3], M = c.w[0], KH = c.w[2], KW = c.w[3];
  const int64_t Cg = C / c.group, Mg = M / c.group;
  const int64_t OH = (H + c.pads[0] + c.pads[2] - (KH - 1) * c.dilations[0] - 1) / c.strides[0] + 1;
  const int64_t OW = (W + c.pads[1] + c.pads[3] - (KW - 1) * c.dilations[1] - 1) / c.strides[1] + 1;
  *out_shape = {N, M, OH, OW};
  std::vector<double> xv = ToDoubles(x), wv = ToDoubles(w), bv = b ? ToDoubles(*b) : std::vector<double>();
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = b ? bv[m] : 0.0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t ih = oh * c.strides[0] - c.pads[0] + kh * c.dilations[0];
                const int64_t iw = ow * c.strides[1] - c.pads[1] + kw * c.dilations[1];
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                const int64_t channel = (m / Mg) * Cg + ci;
                s += xv[((n * C + channel) * H + ih) * W + iw] * wv[((m * Cg + ci) * KH + kh) * KW + kw];
              }
          y.push_back(s);
        }
  return y;
}

double RefActivation(const std::string& act, const std::vector<float>& p, double v) {
  if (act.empty()) return v;
  if (act == "Relu") return v < 0 ? 0 : v;
  if (act == "LeakyRelu") return v < 0 ? p[0] * v : v;
  if (act == "Clip") return std::min(std::max(v, static_cast<double>(p[0])), static_cast<double>(p[1]));
  if (act == "HardSigmoid") return std::min(std::max(p[0] * v + p[1], 0.0), 1.0);
  if (act == "Sigmoid") return 1 / (1 + std::exp(-v));
  if (act == "Tanh") return std::tanh(v);
  if (act == "Silu") return v / (1 + std::exp(-v));
  if (act == "Gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  if (act == "FastGelu") return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  ADD_FAILURE() << "no reference for " << act;
  return v;
}

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
