// Nn ops (Conv, ConvTranspose, normalizations, softmax) against float64 references written as
// naive loops here. The pools are in pool_test.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "op_tester.h"
#include "tensor_test_util.h"
#include "window_test_util.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

using tensor_test::NextIndex;

using window_test::SetWindowAttrs;
using window_test::Window;

Attribute Ints(std::vector<int64_t> v) { return Attribute::Ints(std::move(v)); }

// ---------------- Conv ----------------

std::vector<double> RefConv(const Tensor& x, const Tensor& w, const Tensor* b, const Window& win, int64_t group,
                            Shape* out_shape) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const size_t r = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], M = ws[0], Cg = C / group, Mg = M / group;
  Shape in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end()), out(r);
  for (size_t d = 0; d < r; ++d)
    out[d] = (in[d] + win.pb(d) + win.pe(d) - ((k[d] - 1) * win.dil(d) + 1)) / win.s(d) + 1;
  *out_shape = {N, M};
  out_shape->insert(out_shape->end(), out.begin(), out.end());
  std::vector<double> xv = ToDoubles(x), wv = ToDoubles(w), bv = b ? ToDoubles(*b) : std::vector<double>();
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      std::vector<int64_t> o(r, 0);
      do {
        double s = b ? bv[m] : 0.0;
        const int64_t g = m / Mg;
        for (int64_t c = 0; c < Cg; ++c) {
          std::vector<int64_t> kk(r, 0);
          do {
            std::vector<int64_t> pos(r);
            bool inside = true;
            for (size_t d = 0; d < r; ++d) {
              pos[d] = o[d] * win.s(d) - win.pb(d) + kk[d] * win.dil(d);
              inside = inside && pos[d] >= 0 && pos[d] < in[d];
            }
            if (inside)
              s += xv[(n * C + g * Cg + c) * NumElements(in) + tensor_test::Ravel(pos, in)] *
                   wv[(m * Cg + c) * NumElements(k) + tensor_test::Ravel(kk, k)];
          } while (NextIndex(kk, k));
        }
        y.push_back(s);
      } while (NextIndex(o, out));
    }
  return y;
}

template <typename T = float>
void RunConv(const Shape& x_shape, const Shape& w_shape, const Window& win, int64_t group, bool bias, double tol = 1e-4,
             const std::string& auto_pad = "", const Window* ref_win = nullptr) {
  Tensor x = RandomTensor<T>(x_shape, -1, 1, 11), w = RandomTensor<T>(w_shape, -1, 1, 12);
  Tensor b = RandomTensor<T>({w_shape[0]}, -1, 1, 13);
  Shape out_shape;
  std::vector<double> expected = RefConv(x, w, bias ? &b : nullptr, ref_win ? *ref_win : win, group, &out_shape);
  OpTester t("Conv", 11);
  SetWindowAttrs(t, win, true);
  if (group != 1) t.Attr("group", Attribute::Int(group));
  if (!auto_pad.empty()) t.Attr("auto_pad", Attribute::String(auto_pad));
  t.Input("X", x).Input("W", w);
  if (bias) t.Input("B", b);
  t.Output("Y", out_shape, expected, tol, tol).Run();
}

TEST(NnConv, TwoDimensionalWithPadsStridesDilations) {
  RunConv({2, 3, 9, 8}, {4, 3, 3, 3}, {{3, 3}, {}, {}, {}}, 1, false);
  RunConv({2, 3, 9, 8}, {4, 3, 3, 2}, {{3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}}, 1, true);
  RunConv({1, 2, 11, 10}, {5, 2, 3, 3}, {{3, 3}, {3, 2}, {2, 2}, {2, 2, 2, 2}}, 1, true);
}

TEST(NnConv, GroupsAndDepthwise) {
  RunConv({2, 4, 7, 7}, {6, 2, 3, 3}, {{3, 3}, {1, 1}, {}, {1, 1, 1, 1}}, 2, true);
  // Depthwise, channel multiplier 2, strided and dilated.
  RunConv({2, 3, 10, 9}, {6, 1, 3, 3}, {{3, 3}, {2, 1}, {1, 2}, {1, 1, 1, 1}}, 3, true);
  RunConv({1, 4, 8, 8}, {4, 1, 5, 5}, {{5, 5}, {}, {}, {2, 2, 2, 2}}, 4, false);
  RunConv({2, 4, 16}, {4, 1, 3}, {{3}, {2}, {}, {1, 1}}, 4, true);  // 1-D depthwise
}

TEST(NnConv, PointwiseSkipsIm2col) {
  RunConv({3, 8, 5, 6}, {16, 8, 1, 1}, {{1, 1}, {}, {}, {}}, 1, true);
  RunConv({2, 8, 5, 6}, {6, 4, 1, 1}, {{1, 1}, {}, {}, {}}, 2, false);
  // Stride 2 1x1 is not pointwise: goes through im2col.
  RunConv({2, 8, 5, 6}, {6, 8, 1, 1}, {{1, 1}, {2, 2}, {}, {}}, 1, true);
}

TEST(NnConv, OneAndThreeDimensional) {
  RunConv({2, 3, 20}, {5, 3, 4}, {{4}, {3}, {2}, {2, 1}}, 1, true);
  RunConv({1, 2, 5, 6, 7}, {3, 2, 3, 2, 3}, {{3, 2, 3}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 1, 1, 0}}, 1, true);
  RunConv({2, 4, 4, 5, 3}, {4, 2, 1, 1, 1}, {{1, 1, 1}, {}, {}, {}}, 2, false);
}

TEST(NnConv, AutoPad) {
  // in 7, kernel 3, stride 2: out 4, total pad 2 -> 1/1.
  Window same{{3, 3}, {2, 2}, {}, {}};
  Window same_ref{{3, 3}, {2, 2}, {}, {1, 1, 1, 1}};
  RunConv({1, 2, 7, 7}, {3, 2, 3, 3}, same, 1, true, 1e-4, "SAME_UPPER", &same_ref);
  // in 6, kernel 4, stride 1: out 6, total pad 3 -> upper 1/2, lower 2/1.
  Window k4{{4, 4}, {}, {}, {}};
  Window upper_ref{{4, 4}, {}, {}, {1, 1, 2, 2}}, lower_ref{{4, 4}, {}, {}, {2, 2, 1, 1}};
  RunConv({1, 2, 6, 6}, {2, 2, 4, 4}, k4, 1, false, 1e-4, "SAME_UPPER", &upper_ref);
  RunConv({1, 2, 6, 6}, {2, 2, 4, 4}, k4, 1, false, 1e-4, "SAME_LOWER", &lower_ref);
  RunConv({1, 2, 6, 7}, {2, 2, 4, 4}, Window{{4, 4}, {2, 2}, {}, {}}, 1, false, 1e-4, "VALID");
}

TEST(NnConv, DoubleAndHalf) {
  RunConv<double>({2, 3, 6, 7}, {4, 3, 3, 3}, {{3, 3}, {1, 2}, {}, {1, 1, 1, 1}}, 1, true, 1e-12);
  RunConv<Float16>({1, 4, 6, 6}, {4, 2, 3, 3}, {{3, 3}, {}, {}, {1, 1, 1, 1}}, 2, true, 2e-2);
  RunConv<BFloat16>({1, 3, 6, 6}, {2, 3, 1, 1}, {{1, 1}, {}, {}, {}}, 1, true, 5e-2);
}

TEST(NnConv, WrongChannelCountIsAnError) {
  auto r = OpTester("Conv", 11)
               .Input("X", RandomTensor<float>({1, 3, 5, 5}))
               .Input("W", RandomTensor<float>({2, 4, 3, 3}))
               .Output("Y", {1, 2, 3, 3}, {})
               .Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
  // Kernel larger than the padded input.
  r = OpTester("Conv", 11)
          .Input("X", RandomTensor<float>({1, 1, 2, 2}))
          .Input("W", RandomTensor<float>({1, 1, 3, 3}))
          .Output("Y", {1, 1, 1, 1}, {})
          .Compute();
  EXPECT_FALSE(r.ok());
  // Bias of the wrong length.
  r = OpTester("Conv", 11)
          .Input("X", RandomTensor<float>({1, 2, 4, 4}))
          .Input("W", RandomTensor<float>({3, 2, 3, 3}))
          .Input("B", RandomTensor<float>({2}))
          .Output("Y", {1, 3, 2, 2}, {})
          .Compute();
  EXPECT_FALSE(r.ok());
  // Bad attribute value.
  r = OpTester("Conv", 11)
          .Attr("strides", Ints({0, 1}))
          .Input("X", RandomTensor<float>({1, 2, 4, 4}))
          .Input("W", RandomTensor<float>({3, 2, 3, 3}))
          .Output("Y", {1, 3, 2, 2}, {})
          .Compute();
  EXPECT_FALSE(r.ok());
}

// ---------------- ConvTranspose ----------------

std::vector<double> RefConvTranspose(const Tensor& x, const Tensor& w, const Tensor* b, const Window& win,
                                     const Shape& out, int64_t group) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const size_t r = xs.size() - 2;
  const int64_t N = xs[0], C = xs[1], Mg = ws[1], M = Mg * group, Cg = C / group;
  Shape in(xs.begin() + 2, xs.end()), k(ws.begin() + 2, ws.end());
  const int64_t out_size = NumElements(out);
  std::vector<double> xv = ToDoubles(x), wv = ToDoubles(w), bv = b ? ToDoubles(*b) : std::vector<double>();
  std::vector<double> y(N * M * out_size, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < out_size; ++i) y[(n * M + m) * out_size + i] = b ? bv[m] : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / Cg;
      std::vector<int64_t> i(r, 0);
      do {
        const double xval = xv[(n * C + c) * NumElements(in) + tensor_test::Ravel(i, in)];
        for (int64_t ml = 0; ml < Mg; ++ml) {
          std::vector<int64_t> kk(r, 0);
          do {
            std::vector<int64_t> pos(r);
            bool inside = true;
            for (size_t d = 0; d < r; ++d) {
              pos[d] = i[d] * win.s(d) - win.pb(d) + kk[d] * win.dil(d);
              inside = inside && pos[d] >= 0 && pos[d] < out[d];
            }
            if (inside)
              y[(n * M + g * Mg + ml) * out_size + tensor_test::Ravel(pos, out)] +=
                  xval * wv[(c * Mg + ml) * NumElements(k) + tensor_test::Ravel(kk, k)];
          } while (NextIndex(kk, k));
        }
      } while (NextIndex(i, in));
    }
  return y;
}

struct ConvTransposeCase {
  Shape x, w;
  Window win;  // pads used by the reference
  int64_t group = 1;
  std::vector<int64_t> output_padding, output_shape;
  std::string auto_pad;
  bool pass_pads = true;
};

void RunConvTranspose(const ConvTransposeCase& p, double tol = 1e-4) {
  Tensor x = RandomTensor<float>(p.x, -1, 1, 21), w = RandomTensor<float>(p.w, -1, 1, 22);
  const int64_t M = p.w[1] * p.group;
  Tensor b = RandomTensor<float>({M}, -1, 1, 23);
  const size_t r = p.x.size() - 2;
  Shape out(r);
  for (size_t d = 0; d < r; ++d) {
    out[d] = p.output_shape.empty()
                 ? p.win.s(d) * (p.x[d + 2] - 1) + (p.output_padding.empty() ? 0 : p.output_padding[d]) +
                       (p.w[d + 2] - 1) * p.win.dil(d) + 1 - p.win.pb(d) - p.win.pe(d)
                 : p.output_shape[d];
  }
  Shape out_shape{p.x[0], M};
  out_shape.insert(out_shape.end(), out.begin(), out.end());
  OpTester t("ConvTranspose", 11);
  Window attrs = p.win;
  if (!p.pass_pads) attrs.pads.clear();
  SetWindowAttrs(t, attrs, false);
  if (p.group != 1) t.Attr("group", Attribute::Int(p.group));
  if (!p.output_padding.empty()) t.Attr("output_padding", Ints(p.output_padding));
  if (!p.output_shape.empty()) t.Attr("output_shape", Ints(p.output_shape));
  if (!p.auto_pad.empty()) t.Attr("auto_pad", Attribute::String(p.auto_pad));
  t.Input("X", x).Input("W", w).Input("B", b);
  t.Output("Y", out_shape, RefConvTranspose(x, w, &b, p.win, out, p.group), tol, tol).Run();
}

TEST(NnConvTranspose, StridesPadsOutputPaddingGroups) {
  RunConvTranspose({{1, 2, 3, 3}, {2, 3, 3, 3}, {{}, {}, {}, {}}});
  RunConvTranspose({{2, 2, 4, 3}, {2, 2, 3, 2}, {{}, {3, 2}, {}, {1, 0, 1, 1}}, 1, {1, 1}});
  RunConvTranspose({{1, 4, 3, 4}, {4, 3, 3, 3}, {{}, {2, 2}, {2, 1}, {1, 1, 0, 1}}, 2});
  RunConvTranspose({{2, 3, 7}, {3, 2, 3}, {{}, {2}, {}, {1, 0}}, 1, {1}});                        // 1-D
  RunConvTranspose({{1, 2, 2, 3, 2}, {2, 2, 2, 2, 3}, {{}, {2, 1, 2}, {}, {0, 1, 0, 1, 0, 1}}});  // 3-D
}

TEST(NnConvTranspose, OutputShapeAndAutoPad) {
  // Natural size 9x7; output_shape 10x8 puts the extra row/column of zeros at the end.
  RunConvTranspose({{1, 1, 3, 3}, {1, 2, 3, 3}, {{}, {3, 2}, {}, {0, 0, 0, 0}}, 1, {}, {10, 8}, "", false});
  // output_shape smaller than natural (9x7 -> 8x5): pads split with the odd one at the start.
  RunConvTranspose({{1, 1, 3, 3}, {1, 2, 3, 3}, {{}, {3, 2}, {}, {1, 1, 0, 1}}, 1, {}, {8, 5}, "", false});
  // SAME_UPPER: output = input * stride, total pad 1 -> 0 at the start, 1 at the end.
  RunConvTranspose({{1, 1, 3, 3}, {1, 2, 3, 3}, {{}, {2, 2}, {}, {0, 0, 1, 1}}, 1, {}, {}, "SAME_UPPER", false});
  RunConvTranspose({{1, 1, 3, 3}, {1, 2, 3, 3}, {{}, {2, 2}, {}, {1, 1, 0, 0}}, 1, {}, {}, "SAME_LOWER", false});
}

TEST(NnConvTranspose, WrongChannelCountIsAnError) {
  auto r = OpTester("ConvTranspose", 11)
               .Input("X", RandomTensor<float>({1, 3, 4, 4}))
               .Input("W", RandomTensor<float>({2, 2, 3, 3}))
               .Output("Y", {1, 2, 6, 6}, {})
               .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
}

// ---------------- Normalizations ----------------

TEST(NnBatchNorm, InferenceMatchesReference) {
  for (int opset : {9, 15}) {
    Tensor x = RandomTensor<float>({2, 3, 4, 5}, -2, 2, 51);
    Tensor scale = RandomTensor<float>({3}, 0.5, 1.5, 52), bias = RandomTensor<float>({3}, -1, 1, 53);
    Tensor mean = RandomTensor<float>({3}, -1, 1, 54), var = RandomTensor<float>({3}, 0.5, 2, 55);
    std::vector<double> xv = ToDoubles(x), s = ToDoubles(scale), b = ToDoubles(bias), m = ToDoubles(mean),
                        v = ToDoubles(var), y(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t c = (i / 20) % 3;
      y[i] = (xv[i] - m[c]) / std::sqrt(v[c] + 1e-3) * s[c] + b[c];
    }
    OpTester(std::string("BatchNormalization"), opset)
        .Attr("epsilon", Attribute::Float(1e-3f))
        .Input("X", x)
        .Input("scale", scale)
        .Input("B", bias)
        .Input("mean", mean)
        .Input("var", var)
        .Output("Y", {2, 3, 4, 5}, y, 1e-5, 1e-5)
        .Run();
  }
}

TEST(NnBatchNorm, TrainingModeOutputsRunningStats) {
  Tensor x = RandomTensor<float>({3, 2, 4}, -2, 2, 61);
  Tensor scale = RandomTensor<float>({2}, 0.5, 1.5, 62), bias = RandomTensor<float>({2}, -1, 1, 63);
  Tensor mean = RandomTensor<float>({2}, -1, 1, 64), var = RandomTensor<float>({2}, 0.5, 2, 65);
  std::vector<double> xv = ToDoubles(x), s = ToDoubles(scale), b = ToDoubles(bias), m = ToDoubles(mean),
                      v = ToDoubles(var);
  const double momentum = 0.8;
  std::vector<double> bm(2, 0), bv(2, 0), y(xv.size()), rm(2), rv(2);
  for (size_t i = 0; i < xv.size(); ++i) bm[(i / 4) % 2] += xv[i] / 12;
  for (size_t i = 0; i < xv.size(); ++i) bv[(i / 4) % 2] += (xv[i] - bm[(i / 4) % 2]) * (xv[i] - bm[(i / 4) % 2]) / 12;
  for (size_t i = 0; i < xv.size(); ++i) {
    const size_t c = (i / 4) % 2;
    y[i] = (xv[i] - bm[c]) / std::sqrt(bv[c] + 1e-5) * s[c] + b[c];
  }
  for (int c = 0; c < 2; ++c) {
    rm[c] = m[c] * momentum + bm[c] * (1 - momentum);
    rv[c] = v[c] * momentum + bv[c] * (1 - momentum);
  }
  OpTester("BatchNormalization", 15)
      .Attr("training_mode", Attribute::Int(1))
      .Attr("momentum", Attribute::Float(0.8f))
      .Input("X", x)
      .Input("scale", scale)
      .Input("B", bias)
      .Input("mean", mean)
      .Input("var", var)
      .Output("Y", {3, 2, 4}, y, 1e-5, 1e-5)
      .Output("running_mean", {2}, rm, 1e-5, 1e-6)
      .Output("running_var", {2}, rv, 1e-5, 1e-6)
      .Run();
}

TEST(NnBatchNorm, WrongStatisticsLengthIsAnError) {
  auto r = OpTester("BatchNormalization", 15)
               .Input("X", RandomTensor<float>({1, 3, 2, 2}))
               .Input("scale", RandomTensor<float>({3}))
               .Input("B", RandomTensor<float>({3}))
               .Input("mean", RandomTensor<float>({2}))
               .Input("var", RandomTensor<float>({3}))
               .Output("Y", {1, 3, 2, 2}, {})
               .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
}

template <typename T>
void RunInstanceNorm(double tol) {
  Tensor x = RandomTensor<T>({2, 3, 5, 4}, -2, 2, 71);
  Tensor scale = RandomTensor<T>({3}, 0.5, 1.5, 72), bias = RandomTensor<T>({3}, -1, 1, 73);
  std::vector<double> xv = ToDoubles(x), s = ToDoubles(scale), b = ToDoubles(bias), y(xv.size());
  for (int p = 0; p < 6; ++p) {
    double mean = 0, var = 0;
    for (int i = 0; i < 20; ++i) mean += xv[p * 20 + i] / 20;
    for (int i = 0; i < 20; ++i) var += (xv[p * 20 + i] - mean) * (xv[p * 20 + i] - mean) / 20;
    for (int i = 0; i < 20; ++i) y[p * 20 + i] = (xv[p * 20 + i] - mean) / std::sqrt(var + 1e-5) * s[p % 3] + b[p % 3];
  }
  OpTester("InstanceNormalization", 6)
      .Input("X", x)
      .Input("scale", scale)
      .Input("B", bias)
      .Output("Y", {2, 3, 5, 4}, y, tol, tol)
      .Run();
}

TEST(NnInstanceNorm, MatchesReference) {
  RunInstanceNorm<float>(1e-5);
  RunInstanceNorm<double>(1e-12);
  RunInstanceNorm<Float16>(2e-2);
}

struct LayerNormRef {
  std::vector<double> y, mean, inv_std;
};

LayerNormRef RefLayerNorm(const std::vector<double>& x, int64_t rows, int64_t D, const std::vector<double>& scale,
                          const std::vector<double>* bias, double eps) {
  LayerNormRef r;
  r.y.resize(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < D; ++j) mean += x[i * D + j] / D;
    for (int64_t j = 0; j < D; ++j) var += (x[i * D + j] - mean) * (x[i * D + j] - mean) / D;
    const double inv = 1 / std::sqrt(var + eps);
    for (int64_t j = 0; j < D; ++j)
      r.y[i * D + j] = (x[i * D + j] - mean) * inv * scale[j % scale.size()] + (bias ? (*bias)[j % bias->size()] : 0);
    r.mean.push_back(mean);
    r.inv_std.push_back(inv);
  }
  return r;
}

TEST(NnLayerNorm, LastAxisWithStatistics) {
  Tensor x = RandomTensor<float>({2, 3, 96}, -2, 2, 81);
  Tensor scale = RandomTensor<float>({96}, 0.5, 1.5, 82), bias = RandomTensor<float>({96}, -1, 1, 83);
  std::vector<double> b = ToDoubles(bias);
  LayerNormRef ref = RefLayerNorm(ToDoubles(x), 6, 96, ToDoubles(scale), &b, 1e-5);
  OpTester("LayerNormalization", 17)
      .Input("X", x)
      .Input("Scale", scale)
      .Input("B", bias)
      .Output("Y", {2, 3, 96}, ref.y, 1e-5, 1e-5)
      .Output("Mean", {2, 3, 1}, ref.mean, 1e-5, 1e-6)
      .Output("InvStdDev", {2, 3, 1}, ref.inv_std, 1e-5, 1e-6)
      .Run();
}

TEST(NnLayerNorm, InnerAxisNoBiasAndBroadcastScale) {
  Tensor x = RandomTensor<float>({4, 3, 5}, -2, 2, 84);
  Tensor scale = RandomTensor<float>({3, 5}, 0.5, 1.5, 85);
  LayerNormRef ref = RefLayerNorm(ToDoubles(x), 4, 15, ToDoubles(scale), nullptr, 1e-3);
  OpTester("LayerNormalization", 17)
      .Attr("axis", Attribute::Int(1))
      .Attr("epsilon", Attribute::Float(1e-3f))
      .Input("X", x)
      .Input("Scale", scale)
      .Output("Y", {4, 3, 5}, ref.y, 1e-5, 1e-5)
      .Run();
  // Scale [1, 5] broadcast over the normalized [3, 5] block.
  Tensor scale15 = RandomTensor<float>({1, 5}, 0.5, 1.5, 86);
  std::vector<double> s15 = ToDoubles(scale15);
  LayerNormRef ref2 = RefLayerNorm(ToDoubles(x), 4, 15, s15, nullptr, 1e-5);
  OpTester("LayerNormalization", 17)
      .Attr("axis", Attribute::Int(-2))
      .Input("X", x)
      .Input("Scale", scale15)
      .Output("Y", {4, 3, 5}, ref2.y, 1e-5, 1e-5)
      .Run();
}

TEST(NnLayerNorm, DoubleAndHalf) {
  Tensor x = RandomTensor<double>({3, 40}, -2, 2, 87), scale = RandomTensor<double>({40}, 0.5, 1.5, 88);
  LayerNormRef ref = RefLayerNorm(ToDoubles(x), 3, 40, ToDoubles(scale), nullptr, 1e-5);
  OpTester("LayerNormalization", 17)
      .Attr("stash_type", Attribute::Int(11))
      .Input("X", x)
      .Input("Scale", scale)
      .Output("Y", {3, 40}, ref.y, 1e-12, 1e-12)
      .Output("Mean", {3, 1}, ref.mean, 1e-12, 1e-12)
      .Run();
  Tensor xh = RandomTensor<Float16>({3, 40}, -2, 2, 89), sh = RandomTensor<Float16>({40}, 0.5, 1.5, 90);
  LayerNormRef refh = RefLayerNorm(ToDoubles(xh), 3, 40, ToDoubles(sh), nullptr, 1e-5);
  OpTester("LayerNormalization", 17)
      .Input("X", xh)
      .Input("Scale", sh)
      .Output("Y", {3, 40}, refh.y, 1e-2, 1e-2)
      .Output("Mean", {3, 1}, refh.mean, 1e-5, 1e-5)
      .Run();
}

TEST(NnLayerNorm, BadScaleShapeIsAnError) {
  auto r = OpTester("LayerNormalization", 17)
               .Input("X", RandomTensor<float>({2, 8}))
               .Input("Scale", RandomTensor<float>({7}))
               .Output("Y", {2, 8}, {})
               .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
}

TEST(NnSkipLayerNorm, SumBiasAndOutputs) {
  Tensor x = RandomTensor<float>({2, 3, 32}, -2, 2, 91), skip = RandomTensor<float>({3, 32}, -2, 2, 92);
  Tensor gamma = RandomTensor<float>({32}, 0.5, 1.5, 93), beta = RandomTensor<float>({32}, -1, 1, 94);
  Tensor bias = RandomTensor<float>({32}, -1, 1, 95);
  std::vector<double> xv = ToDoubles(x), sv = ToDoubles(skip), bv = ToDoubles(bias), be = ToDoubles(beta);
  std::vector<double> sum(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) sum[i] = xv[i] + sv[i % 96] + bv[i % 32];
  LayerNormRef ref = RefLayerNorm(sum, 6, 32, ToDoubles(gamma), &be, 1e-12);
  OpTester("SkipLayerNormalization", 1, kMicrosoftDomain)
      .Input("input", x)
      .Input("skip", skip)
      .Input("gamma", gamma)
      .Input("beta", beta)
      .Input("bias", bias)
      .Output("output", {2, 3, 32}, ref.y, 1e-5, 1e-5)
      .Output("mean", {2, 3, 1}, ref.mean, 1e-5, 1e-5)
      .Output("inv_std_var", {2, 3, 1}, ref.inv_std, 1e-5, 1e-5)
      .Output("input_skip_bias_sum", {2, 3, 32}, sum, 1e-6, 1e-6)
      .Run();
}

// ---------------- Softmax ----------------

// Softmax / LogSoftmax along `axis` of `shape`, treating dims after it as independent unless
// `coerce_2d` (opset < 13: everything from axis on is one row).
std::vector<double> RefSoftmax(const std::vector<double>& x, const Shape& shape, int64_t axis, bool coerce_2d,
                               bool log) {
  int64_t outer = 1, D = 1, inner = 1;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis) outer *= shape[i];
    else if (i == axis || coerce_2d) D *= shape[i];
    else inner *= shape[i];
  }
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t d) { return (o * D + d) * inner + in; };
      double m = -1e300, s = 0;
      for (int64_t d = 0; d < D; ++d) m = std::max(m, x[at(d)]);
      for (int64_t d = 0; d < D; ++d) s += std::exp(x[at(d)] - m);
      for (int64_t d = 0; d < D; ++d) y[at(d)] = log ? x[at(d)] - m - std::log(s) : std::exp(x[at(d)] - m) / s;
    }
  return y;
}

template <typename T = float>
void RunSoftmax(bool log, int opset, const Shape& shape, int64_t axis, bool set_axis, double tol = 1e-5,
                double scale = 1.0) {
  Tensor x = RandomTensor<T>(shape, -5 * scale, 5 * scale, 101);
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis;
  OpTester t(log ? "LogSoftmax" : "Softmax", opset);
  if (set_axis) t.Attr("axis", Attribute::Int(axis));
  t.Input("X", x).Output("Y", shape, RefSoftmax(ToDoubles(x), shape, a, opset < 13, log), tol, tol).Run();
}

TEST(NnSoftmax, LastAxisAndInnerAxis) {
  for (bool log : {false, true}) {
    RunSoftmax(log, 13, {4, 7, 1000}, -1, false);
    RunSoftmax(log, 13, {3, 37}, -1, true);
    RunSoftmax(log, 13, {2, 5, 3, 4}, 1, true);  // inner = 12
    RunSoftmax(log, 13, {6, 20}, 0, true);
    RunSoftmax<double>(log, 13, {3, 4, 50}, 1, true, 1e-12);
    RunSoftmax<Float16>(log, 13, {3, 64}, -1, false, 5e-3);
  }
}

TEST(NnSoftmax, OldOpsetsCoerceTo2D) {
  for (bool log : {false, true}) {
    RunSoftmax(log, 11, {2, 3, 4, 5}, 1, false);  // default axis 1: rows of 60
    RunSoftmax(log, 11, {2, 3, 4, 5}, 2, true);
    RunSoftmax(log, 1, {2, 3, 4}, -1, true);
    RunSoftmax(log, 11, {2, 3, 4}, 0, true);  // the whole tensor is one row
  }
}

TEST(NnSoftmax, LargeInputsStayFinite) {
  RunSoftmax(false, 13, {2, 300}, -1, false, 1e-5, 40.0);  // values up to +-200
  RunSoftmax(true, 13, {2, 300}, -1, false, 1e-4, 40.0);
}

TEST(NnSoftmax, AxisOutOfRangeIsAnError) {
  auto r = OpTester("Softmax", 13)
               .Attr("axis", Attribute::Int(3))
               .Input("X", RandomTensor<float>({2, 3}))
               .Output("Y", {2, 3}, {})
               .Compute();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
}

// ---------------- Shape functions with symbolic dims (the optimizer's view) ----------------

// Runs `op`'s shape function on inputs of the given static types; returns output types.
StatusOr<std::vector<ValueType>> InferStatic(const std::string& op, const std::vector<ValueType>& inputs,
                                             AttributeMap attrs, int opset = 17) {
  Graph g;
  g.SetOpset("", opset);
  std::vector<std::string> names;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("in" + std::to_string(i));
    TOB_ASSIGN_OR_RETURN(Value * v, g.AddInput(names.back(), inputs[i]));
    (void)v;
  }
  TOB_ASSIGN_OR_RETURN(Node * node, g.AddNode(op, "", names, {"y"}, std::move(attrs), "shape_node"));
  std::vector<const ValueType*> types;
  for (Value* v : node->inputs()) types.push_back(&v->type());
  InferenceContext ctx(*node, opset, types, std::vector<const Tensor*>(types.size(), nullptr));
  TOB_RETURN_IF_ERROR(OpSchemaRegistry::Global().Infer(ctx));
  return ctx.output_types();
}

ValueType F32(Dims d) { return ValueType(DType::kFloat32, std::move(d)); }

TEST(NnShapeInference, SymbolicDimsFlowThrough) {
  const Dim batch = Dim::Symbol("batch"), seq = Dim::Symbol("seq");
  auto mm = InferStatic("MatMul", {F32({batch, seq, 64}), F32({64, 32})}, {});
  ASSERT_TRUE(mm.ok()) << mm.status().ToString();
  EXPECT_EQ(DimsToString(*mm.value()[0].shape), "[batch, seq, 32]");

  auto conv = InferStatic("Conv", {F32({batch, 3, Dim::Unknown(), 32}), F32({8, 3, 3, 3})},
                          {{"pads", Ints({1, 1, 1, 1})}, {"strides", Ints({2, 2})}});
  ASSERT_TRUE(conv.ok()) << conv.status().ToString();
  EXPECT_EQ(DimsToString(*conv.value()[0].shape), "[batch, 8, ?, 16]");

  auto pool =
      InferStatic("MaxPool", {F32({batch, 4, 9, 9})},
                  {{"kernel_shape", Ints({3, 3})}, {"ceil_mode", Attribute::Int(1)}, {"strides", Ints({2, 2})}});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(DimsToString(*pool.value()[0].shape), "[batch, 4, 4, 4]");

  auto ln = InferStatic("LayerNormalization", {F32({batch, seq, 16}), F32({16})}, {});
  ASSERT_TRUE(ln.ok()) << ln.status().ToString();
  EXPECT_EQ(DimsToString(*ln.value()[0].shape), "[batch, seq, 16]");

  // Rank unknown: the dtype is still known.
  auto sm = InferStatic("Softmax", {ValueType(DType::kFloat32, std::nullopt)}, {});
  ASSERT_TRUE(sm.ok());
  EXPECT_FALSE(sm.value()[0].has_rank());
  EXPECT_EQ(sm.value()[0].dtype, DType::kFloat32);
}

TEST(NnShapeInference, MalformedModelsFailStatically) {
  EXPECT_FALSE(InferStatic("MatMul", {F32({Dim::Symbol("b"), 4}), F32({5, 3})}, {}).ok());
  EXPECT_FALSE(InferStatic("Conv", {F32({1, 3, 8}), F32({4, 3, 3, 3})}, {}).ok());  // rank mismatch
  EXPECT_FALSE(
      InferStatic("Conv", {F32({1, 3, 8, 8}), F32({4, 3, 3, 3})}, {{"auto_pad", Attribute::String("SAME")}}).ok());
  EXPECT_FALSE(InferStatic("Gemm", {F32({2, 3, 4}), F32({4, 5})}, {}).ok());
  EXPECT_FALSE(InferStatic("Softmax", {F32({2, 3})}, {{"axis", Attribute::Int(-3)}}).ok());
}

TEST(NnGemmAttributes, TransposeFlagOtherThanZeroOrOneIsAnError) {
  OpTester t("Gemm", 13);
  t.Input("A", RandomTensor<float>({2, 3})).Input("B", RandomTensor<float>({3, 4}));
  t.Attr("transA", Attribute::Int(2)).Output("Y", {2, 4}, std::vector<double>(8, 0.0));
  auto out = t.Compute();
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidModel);
  EXPECT_NE(out.status().message().find("transA/transB must be 0 or 1, got 2"), std::string::npos)
      << out.status().message();
}

}  // namespace
}  // namespace tob
