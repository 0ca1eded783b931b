// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv against int64 / float64 references on
// random data with the extremes: broadcast batches and 1-D operands, per-tensor and per-row /
// per-column / per-channel zero points and scales, padding with a non-zero input zero point,
// strides, dilations, groups, 1-D and 3-D convolutions; and their named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "op_tester.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::ToDoubles;

// Random int8 / uint8 values, a fifth of them at the type's ends.
template <typename T>
Tensor Bytes(const Shape& shape, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(std::is_signed_v<T> ? -128 : 0, std::is_signed_v<T> ? 127 : 255), pick(0, 9);
  std::vector<T> v(static_cast<size_t>(NumElements(shape)));
  for (auto& x : v) {
    const int p = pick(gen);
    x = static_cast<T>(p == 0 ? (std::is_signed_v<T> ? -128 : 0) : p == 1 ? (std::is_signed_v<T> ? 127 : 255) : d(gen));
  }
  return Tensor::FromVector<T>(v, shape);
}

double RoundHalfEven(double v) {
  const double f = std::floor(v), d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0 ? f : f + 1;
}

// int64 matmul of 2-D slices with per-row / per-column zero points.
std::vector<double> MatMulRef(const std::vector<double>& a, const std::vector<double>& b, int64_t batch_a,
                              int64_t batch_b, int64_t M, int64_t N, int64_t K, const std::vector<double>& za,
                              const std::vector<double>& zb) {
  const int64_t batch = std::max(batch_a, batch_b);
  std::vector<double> y(static_cast<size_t>(batch * M * N));
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int64_t s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double av = a[((batch_a == 1 ? 0 : i) * M + m) * K + k],
                       bv = b[((batch_b == 1 ? 0 : i) * K + k) * N + n];
          const double zam = za.size() == 1 ? za[0] : za[m], zbn = zb.size() == 1 ? zb[0] : zb[n];
          s += static_cast<int64_t>((av - zam) * (bv - zbn));
        }
        y[(i * M + m) * N + n] = static_cast<double>(s);
      }
  return y;
}

TEST(MatMulInteger, AllSignPairsBatchesAndZeroPoints) {
  const int64_t M = 5, N = 37, K = 19;
  for (int combo = 0; combo < 4; ++combo) {
    SCOPED_TRACE(combo);
    const bool as = combo & 1, bs = combo & 2;
    Tensor a = as ? Bytes<int8_t>({3, M, K}, 1) : Bytes<uint8_t>({3, M, K}, 1);
    Tensor b = bs ? Bytes<int8_t>({K, N}, 2) : Bytes<uint8_t>({K, N}, 2);
    // Per-row A zero points (the range's ends among them), per-column B zero points.
    Tensor za = as ? Bytes<int8_t>({M}, 3) : Bytes<uint8_t>({M}, 3);
    Tensor zb = bs ? Bytes<int8_t>({N}, 4) : Bytes<uint8_t>({N}, 4);
    const auto y = MatMulRef(ToDoubles(a), ToDoubles(b), 3, 1, M, N, K, ToDoubles(za), ToDoubles(zb));
    OpTester("MatMulInteger", 10)
        .Input("a", a)
        .Input("b", b)
        .Input("za", za)
        .Input("zb", zb)
        .Output("y", {3, M, N}, y, 0, 0)
        .Run();
    // Scalar zero points and none.
    Tensor za1 = as ? Tensor::FromVector<int8_t>({-128}, {}) : Tensor::FromVector<uint8_t>({255}, {});
    const auto y1 = MatMulRef(ToDoubles(a), ToDoubles(b), 3, 1, M, N, K, ToDoubles(za1), {0});
    OpTester("MatMulInteger", 10).Input("a", a).Input("b", b).Input("za", za1).Output("y", {3, M, N}, y1, 0, 0).Run();
  }
}

TEST(MatMulInteger, BroadcastBatchesPerBatchZeroPointsAndVectors) {
  // A [2, 1, 3, 8] x B [4, 8, 5]: batches broadcast to [2, 4]; A's zero points [2, 1, 3, 1].
  Tensor a = Bytes<uint8_t>({2, 1, 3, 8}, 5), b = Bytes<int8_t>({4, 8, 5}, 6);
  Tensor za = Bytes<uint8_t>({2, 1, 3, 1}, 7), zb = Tensor::FromVector<int8_t>({-7}, {1});
  const auto av = ToDoubles(a), bv = ToDoubles(b), zav = ToDoubles(za);
  std::vector<double> y;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t n = 0; n < 5; ++n) {
          double s = 0;
          for (int64_t k = 0; k < 8; ++k)
            s += (av[(i * 3 + m) * 8 + k] - zav[i * 3 + m]) * (bv[(j * 8 + k) * 5 + n] + 7);
          y.push_back(s);
        }
  OpTester("MatMulInteger", 10)
      .Input("a", a)
      .Input("b", b)
      .Input("za", za)
      .Input("zb", zb)
      .Output("y", {2, 4, 3, 5}, y, 0, 0)
      .Run();
  // 1-D A: [K] x [K, N] -> [N].
  Tensor v = Bytes<int8_t>({8}, 8), w = Bytes<int8_t>({8, 3}, 9);
  OpTester("MatMulInteger", 10)
      .Input("a", v)
      .Input("b", w)
      .Output("y", {3}, MatMulRef(ToDoubles(v), ToDoubles(w), 1, 1, 1, 3, 8, {0}, {0}), 0, 0)
      .Run();
}

// QLinearMatMul: sum * (a_scale * b_scale / y_scale) + y_zp, rounded half to even, saturated; the
// multiplier in the scales' type (float32 here, float16 below), the product in float64.
TEST(QLinearMatMul, RequantizesLikeTheReference) {
  const int64_t M = 6, N = 9, K = 33;
  for (bool out_signed : {false, true}) {
    Tensor a = Bytes<uint8_t>({M, K}, 11), b = Bytes<int8_t>({K, N}, 12);
    const float as = 0.0123f, ys = out_signed ? 0.9f : 1.7f;
    Tensor bsc = Tensor::FromVector<float>({0.011f, 0.02f, 0.013f, 0.0071f, 0.05f, 0.009f, 0.03f, 0.001f, 0.017f}, {N});
    Tensor bz = Bytes<int8_t>({N}, 13);
    const double yz = out_signed ? -3 : 129;
    const auto c = MatMulRef(ToDoubles(a), ToDoubles(b), 1, 1, M, N, K, {117}, ToDoubles(bz));
    std::vector<double> expected;
    const auto bsv = ToDoubles(bsc);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float mult = static_cast<float>(as * static_cast<float>(bsv[n])) / ys;
        const double lo = out_signed ? -128 : 0, hi = out_signed ? 127 : 255;
        expected.push_back(std::clamp(RoundHalfEven(c[m * N + n] * static_cast<double>(mult) + yz), lo, hi));
      }
    OpTester("QLinearMatMul", 10)
        .Input("a", a)
        .Input("as", Tensor::FromVector<float>({as}, {}))
        .Input("az", Tensor::FromVector<uint8_t>({117}, {}))
        .Input("b", b)
        .Input("bs", bsc)
        .Input("bz", bz)
        .Input("ys", Tensor::FromVector<float>({ys}, {}))
        .Input("yz", out_signed ? Tensor::FromVector<int8_t>({-3}, {}) : Tensor::FromVector<uint8_t>({129}, {}))
        .Output("y", {M, N}, expected, 0, 0)
        .Run();
  }
  // float16 scales (opset 21): the multiplier is computed in float16.
  Tensor a = Bytes<int8_t>({2, 3, 16}, 14), b = Bytes<int8_t>({2, 16, 4}, 15);
  const Float16 as(0.0066f), bs(0.00705f), ys(0.0107f);
  const auto c = MatMulRef(ToDoubles(a), ToDoubles(b), 2, 2, 3, 4, 16, {-14}, {-13});
  const float prod = static_cast<float>(Float16(static_cast<float>(as) * static_cast<float>(bs)));
  const double mult = static_cast<float>(Float16(prod / static_cast<float>(ys)));
  std::vector<double> expected;
  for (double v : c) expected.push_back(std::clamp(RoundHalfEven(v * mult - 9), -128.0, 127.0));
  OpTester("QLinearMatMul", 21)
      .Input("a", a)
      .Input("as", Tensor::FromVector<Float16>({as}, {1}))
      .Input("az", Tensor::FromVector<int8_t>({-14}, {1}))
      .Input("b", b)
      .Input("bs", Tensor::FromVector<Float16>({bs}, {1}))
      .Input("bz", Tensor::FromVector<int8_t>({-13}, {1}))
      .Input("ys", Tensor::FromVector<Float16>({ys}, {1}))
      .Input("yz", Tensor::FromVector<int8_t>({-9}, {1}))
      .Output("y", {2, 3, 4}, expected, 0, 0)
      .Run();
}

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> strides, dilations, pads;
  int64_t group;
};

// int64 direct convolution, any spatial rank; padded taps read the zero point (contribute 0).
std::vector<double> ConvRef(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w, double xz,
                            const std::vector<double>& wz, Shape* out_shape) {
  const size_t r = c.x.size() - 2;
  const int64_t N = c.x[0], C = c.x[1], M = c.w[0], Cg = C / c.group, Mg = M / c.group;
  Shape out{N, M};
  for (size_t d = 0; d < r; ++d)
    out.push_back((c.x[2 + d] + c.pads[d] + c.pads[r + d] - c.dilations[d] * (c.w[2 + d] - 1) - 1) / c.strides[d] + 1);
  *out_shape = out;
  std::vector<double> y(static_cast<size_t>(NumElements(out)), 0);
  Shape spatial_out(out.begin() + 2, out.end()), kernel(c.w.begin() + 2, c.w.end());
  const int64_t os = NumElements(spatial_out), ks = NumElements(kernel),
                is = NumElements(Shape(c.x.begin() + 2, c.x.end()));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o = 0; o < os; ++o) {
        int64_t s = 0;
        const int64_t g = m / Mg;
        for (int64_t cg = 0; cg < Cg; ++cg)
          for (int64_t k = 0; k < ks; ++k) {
            int64_t off = 0, orem = o, krem = k;
            bool inside = true;
            std::vector<int64_t> oi(r), ki(r);
            for (size_t d = r; d-- > 0;) {
              oi[d] = orem % spatial_out[d], orem /= spatial_out[d];
              ki[d] = krem % kernel[d], krem /= kernel[d];
            }
            for (size_t d = 0; d < r; ++d) {
              const int64_t pos = oi[d] * c.strides[d] - c.pads[d] + ki[d] * c.dilations[d];
              inside = inside && pos >= 0 && pos < c.x[2 + d];
              off = off * c.x[2 + d] + pos;
            }
            const double xv = inside ? x[(n * C + g * Cg + cg) * is + off] : xz;
            const double wv = w[(m * Cg + cg) * ks + k];
            s += static_cast<int64_t>((xv - xz) * (wv - (wz.size() == 1 ? wz[0] : wz[m])));
          }
        y[(n * M + m) * os + o] = static_cast<double>(s);
      }
  return y;
}

const ConvCase kConvCases[] = {
    {{2, 4, 9, 7}, {6, 2, 3, 3}, {2, 1}, {1, 2}, {1, 2, 0, 1}, 2},  // 2-D, group 2, strides, dilations, pads
    {{1, 3, 11}, {5, 3, 4}, {3}, {1}, {2, 2}, 1},                   // 1-D
    {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 1, 1}, {1, 0, 1, 0, 1, 1}, 1},  // 3-D
    {{2, 8, 5, 5}, {8, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 8},                    // depthwise
    {{1, 16, 6, 6}, {24, 16, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1},                 // pointwise
};

TEST(ConvInteger, ShapesGroupsAndPerChannelZeroPoints) {
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(ShapeToString(c.x) + " * " + ShapeToString(c.w));
    for (bool signed_x : {false, true}) {
      Tensor x = signed_x ? Bytes<int8_t>(c.x, 21) : Bytes<uint8_t>(c.x, 21);
      Tensor w = Bytes<int8_t>(c.w, 22);
      Tensor xz = signed_x ? Tensor::FromVector<int8_t>({-128}, {}) : Tensor::FromVector<uint8_t>({200}, {});
      Tensor wz = Bytes<int8_t>({c.w[0]}, 23);
      Shape out;
      const auto y = ConvRef(c, ToDoubles(x), ToDoubles(w), ToDoubles(xz)[0], ToDoubles(wz), &out);
      OpTester("ConvInteger", 10)
          .Attr("strides", Attribute::Ints(c.strides))
          .Attr("dilations", Attribute::Ints(c.dilations))
          .Attr("pads", Attribute::Ints(c.pads))
          .Attr("group", Attribute::Int(c.group))
          .Input("x", x)
          .Input("w", w)
          .Input("xz", xz)
          .Input("wz", wz)
          .Output("y", out, y, 0, 0)
          .Run();
    }
  }
}

TEST(QLinearConv, BiasPerChannelScalesAndRequantization) {
  const ConvCase& c = kConvCases[0];
  Tensor x = Bytes<uint8_t>(c.x, 31), w = Bytes<int8_t>(c.w, 32);
  Tensor wz = Tensor::FromVector<int8_t>({0, 1, -1, 0, 127, -128}, {6});
  std::vector<float> ws{0.01f, 0.02f, 0.005f, 0.013f, 0.007f, 0.03f};
  std::vector<int32_t> bias{100, -2000, 0, 7, 123456, -5};
  const float xs = 0.05f, ys = 0.3f;
  Shape out;
  auto acc = ConvRef(c, ToDoubles(x), ToDoubles(w), 17, ToDoubles(wz), &out);
  const int64_t os = NumElements(out) / (out[0] * out[1]);
  std::vector<double> expected;
  for (size_t i = 0; i < acc.size(); ++i) {
    const int64_t m = (static_cast<int64_t>(i) / os) % out[1];
    const float mult = static_cast<float>(xs * ws[m]) / ys;
    expected.push_back(std::clamp(RoundHalfEven((acc[i] + bias[m]) * static_cast<double>(mult) + 3), 0.0, 255.0));
  }
  OpTester("QLinearConv", 10)
      .Attr("strides", Attribute::Ints(c.strides))
      .Attr("dilations", Attribute::Ints(c.dilations))
      .Attr("pads", Attribute::Ints(c.pads))
      .Attr("group", Attribute::Int(c.group))
      .Input("x", x)
      .Input("xs", Tensor::FromVector<float>({xs}, {}))
      .Input("xz", Tensor::FromVector<uint8_t>({17}, {}))
      .Input("w", w)
      .Input("ws", Tensor::FromVector<float>(ws, {6}))
      .Input("wz", wz)
      .Input("ys", Tensor::FromVector<float>({ys}, {}))
      .Input("yz", Tensor::FromVector<uint8_t>({3}, {}))
      .Input("b", Tensor::FromVector<int32_t>(bias, {6}))
      .Output("y", out, expected, 0, 0)
      .Run();
}

std::string ErrorOf(OpTester& t) {
  auto r = t.Compute();
  return r.ok() ? std::string("(no error)") : r.status().ToString();
}

TEST(QuantizedOps, NamedErrors) {
  {
    OpTester t("MatMulInteger", 10);
    t.Input("a", Bytes<uint8_t>({4, 3}, 1)).Input("b", Bytes<uint8_t>({3, 2}, 2));
    t.Input("za", Bytes<uint8_t>({3}, 3)).Output("y", {4, 2}, {});
    EXPECT_NE(ErrorOf(t).find("a_zero_point has shape [3]; expected one value or one per row of A [4, 3]"),
              std::string::npos)
        << ErrorOf(t);
  }
  {
    OpTester t("MatMulInteger", 10);
    t.Input("a", Bytes<uint8_t>({4, 3}, 1)).Input("b", Bytes<int8_t>({3, 2}, 2));
    t.Input("za", Bytes<int8_t>({1}, 3)).Output("y", {4, 2}, {});
    EXPECT_NE(ErrorOf(t).find("must have the same dtype"), std::string::npos) << ErrorOf(t);
  }
  {
    OpTester t("ConvInteger", 10);
    t.Input("x", Bytes<uint8_t>({1, 2, 4, 4}, 1)).Input("w", Bytes<uint8_t>({3, 2, 2, 2}, 2));
    t.Input("xz", Bytes<uint8_t>({2}, 3)).Output("y", {1, 3, 3, 3}, {});
    EXPECT_NE(ErrorOf(t).find("x_zero_point must be one uint8 value"), std::string::npos) << ErrorOf(t);
  }
  {
    OpTester t("QLinearConv", 10);
    t.Input("x", Bytes<uint8_t>({1, 2, 4, 4}, 1)).Input("xs", Tensor::FromVector<float>({1.f}, {}));
    t.Input("xz", Tensor::FromVector<uint8_t>({0}, {})).Input("w", Bytes<int8_t>({3, 2, 2, 2}, 2));
    t.Input("ws", Tensor::FromVector<float>({1.f, 2.f}, {2})).Input("wz", Tensor::FromVector<int8_t>({0}, {}));
    t.Input("ys", Tensor::FromVector<float>({1.f}, {})).Input("yz", Tensor::FromVector<uint8_t>({0}, {}));
    t.Output("y", {1, 3, 3, 3}, {});
    EXPECT_NE(ErrorOf(t).find("w_scale must be one value or one per output channel (3), got [2]"), std::string::npos)
        << ErrorOf(t);
  }
}

}  // namespace
}  // namespace tob
