// The ONNX standard's optimizers (ai.onnx.preview.training: Adagrad, Adam, Momentum) against
// float64 references written here from the spec's formulas, on random data: several tensors per
// node, the first step (T = 0) and later ones, every attribute away from its default, float64
// where the op allows it, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

const char* kDomain = "ai.onnx.preview.training";

std::vector<double> Vals(const Tensor& t) { return ToDoubles(t); }

TEST(TrainingPreviewOptimizers, AdagradTwoTensorsWithDecay) {
  for (int64_t step : {0, 5}) {
    const double r = 0.3, decay = 0.1, eps = 1e-3, norm = 0.02;
    Tensor x1 = RandomTensor<float>({3, 2}, -2, 2, 1), x2 = RandomTensor<float>({4}, -2, 2, 2);
    Tensor g1 = RandomTensor<float>({3, 2}, -1, 1, 3), g2 = RandomTensor<float>({4}, -1, 1, 4);
    Tensor h1 = RandomTensor<float>({3, 2}, 0.1, 2, 5), h2 = RandomTensor<float>({4}, 0.1, 2, 6);
    OpTester t("Adagrad", 1, kDomain);
    t.Attr("decay_factor", Attribute::Float(static_cast<float>(decay)))
        .Attr("epsilon", Attribute::Float(static_cast<float>(eps)))
        .Attr("norm_coefficient", Attribute::Float(static_cast<float>(norm)));
    t.Input("R", Tensor::FromVector<float>({static_cast<float>(r)}, {}));
    t.Input("T", Tensor::FromVector<int64_t>({step}, {}));
    t.Input("X1", x1).Input("X2", x2).Input("G1", g1).Input("G2", g2).Input("H1", h1).Input("H2", h2);
    const Tensor* xs[] = {&x1, &x2};
    const Tensor* gs[] = {&g1, &g2};
    const Tensor* hs[] = {&h1, &h2};
    std::vector<double> xn[2], hn[2];
    for (int k = 0; k < 2; ++k) {
      const std::vector<double> x = Vals(*xs[k]), g = Vals(*gs[k]), h = Vals(*hs[k]);
      const double lr = static_cast<double>(static_cast<float>(r)) /
                        (1 + static_cast<double>(step) * static_cast<double>(static_cast<float>(decay)));
      for (size_t i = 0; i < x.size(); ++i) {
        const double gr = static_cast<double>(static_cast<float>(norm)) * x[i] + g[i];
        const double hh = h[i] + gr * gr;
        hn[k].push_back(hh);
        xn[k].push_back(x[i] - lr * gr / (std::sqrt(hh) + static_cast<double>(static_cast<float>(eps))));
      }
    }
    t.Output("X1_new", {3, 2}, xn[0], 1e-5, 1e-6).Output("X2_new", {4}, xn[1], 1e-5, 1e-6);
    t.Output("H1_new", {3, 2}, hn[0], 1e-5, 1e-6).Output("H2_new", {4}, hn[1], 1e-5, 1e-6);
    SCOPED_TRACE("T = " + std::to_string(step));
    t.Run();
  }
}

TEST(TrainingPreviewOptimizers, MomentumStandardAndNesterovInFloat64) {
  for (const char* mode : {"standard", "nesterov"})
    for (int64_t step : {0, 3}) {
      const double r = 0.05, alpha = 0.9, beta = 0.3, norm = 0.01;
      Tensor x = RandomTensor<double>({5}, -2, 2, 10), g = RandomTensor<double>({5}, -1, 1, 11);
      Tensor v = RandomTensor<double>({5}, -1, 1, 12);
      const std::vector<double> xv = Vals(x), gv = Vals(g), vv = Vals(v);
      std::vector<double> xn, vn;
      const double a = static_cast<float>(alpha), b = static_cast<float>(beta), nc = static_cast<float>(norm);
      for (size_t i = 0; i < xv.size(); ++i) {
        const double gr = nc * xv[i] + gv[i];
        const double vnew = a * vv[i] + (step > 0 ? b : 1.0) * gr;
        vn.push_back(vnew);
        xn.push_back(std::string(mode) == "standard" ? xv[i] - r * vnew : xv[i] - r * (gr + a * vnew));
      }
      OpTester t("Momentum", 1, kDomain);
      t.Attr("alpha", Attribute::Float(static_cast<float>(alpha)))
          .Attr("beta", Attribute::Float(static_cast<float>(beta)));
      t.Attr("norm_coefficient", Attribute::Float(static_cast<float>(norm))).Attr("mode", Attribute::String(mode));
      t.Input("R", Tensor::FromVector<double>({r}, {})).Input("T", Tensor::FromVector<int64_t>({step}, {}));
      t.Input("X", x).Input("G", g).Input("V", v);
      t.Output("X_new", {5}, xn, 1e-12, 1e-12).Output("V_new", {5}, vn, 1e-12, 1e-12);
      SCOPED_TRACE(std::string(mode) + " T = " + std::to_string(step));
      t.Run();
    }
}

TEST(TrainingPreviewOptimizers, AdamBiasCorrectionAndBothNormCoefficients) {
  for (int64_t step : {0, 4}) {
    const double r = 0.1, alpha = 0.8, beta = 0.95, eps = 1e-4, norm = 0.01, post = 0.05;
    Tensor x = RandomTensor<float>({2, 3}, -2, 2, 20), g = RandomTensor<float>({2, 3}, -1, 1, 21);
    Tensor v = RandomTensor<float>({2, 3}, -1, 1, 22), h = RandomTensor<float>({2, 3}, 0.01, 1, 23);
    const std::vector<double> xv = Vals(x), gv = Vals(g), vv = Vals(v), hv = Vals(h);
    const double a = static_cast<float>(alpha), b = static_cast<float>(beta), e = static_cast<float>(eps);
    const double nc = static_cast<float>(norm), np = static_cast<float>(post), rr = static_cast<float>(r);
    std::vector<double> xn, vn, hn;
    for (size_t i = 0; i < xv.size(); ++i) {
      const double gr = nc * xv[i] + gv[i];
      const double vnew = a * vv[i] + (1 - a) * gr, hnew = b * hv[i] + (1 - b) * gr * gr;
      const double lr = step > 0 ? rr * std::sqrt(1 - std::pow(b, step)) / (1 - std::pow(a, step)) : rr;
      vn.push_back(vnew);
      hn.push_back(hnew);
      xn.push_back((1 - np) * (xv[i] - lr * vnew / (std::sqrt(hnew) + e)));
    }
    OpTester t("Adam", 1, kDomain);
    t.Attr("alpha", Attribute::Float(static_cast<float>(alpha)))
        .Attr("beta", Attribute::Float(static_cast<float>(beta)));
    t.Attr("epsilon", Attribute::Float(static_cast<float>(eps)))
        .Attr("norm_coefficient", Attribute::Float(static_cast<float>(norm)))
        .Attr("norm_coefficient_post", Attribute::Float(static_cast<float>(post)));
    t.Input("R", Tensor::FromVector<float>({static_cast<float>(r)}, {}))
        .Input("T", Tensor::FromVector<int64_t>({step}, {}));
    t.Input("X", x).Input("G", g).Input("V", v).Input("H", h);
    t.Output("X_new", {2, 3}, xn, 1e-5, 1e-6).Output("V_new", {2, 3}, vn, 1e-5, 1e-6);
    t.Output("H_new", {2, 3}, hn, 1e-5, 1e-6);
    SCOPED_TRACE("T = " + std::to_string(step));
    t.Run();
  }
}

TEST(TrainingPreviewOptimizers, MalformedNodesAreNamedErrors) {
  OpTester count("Adagrad", 1, kDomain);  // R, T and 4 tensors: not a multiple of 3
  count.Input("R", Tensor::FromVector<float>({0.1f}, {})).Input("T", Tensor::FromVector<int64_t>({0}, {}));
  for (const char* n : {"a", "b", "c", "d"}) count.Input(n, RandomTensor<float>({2}, -1, 1, 30));
  count.Output("o1", {2}, {}).Output("o2", {2}, {});
  auto r1 = count.Compute();
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("3 inputs per optimized tensor"), std::string::npos) << r1.status().message();

  OpTester shape("Momentum", 1, kDomain);
  shape.Attr("alpha", Attribute::Float(0.9f)).Attr("beta", Attribute::Float(0.1f));
  shape.Attr("norm_coefficient", Attribute::Float(0.f)).Attr("mode", Attribute::String("standard"));
  shape.Input("R", Tensor::FromVector<float>({0.1f}, {})).Input("T", Tensor::FromVector<int64_t>({1}, {}));
  shape.Input("X", RandomTensor<float>({3}, -1, 1, 31)).Input("G", RandomTensor<float>({4}, -1, 1, 32));
  shape.Input("V", RandomTensor<float>({3}, -1, 1, 33)).Output("X_new", {3}, {}).Output("V_new", {3}, {});
  auto r2 = shape.Compute();
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("must have the shape of its tensor"), std::string::npos)
      << r2.status().message();

  OpTester mode("Momentum", 1, kDomain);
  mode.Attr("alpha", Attribute::Float(0.9f)).Attr("beta", Attribute::Float(0.1f));
  mode.Attr("norm_coefficient", Attribute::Float(0.f)).Attr("mode", Attribute::String("heavy-ball"));
  mode.Input("R", Tensor::FromVector<float>({0.1f}, {})).Input("T", Tensor::FromVector<int64_t>({1}, {}));
  mode.Input("X", RandomTensor<float>({3}, -1, 1, 31)).Input("G", RandomTensor<float>({3}, -1, 1, 32));
  mode.Input("V", RandomTensor<float>({3}, -1, 1, 33)).Output("X_new", {3}, {}).Output("V_new", {3}, {});
  auto r3 = mode.Compute();
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("'standard' or 'nesterov'"), std::string::npos) << r3.status().message();

  OpTester empty("Adagrad", 1, kDomain);  // R with two values
  empty.Input("R", Tensor::FromVector<float>({0.1f, 0.2f}, {2})).Input("T", Tensor::FromVector<int64_t>({0}, {}));
  empty.Input("X", RandomTensor<float>({3}, -1, 1, 31)).Input("G", RandomTensor<float>({3}, -1, 1, 32));
  empty.Input("H", RandomTensor<float>({3}, 0.1, 1, 33)).Output("X_new", {3}, {}).Output("H_new", {3}, {});
  auto r4 = empty.Compute();
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("R and T must hold one value each"), std::string::npos) << r4.status().message();
}

}  // namespace
}  // namespace tob::testing
