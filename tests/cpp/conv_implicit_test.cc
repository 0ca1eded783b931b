// The implicit-GEMM convolution's pieces (conv_implicit.h), host-callable: that the phase planes
// and tap offsets reproduce im2col exactly (planes[koff[k] + q] == col^T[position, k] for every
// output position, any stride, dilation and pad), and that the register tile's sums match a float64
// product over the same operands, for every row count, both panel widths and a K split in two
// blocks. Whole sessions on this path are tests/cpp/conv_packed_test.cc (RunPacked runs each case
// with TOB_CONV_IMPLICIT=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "conv_reference.h"
#include "providers/cpu/nn/conv_implicit.h"

namespace tob {
namespace {

struct Geometry2D {
  int64_t C, H, W, KH, KW, sh, sw, dh, dw, pt, pl, pb, pr;
};

WindowGeometry Make(const Geometry2D& d) {
  WindowGeometry g;
  g.in = {d.H, d.W};
  g.kernel = {d.KH, d.KW};
  g.strides = {d.sh, d.sw};
  g.dilations = {d.dh, d.dw};
  g.pad_begin = {d.pt, d.pl};
  g.pad_end = {d.pb, d.pr};
  g.out = {(d.H + d.pt + d.pb - (d.KH - 1) * d.dh - 1) / d.sh + 1,
           (d.W + d.pl + d.pr - (d.KW - 1) * d.dw - 1) / d.sw + 1};
  return g;
}

using conv_testing::Random;

TEST(ConvImplicit, PhasePlanesAreIm2Col) {
  const Geometry2D cases[] = {
      {4, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  {3, 23, 20, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},
      {5, 14, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {2, 17, 19, 3, 2, 3, 2, 2, 3, 0, 2, 1, 0},
      {3, 8, 10, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},  {2, 10, 9, 5, 3, 1, 3, 1, 2, 4, 0, 0, 5},
  };
  for (const Geometry2D& d : cases) {
    SCOPED_TRACE(::testing::Message() << "C " << d.C << " H " << d.H << " W " << d.W << " k " << d.KH << "x" << d.KW
                                      << " s " << d.sh << "," << d.sw << " d " << d.dh << "," << d.dw);
    const WindowGeometry g = Make(d);
    const conv_implicit::Layout l = conv_implicit::MakeLayout(g, d.C);
    const std::vector<int32_t> koff = conv_implicit::KernelOffsets(g, l, d.C);
    ASSERT_EQ(static_cast<int64_t>(koff.size()), d.C * d.KH * d.KW);
    const std::vector<float> x = Random(static_cast<size_t>(d.C * d.H * d.W), 7);
    // NaN everywhere first: every float the planes are read at must have been written.
    std::vector<float> planes(static_cast<size_t>(l.floats), std::nanf(""));
    conv_implicit::FillPhasePlanes(x.data(), g, l, 0, 1, planes.data());
    conv_implicit::FillPhasePlanes(x.data(), g, l, 1, d.C, planes.data());
    std::fill(planes.begin() + d.C * l.sh * l.sw * l.plane, planes.end(), 0.f);
    for (int64_t c = 0; c < d.C; ++c)
      for (int64_t kh = 0; kh < d.KH; ++kh)
        for (int64_t kw = 0; kw < d.KW; ++kw) {
          const int64_t k = (c * d.KH + kh) * d.KW + kw;
          for (int64_t oh = 0; oh < g.out[0]; ++oh)
            for (int64_t ow = 0; ow < g.out[1]; ++ow) {
              const int64_t ih = oh * d.sh - d.pt + kh * d.dh, iw = ow * d.sw - d.pl + kw * d.dw;
              const float want = ih >= 0 && ih < d.H && iw >= 0 && iw < d.W ? x[(c * d.H + ih) * d.W + iw] : 0.f;
              ASSERT_EQ(planes[koff[k] + oh * l.Wq + ow], want) << "c " << c << " kh " << kh << " kw " << kw;
            }
        }
    // Every position the tiles read (the whole grid, rounded up to tiles) is inside the buffer and finite.
    for (int32_t o : koff) {
      ASSERT_LE(o + l.rows, l.floats);
      for (int64_t q = 0; q < l.rows; ++q) ASSERT_TRUE(std::isfinite(planes[o + q]));
    }
    EXPECT_GE(l.Wq, g.out[1]);
    EXPECT_EQ(l.positions, (g.out[0] - 1) * l.Wq + g.out[1]);
    EXPECT_GE(l.rows, l.positions);
  }
}

TEST(ConvImplicit, TileMatchesFloat64) {
  const int64_t K = 301, span = 400;
  const std::vector<float> p = Random(static_cast<size_t>(span + conv_implicit::kTileRows), 11);
  std::vector<int32_t> koff(static_cast<size_t>(K));
  std::mt19937 gen(5);
  for (int32_t& o : koff) o = static_cast<int32_t>(gen() % span);
  for (int width : {16, 32}) {
    // A packed panel: 64-byte aligned rows of `width` floats.
    std::vector<float> raw = Random(static_cast<size_t>(K * width + 16), 13 + width);
    float* panel = raw.data();
    while (reinterpret_cast<uintptr_t>(panel) % 64 != 0) ++panel;
    for (int nw : {width, width - 5}) {
      for (int rows = 1; rows <= conv_implicit::kTileRows; ++rows) {
        SCOPED_TRACE(::testing::Message() << "width " << width << " nw " << nw << " rows " << rows);
        const int64_t ldo = 40;
        // The sum in two K blocks, the second accumulated onto the first (as conv.cc runs them).
        const int64_t k1 = 173;
        std::vector<float> got(static_cast<size_t>(rows * ldo), -7.f), scalar(got);
        conv_implicit::Tile(rows, width, p.data(), koff.data(), k1, panel, nw, got.data(), ldo, false);
        conv_implicit::Tile(rows, width, p.data(), koff.data() + k1, K - k1, panel + k1 * width, nw, got.data(), ldo,
                            true);
        conv_implicit::TileScalar(rows, width, p.data(), koff.data(), K, panel, nw, scalar.data(), ldo, false);
        for (int i = 0; i < rows; ++i)
          for (int j = 0; j < ldo; ++j) {
            const size_t at = static_cast<size_t>(i * ldo + j);
            if (j >= nw) {
              EXPECT_EQ(got[at], -7.f) << "wrote past nw at " << i << "," << j;
              continue;
            }
            double want = 0;
            for (int64_t k = 0; k < K; ++k) want += static_cast<double>(p[koff[k] + i]) * panel[k * width + j];
            EXPECT_NEAR(got[at], want, 1e-4) << i << "," << j;
            EXPECT_NEAR(scalar[at], want, 1e-4) << i << "," << j;
          }
      }
    }
  }
}

}  // namespace
}  // namespace tob
