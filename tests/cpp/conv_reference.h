// The float64 references of the convolution tests (conv_fused_test.cc, conv_packed_test.cc,
// conv_nchwc_test.cc, conv_implicit_test.cc): the naive 2-D window sum over groups, strides,
// dilations and pads, FusedConv's activations, and seeded random operands.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::conv_testing {

using testing::ToDoubles;

// n floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& e : v) e = dist(gen);
  return v;
}

struct Conv2DCase {
  Shape x, w;
  std::vector<int64_t> strides{1, 1}, dilations{1, 1}, pads{0, 0, 0, 0};  // pads: top, left, bottom, right
  int64_t group = 1;
};

inline std::vector<double> RefConv2D(const Conv2DCase& c, const Tensor& x, const Tensor& w, const Tensor* b,
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

inline double RefActivation(const std::string& act, const std::vector<float>& p, double v) {
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

}  // namespace tob::conv_testing
