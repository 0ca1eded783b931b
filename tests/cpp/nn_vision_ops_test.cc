// GroupNormalization, MaxUnpool, RoiAlign and DeformConv against float64 references computed here
// on random data, for what onnx's node tests leave out: opset 18's per-group scale beside opset
// 21's per-channel one, 16-bit types, MaxUnpool in 1-D and 3-D with strides and pads, RoiAlign's
// adaptive sampling / spatial_scale / both coordinate modes / opset 10, DeformConv with groups,
// offset groups, strides, pads, dilations, bias and mask - and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

void ExpectError(OpTester& t, const std::string& needle) {
  auto r = t.Compute();
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// ---- GroupNormalization ----

std::vector<double> ReferenceGroupNorm(const std::vector<double>& x, int64_t n, int64_t c, int64_t spatial,
                                       int64_t groups, const std::vector<double>& scale,
                                       const std::vector<double>& bias, bool per_channel, double eps) {
  std::vector<double> y(x.size());
  const int64_t cg = c / groups, size = cg * spatial;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = (b * c + g * cg) * spatial;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < size; ++i) mean += x[base + i];
      mean /= size;
      for (int64_t i = 0; i < size; ++i) var += (x[base + i] - mean) * (x[base + i] - mean);
      var /= size;
      for (int64_t i = 0; i < size; ++i) {
        const int64_t p = per_channel ? g * cg + i / spatial : g;
        y[base + i] = (x[base + i] - mean) / std::sqrt(var + eps) * scale[p] + bias[p];
      }
    }
  return y;
}

TEST(NnGroupNorm, PerGroupAtOpset18PerChannelAtOpset21) {
  Tensor x = RandomTensor<float>({2, 6, 3, 5}, -2, 2, 1);
  const std::vector<double> xv = ToDoubles(x);
  for (int opset : {18, 21}) {
    const bool per_channel = opset >= 21;
    const int64_t params = per_channel ? 6 : 3;
    Tensor scale = RandomTensor<float>({params}, 0.5, 1.5, 2), bias = RandomTensor<float>({params}, -1, 1, 3);
    OpTester t("GroupNormalization", opset);
    t.Attr("num_groups", Attribute::Int(3)).Attr("epsilon", Attribute::Float(1e-3f));
    t.Input("x", x).Input("scale", scale).Input("bias", bias);
    t.Output(
        "y", {2, 6, 3, 5},
        ReferenceGroupNorm(xv, 2, 6, 15, 3, ToDoubles(scale), ToDoubles(bias), per_channel, static_cast<double>(1e-3f)),
        1e-5, 1e-5);
    SCOPED_TRACE("opset " + std::to_string(opset));
    t.Run();
  }
}

TEST(NnGroupNorm, Float16AndBadShapes) {
  Tensor xf = RandomTensor<float>({1, 4, 8}, -2, 2, 4);
  std::vector<Float16> xh;
  for (double v : ToDoubles(xf)) xh.push_back(Float16(static_cast<float>(v)));
  Tensor x = Tensor::FromVector<Float16>(xh, {1, 4, 8});
  Tensor scale = Tensor::FromVector<Float16>({Float16(1.5f), Float16(0.5f), Float16(1.0f), Float16(2.0f)}, {4});
  Tensor bias = Tensor::FromVector<Float16>({Float16(0.25f), Float16(-1.0f), Float16(0.0f), Float16(0.5f)}, {4});
  OpTester t("GroupNormalization", 21);
  t.Attr("num_groups", Attribute::Int(2)).Input("x", x).Input("scale", scale).Input("bias", bias);
  t.Output("y", {1, 4, 8}, ReferenceGroupNorm(ToDoubles(x), 1, 4, 8, 2, ToDoubles(scale), ToDoubles(bias), true, 1e-5),
           2e-3, 4e-3);
  t.Run();
  OpTester wrong("GroupNormalization", 21);  // opset 21 wants [C], got [num_groups]
  wrong.Attr("num_groups", Attribute::Int(2)).Input("x", x);
  wrong.Input("scale", Tensor::FromVector<Float16>({Float16(1.f), Float16(1.f)}, {2}));
  wrong.Input("bias", Tensor::FromVector<Float16>({Float16(0.f), Float16(0.f)}, {2})).Output("y", {1, 4, 8}, {});
  ExpectError(wrong, "input scale has 2 values, expected 4");
  OpTester groups("GroupNormalization", 21);
  groups.Attr("num_groups", Attribute::Int(3)).Input("x", x).Input("scale", scale).Input("bias", bias);
  groups.Output("y", {1, 4, 8}, {});
  ExpectError(groups, "not divisible by num_groups = 3");
}

// ---- MaxUnpool ----

TEST(NnMaxUnpool, StridedPaddedAndLargerOutputShape) {
  // 1-D: kernel 3, stride 2, pads (1, 0): unpooled length (4 - 1) * 2 - 1 + 3 = 8.
  Tensor x = RandomTensor<float>({1, 2, 4}, -2, 2, 10);
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<int64_t> idx{0, 3, 4, 7, 9, 10, 13, 15};  // flat over [1, 2, 8]
  std::vector<double> ref(16, 0.0);
  for (size_t e = 0; e < idx.size(); ++e) ref[idx[e]] = xv[e];
  OpTester t("MaxUnpool", 22);
  t.Attr("kernel_shape", Attribute::Ints({3}))
      .Attr("strides", Attribute::Ints({2}))
      .Attr("pads", Attribute::Ints({1, 0}));
  t.Input("x", x).Input("i", Tensor::FromVector<int64_t>(idx, {1, 2, 4}));
  t.Output("y", {1, 2, 8}, ref, 0, 0);
  t.Run();
  // The same with output_shape [1, 2, 11]: the unpooled rows at the start of each longer row.
  std::vector<double> wide(22, 0.0);
  for (size_t e = 0; e < idx.size(); ++e) wide[(idx[e] / 8) * 11 + idx[e] % 8] = xv[e];
  OpTester w("MaxUnpool", 11);
  w.Attr("kernel_shape", Attribute::Ints({3}))
      .Attr("strides", Attribute::Ints({2}))
      .Attr("pads", Attribute::Ints({1, 0}));
  w.Input("x", x).Input("i", Tensor::FromVector<int64_t>(idx, {1, 2, 4}));
  w.ConstantInput("shape", Tensor::FromVector<int64_t>({1, 2, 11}, {3}));
  w.Output("y", {1, 2, 11}, wide, 0, 0);
  w.Run();
}

TEST(NnMaxUnpool, ThreeDAndBadIndex) {
  Tensor x = RandomTensor<double>({1, 1, 1, 2, 2}, -2, 2, 11);
  const std::vector<int64_t> idx{0, 3, 10, 15};  // in [1, 1, 2, 4, 4] (kernel 2, stride 2)
  std::vector<double> ref(32, 0.0);
  const std::vector<double> xv = ToDoubles(x);
  for (size_t e = 0; e < idx.size(); ++e) ref[idx[e]] = xv[e];
  OpTester t("MaxUnpool", 22);
  t.Attr("kernel_shape", Attribute::Ints({2, 2, 2})).Attr("strides", Attribute::Ints({2, 2, 2}));
  t.Input("x", x).Input("i", Tensor::FromVector<int64_t>(idx, {1, 1, 1, 2, 2}));
  t.Output("y", {1, 1, 2, 4, 4}, ref, 0, 0);
  t.Run();
  OpTester bad("MaxUnpool", 22);
  bad.Attr("kernel_shape", Attribute::Ints({2, 2, 2})).Attr("strides", Attribute::Ints({2, 2, 2}));
  bad.Input("x", x).Input("i", Tensor::FromVector<int64_t>({0, 3, 10, 32}, {1, 1, 1, 2, 2}));
  bad.Output("y", {1, 1, 2, 4, 4}, {});
  ExpectError(bad, "index I[3] = 32 is outside the unpooled tensor");
}

// ---- RoiAlign ----

double Bilinear(const std::vector<double>& x, int64_t plane, int64_t h, int64_t w, double y, double xx) {
  if (y < -1.0 || y > h || xx < -1.0 || xx > w) return 0.0;
  y = std::max(y, 0.0);
  xx = std::max(xx, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(xx);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) y = static_cast<double>(y1 = y0 = h - 1);
  if (x0 >= w - 1) xx = static_cast<double>(x1 = x0 = w - 1);
  const double ly = y - y0, lx = xx - x0;
  const double* p = x.data() + plane * h * w;
  return (1 - ly) * (1 - lx) * p[y0 * w + x0] + (1 - ly) * lx * p[y0 * w + x1] + ly * (1 - lx) * p[y1 * w + x0] +
         ly * lx * p[y1 * w + x1];
}

// Average mode from the spec's description: each bin averages a grid of bilinear samples.
std::vector<double> ReferenceRoiAlignAvg(const std::vector<double>& x, int64_t c, int64_t h, int64_t w,
                                         const std::vector<double>& rois, const std::vector<int64_t>& batch, int64_t oh,
                                         int64_t ow, int64_t ratio, double scale, bool half_pixel) {
  std::vector<double> y;
  const double off = half_pixel ? 0.5 : 0.0;
  for (size_t r = 0; r < batch.size(); ++r) {
    const double x1 = rois[r * 4] * scale - off, y1 = rois[r * 4 + 1] * scale - off;
    double rw = rois[r * 4 + 2] * scale - off - x1, rh = rois[r * 4 + 3] * scale - off - y1;
    if (!half_pixel) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    const double bh = rh / oh, bw = rw / ow;
    const int64_t gh = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rh / oh));
    const int64_t gw = ratio > 0 ? ratio : static_cast<int64_t>(std::ceil(rw / ow));
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t py = 0; py < oh; ++py)
        for (int64_t px = 0; px < ow; ++px) {
          double sum = 0;
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix)
              sum += Bilinear(x, batch[r] * c + ch, h, w, y1 + py * bh + (iy + 0.5) * bh / gh,
                              x1 + px * bw + (ix + 0.5) * bw / gw);
          y.push_back(sum / std::max<int64_t>(gh * gw, 1));
        }
  }
  return y;
}

TEST(NnRoiAlign, AverageAdaptiveSamplingScaleAndBothCoordinateModes) {
  const int64_t n = 2, c = 3, h = 7, w = 9;
  Tensor x = RandomTensor<float>({n, c, h, w}, -2, 2, 20);
  const std::vector<double> rois{0.5, 1.0, 12.0, 9.5, 3.0, 2.0, 6.0, 11.0, 14.0, 0.0, 17.5, 13.0};
  const std::vector<int64_t> batch{1, 0, 1};
  std::vector<float> roisf(rois.begin(), rois.end());
  for (int opset : {10, 16}) {
    for (int64_t ratio : {0, 2}) {
      const bool half_pixel = opset >= 16;
      OpTester t("RoiAlign", opset);
      t.Attr("output_height", Attribute::Int(3)).Attr("output_width", Attribute::Int(2));
      t.Attr("sampling_ratio", Attribute::Int(ratio)).Attr("spatial_scale", Attribute::Float(0.5f));
      t.Input("x", x).Input("rois", Tensor::FromVector<float>(roisf, {3, 4}));
      t.Input("batch", Tensor::FromVector<int64_t>(batch, {3}));
      std::vector<double> roisd(roisf.begin(), roisf.end());
      t.Output(
          "y", {3, c, 3, 2},
          ReferenceRoiAlignAvg(ToDoubles(x), c, h, w, roisd, batch, 3, 2, ratio, static_cast<double>(0.5f), half_pixel),
          1e-5, 1e-5);
      SCOPED_TRACE("opset " + std::to_string(opset) + " ratio " + std::to_string(ratio));
      t.Run();
    }
  }
}

TEST(NnRoiAlign, BadBatchIndexAndMode) {
  OpTester t("RoiAlign", 16);
  t.Input("x", RandomTensor<float>({1, 1, 4, 4}, -1, 1, 21));
  t.Input("rois", Tensor::FromVector<float>({0, 0, 2, 2}, {1, 4}));
  t.Input("batch", Tensor::FromVector<int64_t>({1}, {1}));
  t.Output("y", {1, 1, 1, 1}, {});
  ExpectError(t, "batch_indices[0] = 1 is outside [0, 1)");
  OpTester m("RoiAlign", 10);
  m.Attr("coordinate_transformation_mode", Attribute::String("half_pixel"));
  m.Input("x", RandomTensor<float>({1, 1, 4, 4}, -1, 1, 21));
  m.Input("rois", Tensor::FromVector<float>({0, 0, 2, 2}, {1, 4}));
  m.Input("batch", Tensor::FromVector<int64_t>({0}, {1}));
  m.Output("y", {1, 1, 1, 1}, {});
  ExpectError(m, "exists from opset 16");
  OpTester inf("RoiAlign", 16);
  inf.Input("x", RandomTensor<float>({1, 1, 4, 4}, -1, 1, 21));
  inf.Input("rois", Tensor::FromVector<float>({0, 0, std::numeric_limits<float>::infinity(), 2}, {1, 4}));
  inf.Input("batch", Tensor::FromVector<int64_t>({0}, {1}));
  inf.Output("y", {1, 1, 1, 1}, {});
  ExpectError(inf, "rois[0] has a non-finite coordinate");
  OpTester huge("RoiAlign", 16);  // an adaptive grid over a roi of 1e9 pixels would never finish
  huge.Input("x", RandomTensor<float>({1, 1, 4, 4}, -1, 1, 21));
  huge.Input("rois", Tensor::FromVector<float>({0, 0, 1e9f, 1e9f}, {1, 4}));
  huge.Input("batch", Tensor::FromVector<int64_t>({0}, {1}));
  huge.Output("y", {1, 1, 1, 1}, {});
  ExpectError(huge, "exceeds");
}

// ---- DeformConv ----

// Bilinear with zeros outside (each corner outside the image contributes 0).
double SampleZeros(const std::vector<double>& x, int64_t plane, int64_t h, int64_t w, double y, double xx) {
  const double fy = std::floor(y), fx = std::floor(xx);
  const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
  auto at = [&](int64_t a, int64_t b) { return a >= 0 && a < h && b >= 0 && b < w ? x[(plane * h + a) * w + b] : 0.0; };
  const double ly = y - fy, lx = xx - fx;
  return (1 - ly) * (1 - lx) * at(y0, x0) + (1 - ly) * lx * at(y0, x0 + 1) + ly * (1 - lx) * at(y0 + 1, x0) +
         ly * lx * at(y0 + 1, x0 + 1);
}

TEST(NnDeformConv, GroupsOffsetGroupsStridesPadsDilationsMaskAndBias) {
  const int64_t n = 2, c = 4, h = 6, w = 5, m = 6, group = 2, og = 2, kh = 2, kw = 3;
  const int64_t sh = 2, sw = 1, ph = 1, pw = 1, dh = 1, dw = 2;
  const int64_t oh = (h + 2 * ph - ((kh - 1) * dh + 1)) / sh + 1, ow = (w + 2 * pw - ((kw - 1) * dw + 1)) / sw + 1;
  Tensor x = RandomTensor<float>({n, c, h, w}, -2, 2, 30);
  Tensor wt = RandomTensor<float>({m, c / group, kh, kw}, -1, 1, 31);
  Tensor off = RandomTensor<float>({n, og * kh * kw * 2, oh, ow}, -1.5, 1.5, 32);
  Tensor b = RandomTensor<float>({m}, -1, 1, 33);
  Tensor mask = RandomTensor<float>({n, og * kh * kw, oh, ow}, 0, 1, 34);
  const std::vector<double> xv = ToDoubles(x), wv = ToDoubles(wt), ov = ToDoubles(off), bv = ToDoubles(b),
                            mv = ToDoubles(mask);
  std::vector<double> ref;
  for (int64_t bn = 0; bn < n; ++bn)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double sum = bv[oc];
          const int64_t grp = oc / (m / group);
          for (int64_t icl = 0; icl < c / group; ++icl) {
            const int64_t ic = grp * (c / group) + icl, o = ic / (c / og);
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t tap = i * kw + j;
                const double dy = ov[(((bn * og + o) * kh * kw + tap) * 2 + 0) * oh * ow + oy * ow + ox];
                const double dx = ov[(((bn * og + o) * kh * kw + tap) * 2 + 1) * oh * ow + oy * ow + ox];
                const double mk = mv[((bn * og + o) * kh * kw + tap) * oh * ow + oy * ow + ox];
                const double v = SampleZeros(xv, bn * c + ic, h, w, static_cast<double>(oy * sh - ph + i * dh) + dy,
                                             static_cast<double>(ox * sw - pw + j * dw) + dx);
                sum += wv[((oc * (c / group) + icl) * kh + i) * kw + j] * v * mk;
              }
          }
          ref.push_back(sum);
        }
  OpTester t("DeformConv", 19);
  t.Attr("group", Attribute::Int(group)).Attr("offset_group", Attribute::Int(og));
  t.Attr("strides", Attribute::Ints({sh, sw})).Attr("pads", Attribute::Ints({ph, pw, ph, pw}));
  t.Attr("dilations", Attribute::Ints({dh, dw}));
  t.Input("x", x).Input("w", wt).Input("offset", off).Input("b", b).Input("mask", mask);
  t.Output("y", {n, m, oh, ow}, ref, 1e-5, 1e-5);
  t.Run();
}

TEST(NnDeformConv, FarAndNanOffsets) {
  // An offset far outside the image samples zeros; a NaN offset gives NaN (no integer conversion
  // of either ever indexes the image).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTester t("DeformConv", 19);
  t.Input("x", RandomTensor<float>({1, 1, 3, 3}, -1, 1, 43))
      .Input("w", Tensor::FromVector<float>({1.0f}, {1, 1, 1, 1}));
  t.Input("offset", Tensor::FromVector<float>({1e30f, 0, 0, 0, 0, 0, 0, 0, nan,  //
                                               0, -1e30f, 0, 0, 0, 0, 0, 0, 0},
                                              {1, 2, 3, 3}));
  auto r = t.Output("y", {1, 1, 3, 3}, {}).Compute();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r.value()[0].ElementAsDouble(0), 0.0);
  EXPECT_EQ(r.value()[0].ElementAsDouble(1), 0.0);
  EXPECT_TRUE(std::isnan(r.value()[0].ElementAsDouble(8)));
}

TEST(NnDeformConv, OffsetOfTheWrongShapeIsAnError) {
  OpTester t("DeformConv", 22);
  t.Input("x", RandomTensor<float>({1, 2, 4, 4}, -1, 1, 40));
  t.Input("w", RandomTensor<float>({3, 2, 2, 2}, -1, 1, 41));
  t.Input("offset", RandomTensor<float>({1, 6, 3, 3}, -1, 1, 42));  // needs 2 * 2 * 2 = 8 channels
  t.Output("y", {1, 3, 3, 3}, {});
  ExpectError(t, "offset must be [1, 8, 3, 3]");
}

}  // namespace
}  // namespace tob::testing
