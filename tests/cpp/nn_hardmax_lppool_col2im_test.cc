// Hardmax, LpPool / GlobalLpPool and Col2Im against float64 references computed here, and their
// bad attributes. (NonMaxSuppression, whose kernel allocates its data-dependent output, is covered
// by onnx's node tests and tests/python/test_onnx_resample_detection.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

// ---- Hardmax ----

// 1 at the first maximum of each [outer, D, inner] row along D.
std::vector<double> ReferenceHardmax(const std::vector<double>& x, int64_t outer, int64_t D, int64_t inner) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t d = 1; d < D; ++d)
        if (x[(o * D + d) * inner + i] > x[(o * D + best) * inner + i]) best = d;
      y[(o * D + best) * inner + i] = 1.0;
    }
  return y;
}

TEST(NnHardmax, OneAxisFromOpset13AndFlattenedBefore) {
  Tensor x = RandomTensor<float>({2, 3, 4}, -2, 2, 41);
  const std::vector<double> xd = ToDoubles(x);
  OpTester axis1("Hardmax", 13);
  axis1.Input("x", x).Attr("axis", Attribute::Int(1));
  axis1.Output("y", {2, 3, 4}, ReferenceHardmax(xd, 2, 3, 4), 0, 0);
  axis1.Run();
  // Opset 11: axis 1 flattens [3, 4] into one row of 12.
  OpTester flat("Hardmax", 11);
  flat.Input("x", x).Attr("axis", Attribute::Int(1));
  flat.Output("y", {2, 3, 4}, ReferenceHardmax(xd, 2, 12, 1), 0, 0);
  flat.Run();
}

TEST(NnHardmax, TiesGoToTheFirstMaximum) {
  OpTester t("Hardmax", 13);
  t.Input("x", Tensor::FromVector<float>({1, 3, 3, 2, 5, 5}, {2, 3}));
  t.Output("y", {2, 3}, {0, 1, 0, 0, 1, 0}, 0, 0);
  t.Run();
}

// ---- LpPool ----

TEST(NnLpPool, PaddedStridedWindowsMatchFloat64) {
  Tensor x = RandomTensor<float>({2, 3, 7, 6}, -2, 2, 42);
  const std::vector<double> xd = ToDoubles(x);
  for (int64_t p : {1, 2, 3}) {
    // kernel 3x3, stride 2, pads 1: out = (7 + 2 - 3) / 2 + 1 = 4, (6 + 2 - 3) / 2 + 1 = 3.
    std::vector<double> ref;
    for (int64_t plane = 0; plane < 6; ++plane)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 3; ++ow) {
          double sum = 0;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 3; ++kw) {
              const int64_t h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
              if (h < 0 || h >= 7 || w < 0 || w >= 6) continue;
              sum += std::pow(std::fabs(xd[(plane * 7 + h) * 6 + w]), static_cast<double>(p));
            }
          ref.push_back(std::pow(sum, 1.0 / static_cast<double>(p)));
        }
    OpTester t("LpPool", 18);
    t.Input("x", x)
        .Attr("kernel_shape", Attribute::Ints({3, 3}))
        .Attr("strides", Attribute::Ints({2, 2}))
        .Attr("pads", Attribute::Ints({1, 1, 1, 1}))
        .Attr("p", Attribute::Int(p));
    t.Output("y", {2, 3, 4, 3}, ref, 1e-5, 1e-6);
    SCOPED_TRACE("p = " + std::to_string(p));
    t.Run();
  }
}

TEST(NnLpPool, GlobalLpPoolIsTheNormOfEachPlane) {
  Tensor x = RandomTensor<double>({2, 3, 5, 4}, -2, 2, 43);
  const std::vector<double> xd = ToDoubles(x);
  std::vector<double> ref;
  for (int64_t plane = 0; plane < 6; ++plane) {
    double sum = 0;
    for (int64_t i = 0; i < 20; ++i) sum += std::pow(std::fabs(xd[plane * 20 + i]), 3.0);
    ref.push_back(std::cbrt(sum));
  }
  OpTester t("GlobalLpPool", 2);
  t.Input("x", x).Attr("p", Attribute::Int(3));
  t.Output("y", {2, 3, 1, 1}, ref, 1e-12, 1e-12);
  t.Run();
}

TEST(NnLpPool, NonPositivePIsAnError) {
  OpTester t("LpPool", 18);
  t.Input("x", RandomTensor<float>({1, 1, 4, 4}, -1, 1, 44))
      .Attr("kernel_shape", Attribute::Ints({2, 2}))
      .Attr("p", Attribute::Int(0));
  t.Output("y", {1, 1, 3, 3}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'p' must be >= 1"), std::string::npos) << r.status().message();
}

// ---- Col2Im ----

TEST(NnCol2Im, DilatedStridedPaddedBlocksMatchFloat64) {
  // image 6x7, block 2x3, dilation (2, 1), stride (1, 2), pads (1, 0, 0, 1):
  // blocks (6 + 1 + 0 - 3) / 1 + 1 = 5 rows, (7 + 0 + 1 - 3) / 2 + 1 = 3 columns.
  const int64_t N = 2, C = 3, H = 6, W = 7, bh = 2, bw = 3, nh = 5, nw = 3;
  Tensor x = RandomTensor<float>({N, C * bh * bw, nh * nw}, -1, 1, 45);
  const std::vector<double> xd = ToDoubles(x);
  std::vector<double> ref(static_cast<size_t>(N * C * H * W), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t kh = 0; kh < bh; ++kh)
        for (int64_t kw = 0; kw < bw; ++kw)
          for (int64_t i = 0; i < nh; ++i)
            for (int64_t j = 0; j < nw; ++j) {
              const int64_t h = i * 1 - 1 + kh * 2, w = j * 2 - 0 + kw * 1;
              if (h < 0 || h >= H || w < 0 || w >= W) continue;
              const int64_t row = (n * C + c) * bh * bw + kh * bw + kw;
              ref[((n * C + c) * H + h) * W + w] += xd[row * nh * nw + i * nw + j];
            }
  OpTester t("Col2Im", 18);
  t.Input("x", x)
      .Input("image_shape", Tensor::FromVector<int64_t>({H, W}, {2}))
      .Input("block_shape", Tensor::FromVector<int64_t>({bh, bw}, {2}))
      .Attr("dilations", Attribute::Ints({2, 1}))
      .Attr("strides", Attribute::Ints({1, 2}))
      .Attr("pads", Attribute::Ints({1, 0, 0, 1}));
  t.Output("y", {N, C, H, W}, ref, 1e-5, 1e-6);
  t.Run();
}

TEST(NnCol2Im, WrongNumberOfBlockPositionsIsAnError) {
  OpTester t("Col2Im", 18);
  t.Input("x", RandomTensor<float>({1, 4, 10}, -1, 1, 46))
      .Input("image_shape", Tensor::FromVector<int64_t>({4, 4}, {2}))
      .Input("block_shape", Tensor::FromVector<int64_t>({2, 2}, {2}));
  t.Output("y", {1, 1, 4, 4}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must be the number of block positions, 9"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace tob::testing
