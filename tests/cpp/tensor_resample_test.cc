// Resize, Upsample, GridSample, AffineGrid and CenterCropPad against float64 references computed here, for
// what onnx's node tests do not reach (integer Resize, 3-D GridSample with border padding), and
// their bad attributes and inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

std::string ErrorOf(OpTester& t) {
  auto r = t.Compute();
  return r.ok() ? std::string("<no error>") : r.status().message();
}

// ---- Resize ----

// Linear interpolation along one axis with half_pixel coordinates and edge clamping.
std::vector<double> LinearHalfPixel(const std::vector<double>& x, int64_t outer, int64_t in, int64_t out, int64_t inner,
                                    double scale) {
  std::vector<double> y(static_cast<size_t>(outer * out * inner));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < out; ++j) {
      const double src = (static_cast<double>(j) + 0.5) / scale - 0.5;
      const double x0 = std::floor(src), r = src - x0;
      const int64_t i0 = std::clamp<int64_t>(static_cast<int64_t>(x0), 0, in - 1);
      const int64_t i1 = std::clamp<int64_t>(static_cast<int64_t>(x0) + 1, 0, in - 1);
      for (int64_t i = 0; i < inner; ++i)
        y[(o * out + j) * inner + i] = (1 - r) * x[(o * in + i0) * inner + i] + r * x[(o * in + i1) * inner + i];
    }
  return y;
}

TEST(TensorResize, Uint8BilinearRoundsHalfToEvenOnce) {
  // uint8 data: the two axes are interpolated in float64 and rounded once at the end.
  Tensor x = RandomTensor<uint8_t>({1, 2, 5, 6}, 0, 255, 51, 0);
  // The scales input is float32: the coordinate transform divides by float32(1.6).
  const double sh = static_cast<double>(1.6f), sw = 0.5;  // 5 -> 8 rows, 6 -> 3 columns
  std::vector<double> rows = LinearHalfPixel(ToDoubles(x), 2, 5, 8, 6, sh);
  std::vector<double> ref = LinearHalfPixel(rows, 16, 6, 3, 1, sw);
  for (double& v : ref) v = std::clamp(std::nearbyint(v), 0.0, 255.0);
  OpTester t("Resize", 19);
  t.Input("x", x)
      .Input("", Tensor())
      .Input("scales", Tensor::FromVector<float>({1.f, 1.f, static_cast<float>(sh), static_cast<float>(sw)}, {4}))
      .Attr("mode", Attribute::String("linear"));
  t.Output("y", {1, 2, 8, 3}, ref, 0, 0);
  t.Run();
}

TEST(TensorResize, SizesOnSomeAxesKeepTheOthers) {
  Tensor x = RandomTensor<float>({2, 3, 4}, -1, 1, 52);
  // axes = [-1]: only the last axis resized, 4 -> 6.
  std::vector<double> ref = LinearHalfPixel(ToDoubles(x), 6, 4, 6, 1, 6.0 / 4.0);
  OpTester t("Resize", 18);
  t.Input("x", x)
      .Input("", Tensor())
      .Input("", Tensor())
      .Input("sizes", Tensor::FromVector<int64_t>({6}, {1}))
      .Attr("mode", Attribute::String("linear"))
      .Attr("axes", Attribute::Ints({-1}));
  t.Output("y", {2, 3, 6}, ref, 1e-6, 1e-6);
  t.Run();
}

TEST(TensorResize, ScalesAndSizesTogetherIsAnError) {
  OpTester t("Resize", 19);
  t.Input("x", RandomTensor<float>({1, 1, 2, 2}, -1, 1, 53))
      .Input("", Tensor())
      .Input("scales", Tensor::FromVector<float>({1, 1, 2, 2}, {4}))
      .Input("sizes", Tensor::FromVector<int64_t>({1, 1, 4, 4}, {4}));
  t.Output("y", {1, 1, 4, 4}, {});
  EXPECT_NE(ErrorOf(t).find("exactly one of the scales and sizes inputs must be given (non-empty), got both"),
            std::string::npos)
      << ErrorOf(t);
}

TEST(TensorResize, InfiniteOrNegativeScalesAreErrors) {
  for (float bad : {-1.0f, 0.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    OpTester t("Resize", 19);
    t.Input("x", RandomTensor<float>({1, 1, 2, 2}, -1, 1, 65))
        .Input("", Tensor())
        .Input("scales", Tensor::FromVector<float>({1, 1, bad, 2}, {4}));
    t.Output("y", {1, 1, 4, 4}, {});
    EXPECT_NE(ErrorOf(t).find("scales must be positive and give a representable size"), std::string::npos)
        << bad << ": " << ErrorOf(t);
  }
}

TEST(TensorResize, BadAttributesAreNamed) {
  auto resize = [](int opset, const std::string& attr, Attribute value) {
    OpTester t("Resize", opset);
    t.Input("x", RandomTensor<float>({1, 1, 2, 2}, -1, 1, 54))
        .Input("", Tensor())
        .Input("scales", Tensor::FromVector<float>({1, 1, 2, 2}, {4}))
        .Attr(attr, std::move(value));
    t.Output("y", {1, 1, 4, 4}, {});
    return ErrorOf(t);
  };
  EXPECT_NE(resize(19, "mode", Attribute::String("bilinear")).find("'mode' = 'bilinear' is not one of nearest"),
            std::string::npos);
  EXPECT_NE(resize(19, "nearest_mode", Attribute::String("round")).find("'nearest_mode' = 'round'"), std::string::npos);
  EXPECT_NE(resize(13, "axes", Attribute::Ints({2, 3})).find("'axes' needs opset 18"), std::string::npos);
  EXPECT_NE(
      resize(18, "coordinate_transformation_mode", Attribute::String("half_pixel_symmetric")).find("needs opset 19"),
      std::string::npos);
  EXPECT_NE(resize(19, "antialias", Attribute::Int(2)).find("'antialias' must be 0 or 1"), std::string::npos);
}

TEST(TensorResize, UpsampleSevenTakesScalesFromTheAttributeWithAsymmetricCoordinates) {
  // Upsample-7 'linear': source x = y / scale, edge-clamped neighbours.
  Tensor x = RandomTensor<float>({1, 2, 3, 4}, -1, 1, 64);
  const std::vector<double> xd = ToDoubles(x);
  auto linear = [](const std::vector<double>& v, int64_t outer, int64_t in, int64_t out, int64_t inner, double s) {
    std::vector<double> y;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < out; ++j) {
        const double src = static_cast<double>(j) / s, f = std::floor(src), r = src - f;
        const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(f), in - 1), i1 = std::min<int64_t>(i0 + 1, in - 1);
        for (int64_t i = 0; i < inner; ++i)
          y.push_back((1 - r) * v[(o * in + i0) * inner + i] + r * v[(o * in + i1) * inner + i]);
      }
    return y;
  };
  // 3 -> 6 rows (scale 2), 4 -> 6 columns (scale 1.5): rows first, then columns.
  std::vector<double> ref = linear(linear(xd, 2, 3, 6, 4, 2.0), 12, 4, 6, 1, 1.5);
  OpTester t("Upsample", 7);
  t.Input("x", x).Attr("mode", Attribute::String("linear")).Attr("scales", Attribute::Floats({1, 1, 2, 1.5}));
  t.Output("y", {1, 2, 6, 6}, ref, 1e-6, 1e-6);
  t.Run();
}

// ---- GridSample ----

TEST(TensorGridSample, VolumetricLinearWithBorderPaddingMatchesFloat64) {
  const int64_t N = 2, C = 3, D = 3, H = 4, W = 5, OD = 2, OH = 3, OW = 4;
  Tensor x = RandomTensor<double>({N, C, D, H, W}, -1, 1, 55);
  // Coordinates reaching past [-1, 1] exercise the border clamp.
  Tensor grid = RandomTensor<double>({N, OD, OH, OW, 3}, -1.3, 1.3, 56, 0);
  const std::vector<double> xd = ToDoubles(x), gd = ToDoubles(grid);
  const int64_t len[3] = {D, H, W};
  std::vector<double> ref;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < OD * OH * OW; ++p) {
        int64_t lo[3];
        double frac[3];
        for (int d = 0; d < 3; ++d) {
          const double g = gd[(n * OD * OH * OW + p) * 3 + (2 - d)];   // (x, y, z) = (W, H, D)
          double v = ((g + 1) * static_cast<double>(len[d]) - 1) / 2;  // align_corners = 0
          v = std::clamp(v, 0.0, static_cast<double>(len[d] - 1));
          lo[d] = static_cast<int64_t>(std::floor(v));
          frac[d] = v - std::floor(v);
        }
        double sum = 0;
        for (int corner = 0; corner < 8; ++corner) {
          double w = 1;
          int64_t at[3];
          for (int d = 0; d < 3; ++d) {
            const int bit = (corner >> (2 - d)) & 1;
            at[d] = std::min<int64_t>(lo[d] + bit, len[d] - 1);
            w *= bit ? frac[d] : 1 - frac[d];
          }
          sum += w * xd[(((n * C + c) * D + at[0]) * H + at[1]) * W + at[2]];
        }
        ref.push_back(sum);
      }
  OpTester t("GridSample", 20);
  t.Input("x", x)
      .Input("grid", grid)
      .Attr("mode", Attribute::String("linear"))
      .Attr("padding_mode", Attribute::String("border"));
  t.Output("y", {N, C, OD, OH, OW}, ref, 1e-12, 1e-12);
  t.Run();
}

TEST(TensorGridSample, ModeNamesFollowTheOpset) {
  auto sample = [](int opset, const std::string& mode) {
    OpTester t("GridSample", opset);
    t.Input("x", RandomTensor<float>({1, 1, 3, 3}, -1, 1, 57))
        .Input("grid", RandomTensor<float>({1, 2, 2, 2}, -1, 1, 58))
        .Attr("mode", Attribute::String(mode));
    t.Output("y", {1, 1, 2, 2}, {});
    return ErrorOf(t);
  };
  EXPECT_NE(sample(16, "linear").find("'mode' = 'linear' is not one of bilinear, nearest, bicubic (opset 16)"),
            std::string::npos);
  EXPECT_NE(sample(20, "bicubic").find("'mode' = 'bicubic' is not one of linear, nearest, cubic (opset 20)"),
            std::string::npos);
  EXPECT_EQ(sample(16, "bilinear"), "<no error>");
}

TEST(TensorGridSample, GridOfTheWrongRankIsAnError) {
  OpTester t("GridSample", 20);
  t.Input("x", RandomTensor<float>({1, 1, 3, 3}, -1, 1, 59)).Input("grid", RandomTensor<float>({1, 4, 2}, -1, 1, 60));
  t.Output("y", {1, 1, 4}, {});
  EXPECT_NE(ErrorOf(t).find("grid must be [N, H_out, W_out, 2]"), std::string::npos) << ErrorOf(t);
}

// ---- AffineGrid ----

TEST(TensorAffineGrid, TwoDimensionalGridMatchesFloat64) {
  const int64_t N = 2, H = 3, W = 4;
  Tensor theta = RandomTensor<float>({N, 2, 3}, -1, 1, 61);
  const std::vector<double> td = ToDoubles(theta);
  for (bool align : {false, true}) {
    std::vector<double> ref;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const double xs = align ? -1 + 2.0 * w / (W - 1) : (2.0 * w + 1) / W - 1;
          const double ys = align ? -1 + 2.0 * h / (H - 1) : (2.0 * h + 1) / H - 1;
          for (int row = 0; row < 2; ++row)
            ref.push_back(td[n * 6 + row * 3] * xs + td[n * 6 + row * 3 + 1] * ys + td[n * 6 + row * 3 + 2]);
        }
    OpTester t("AffineGrid", 20);
    t.Input("theta", theta)
        .Input("size", Tensor::FromVector<int64_t>({N, 5, H, W}, {4}))
        .Attr("align_corners", Attribute::Int(align));
    t.Output("grid", {N, H, W, 2}, ref, 1e-6, 1e-6);
    SCOPED_TRACE(align ? "align_corners" : "pixel centres");
    t.Run();
  }
}

TEST(TensorAffineGrid, ThetaOfTheWrongShapeIsAnError) {
  OpTester t("AffineGrid", 20);
  t.Input("theta", RandomTensor<float>({1, 3, 4}, -1, 1, 62))
      .Input("size", Tensor::FromVector<int64_t>({1, 1, 3, 3}, {4}));
  t.Output("grid", {1, 3, 3, 2}, {});
  EXPECT_NE(ErrorOf(t).find("theta must be [N, 2, 3] for a size of 4 values"), std::string::npos) << ErrorOf(t);
}

// ---- CenterCropPad ----

TEST(TensorCenterCropPad, CropsOneAxisAndPadsAnotherAroundTheCentre) {
  // axes (0, -1): 5 rows cropped to 2 (from row 1), 3 columns padded to 6 (1 zero before, 2 after).
  std::vector<int64_t> values(30);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int64_t>(i) + 1;
  Tensor x = Tensor::FromVector<int64_t>(values, {5, 2, 3});
  std::vector<double> ref;
  for (int64_t r = 1; r < 3; ++r)
    for (int64_t m = 0; m < 2; ++m)
      for (int64_t c = -1; c < 5; ++c)
        ref.push_back(c >= 0 && c < 3 ? static_cast<double>(values[(r * 2 + m) * 3 + c]) : 0);
  OpTester t("CenterCropPad", 18);
  t.Input("x", x).Input("shape", Tensor::FromVector<int32_t>({2, 6}, {2})).Attr("axes", Attribute::Ints({0, -1}));
  t.Output("y", {2, 2, 6}, ref, 0, 0);
  t.Run();
}

TEST(TensorCenterCropPad, ShapeOfTheWrongLengthIsAnError) {
  OpTester t("CenterCropPad", 18);
  t.Input("x", RandomTensor<float>({4, 4}, -1, 1, 63)).Input("shape", Tensor::FromVector<int64_t>({2, 2, 2}, {3}));
  t.Output("y", {2, 2}, {});
  EXPECT_NE(ErrorOf(t).find("shape has 3 values for 2 axes"), std::string::npos) << ErrorOf(t);
}

}  // namespace
}  // namespace tob::testing
