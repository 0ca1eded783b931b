// RNN, GRU and LSTM against a float64 loop reference written here from the ONNX spec (independent
// of math/recurrent_math.h), on random data: what onnx's node tests leave out - sequence_lens
// (a zero length included), initial states, peepholes, clip, input_forget, linear_before_reset
// both ways, the activation list with alpha/beta (a different list per direction), layout 1,
// float64 and float16 - and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

struct Act {
  std::string name;
  double alpha = 0, beta = 0;
};

double Apply(const Act& a, double x) {
  // alpha and beta are float attributes: the reference uses the values the node carries. (Plain
  // locals: GCC 12 at -O3 dropped the float rounding when it was done in an aggregate
  // initialisation of an Act.)
  const double alpha = static_cast<float>(a.alpha), beta = static_cast<float>(a.beta);
  if (a.name == "Tanh") return std::tanh(x);
  if (a.name == "Sigmoid") return 1.0 / (1.0 + std::exp(-x));
  if (a.name == "Relu") return std::max(0.0, x);
  if (a.name == "LeakyRelu") return x >= 0 ? x : alpha * x;
  if (a.name == "HardSigmoid") return std::min(1.0, std::max(0.0, alpha * x + beta));
  if (a.name == "Softsign") return x / (1.0 + std::fabs(x));
  if (a.name == "Affine") return alpha * x + beta;
  if (a.name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1.0);
  if (a.name == "ScaledTanh") return alpha * std::tanh(beta * x);
  if (a.name == "Softplus") return std::log1p(std::exp(x));
  if (a.name == "ThresholdedRelu") return x >= alpha ? x : 0.0;
  ADD_FAILURE() << "reference has no activation " << a.name;
  return 0;
}

enum class Op { kRnn, kGru, kLstm };

struct Problem {
  Op op = Op::kRnn;
  int64_t S = 4, B = 3, I = 3, H = 4, dirs = 1;
  bool reverse = false;  // direction "reverse" (one direction)
  // layout-0 data, as doubles (the reference side): X [S, B, I], W [dirs, G H, I], R [dirs, G H, H],
  // bias [dirs, 2 G H] (empty: none), lens [B] (empty: none), h0 / c0 [dirs, B, H], P [dirs, 3 H].
  std::vector<double> x, w, r, bias, h0, c0, p;
  std::vector<int32_t> lens;
  std::vector<std::vector<Act>> acts;  // per direction
  double clip = std::numeric_limits<double>::infinity();
  bool linear_before_reset = false, input_forget = false;

  int64_t G() const { return op == Op::kRnn ? 1 : op == Op::kGru ? 3 : 4; }
};

struct Result {
  std::vector<double> y, yh, yc;  // layout 0: [S, dirs, B, H], [dirs, B, H]
};

Result Reference(const Problem& q) {
  const int64_t S = q.S, B = q.B, I = q.I, H = q.H, G = q.G();
  Result res;
  res.y.assign(S * q.dirs * B * H, 0.0);
  res.yh.assign(q.dirs * B * H, 0.0);
  res.yc.assign(q.dirs * B * H, 0.0);
  const double c_max = static_cast<float>(q.clip);  // a float attribute too
  auto clip = [&](double v) { return std::min(c_max, std::max(-c_max, v)); };
  for (int64_t d = 0; d < q.dirs; ++d) {
    const bool rev = q.reverse || d == 1;
    const double* W = q.w.data() + d * G * H * I;
    const double* R = q.r.data() + d * G * H * H;
    auto wb = [&](int64_t k) { return q.bias.empty() ? 0.0 : q.bias[d * 2 * G * H + k]; };
    auto rb = [&](int64_t k) { return q.bias.empty() ? 0.0 : q.bias[d * 2 * G * H + G * H + k]; };
    const std::vector<Act>& act = q.acts[d];
    for (int64_t b = 0; b < B; ++b) {
      std::vector<double> h(H), c(H);
      for (int64_t j = 0; j < H; ++j) {
        h[j] = q.h0.empty() ? 0.0 : q.h0[(d * B + b) * H + j];
        c[j] = q.c0.empty() ? 0.0 : q.c0[(d * B + b) * H + j];
      }
      const int64_t len = q.lens.empty() ? S : q.lens[b];
      for (int64_t t = 0; t < len; ++t) {
        const int64_t s = rev ? len - 1 - t : t;
        std::vector<double> xw(G * H, 0.0), hr(G * H, 0.0);
        for (int64_t k = 0; k < G * H; ++k) {
          for (int64_t i = 0; i < I; ++i) xw[k] += W[k * I + i] * q.x[(s * B + b) * I + i];
          for (int64_t j = 0; j < H; ++j) hr[k] += R[k * H + j] * h[j];
        }
        std::vector<double> hn(H), cn(H);
        for (int64_t j = 0; j < H; ++j) {
          if (q.op == Op::kRnn) {
            hn[j] = Apply(act[0], clip(xw[j] + hr[j] + wb(j) + rb(j)));
          } else if (q.op == Op::kLstm) {
            auto pre = [&](int64_t g) { return xw[g * H + j] + hr[g * H + j] + wb(g * H + j) + rb(g * H + j); };
            auto peep = [&](int64_t g) { return q.p.empty() ? 0.0 : q.p[d * 3 * H + g * H + j]; };
            const double ig = Apply(act[0], clip(pre(0) + peep(0) * c[j]));
            const double fg = q.input_forget ? 1.0 - ig : Apply(act[0], clip(pre(2) + peep(2) * c[j]));
            const double cc = Apply(act[1], clip(pre(3)));
            cn[j] = fg * c[j] + ig * cc;
            const double og = Apply(act[0], clip(pre(1) + peep(1) * cn[j]));
            hn[j] = og * Apply(act[2], cn[j]);
          }
        }
        if (q.op == Op::kGru) {
          std::vector<double> z(H), rr(H);
          for (int64_t j = 0; j < H; ++j) {
            z[j] = Apply(act[0], clip(xw[j] + hr[j] + wb(j) + rb(j)));
            rr[j] = Apply(act[0], clip(xw[H + j] + hr[H + j] + wb(H + j) + rb(H + j)));
          }
          for (int64_t j = 0; j < H; ++j) {
            double pre = xw[2 * H + j] + wb(2 * H + j);
            if (q.linear_before_reset) {
              pre += rr[j] * (hr[2 * H + j] + rb(2 * H + j));
            } else {
              double rh = 0;
              for (int64_t k = 0; k < H; ++k) rh += R[(2 * H + j) * H + k] * rr[k] * h[k];
              pre += rh + rb(2 * H + j);
            }
            hn[j] = (1 - z[j]) * Apply(act[1], clip(pre)) + z[j] * h[j];
          }
        }
        h = hn;
        if (q.op == Op::kLstm) c = cn;
        for (int64_t j = 0; j < H; ++j) res.y[((s * q.dirs + d) * B + b) * H + j] = h[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        res.yh[(d * B + b) * H + j] = h[j];
        res.yc[(d * B + b) * H + j] = c[j];
      }
    }
  }
  return res;
}

std::vector<double> Random(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-scale, scale);
  std::vector<double> v(n);
  for (double& e : v) {
    do e = dist(gen);
    while (std::fabs(e) < 0.02 * scale);
  }
  return v;
}

// Fills the problem's tensors with random values (bias, states and peepholes when asked).
void Fill(Problem& q, bool bias, bool states, bool peepholes, uint32_t seed) {
  const int64_t G = q.G();
  q.x = Random(q.S * q.B * q.I, seed);
  q.w = Random(q.dirs * G * q.H * q.I, seed + 1, 0.6);
  q.r = Random(q.dirs * G * q.H * q.H, seed + 2, 0.6);
  if (bias) q.bias = Random(q.dirs * 2 * G * q.H, seed + 3, 0.5);
  if (states) {
    q.h0 = Random(q.dirs * q.B * q.H, seed + 4);
    if (q.op == Op::kLstm) q.c0 = Random(q.dirs * q.B * q.H, seed + 5);
  }
  if (peepholes) q.p = Random(q.dirs * 3 * q.H, seed + 6, 0.5);
}

// [A, B, C] -> [B, A, C] (the layout-0 / layout-1 swap of X and of the states).
std::vector<double> Swap01(const std::vector<double>& v, int64_t a, int64_t b, int64_t c) {
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j)
      for (int64_t k = 0; k < c; ++k) out[(j * a + i) * c + k] = v[(i * b + j) * c + k];
  return out;
}

template <typename T>
Tensor MakeTensor(const std::vector<double>& v, const Shape& shape) {
  std::vector<T> t(v.size());
  for (size_t i = 0; i < v.size(); ++i) t[i] = static_cast<T>(v[i]);
  return Tensor::FromVector<T>(t, shape);
}

const char* OpName(Op op) { return op == Op::kRnn ? "RNN" : op == Op::kGru ? "GRU" : "LSTM"; }

// Runs the problem through OpTester in type T (layout 0 or 1) and compares every output.
template <typename T>
void RunAndCompare(const Problem& q, int64_t layout, double rtol, double atol, int opset = 22) {
  const Result ref = Reference(q);
  const int64_t S = q.S, B = q.B, H = q.H, G = q.G(), D = q.dirs;
  OpTester t(OpName(q.op), opset);
  t.Attr("hidden_size", Attribute::Int(H));
  t.Attr("direction", Attribute::String(D == 2 ? "bidirectional" : q.reverse ? "reverse" : "forward"));
  if (layout != 0) t.Attr("layout", Attribute::Int(layout));
  if (std::isfinite(q.clip)) t.Attr("clip", Attribute::Float(static_cast<float>(q.clip)));
  if (q.linear_before_reset) t.Attr("linear_before_reset", Attribute::Int(1));
  if (q.input_forget) t.Attr("input_forget", Attribute::Int(1));
  std::vector<std::string> names;
  std::vector<float> alphas, betas;
  for (const auto& dir : q.acts)
    for (const Act& a : dir) {
      names.push_back(a.name);
      if (a.name == "LeakyRelu" || a.name == "HardSigmoid" || a.name == "Affine" || a.name == "Elu" ||
          a.name == "ScaledTanh" || a.name == "ThresholdedRelu")
        alphas.push_back(static_cast<float>(a.alpha));
      if (a.name == "HardSigmoid" || a.name == "Affine" || a.name == "ScaledTanh")
        betas.push_back(static_cast<float>(a.beta));
    }
  t.Attr("activations", Attribute::Strings(names));
  if (!alphas.empty()) t.Attr("activation_alpha", Attribute::Floats(alphas));
  if (!betas.empty()) t.Attr("activation_beta", Attribute::Floats(betas));
  const std::vector<double> x = layout == 0 ? q.x : Swap01(q.x, S, B, q.I);
  t.Input("X", MakeTensor<T>(x, layout == 0 ? Shape{S, B, q.I} : Shape{B, S, q.I}));
  t.Input("W", MakeTensor<T>(q.w, {D, G * H, q.I}));
  t.Input("R", MakeTensor<T>(q.r, {D, G * H, H}));
  if (q.bias.empty()) t.Input("", Tensor());
  else t.Input("B", MakeTensor<T>(q.bias, {D, 2 * G * H}));
  if (q.lens.empty()) t.Input("", Tensor());
  else t.Input("sequence_lens", Tensor::FromVector<int32_t>(q.lens, {B}));
  const Shape state = layout == 0 ? Shape{D, B, H} : Shape{B, D, H};
  auto state_values = [&](const std::vector<double>& v) { return layout == 0 ? v : Swap01(v, D, B, H); };
  if (q.h0.empty()) t.Input("", Tensor());
  else t.Input("initial_h", MakeTensor<T>(state_values(q.h0), state));
  if (q.op == Op::kLstm) {
    if (q.c0.empty()) t.Input("", Tensor());
    else t.Input("initial_c", MakeTensor<T>(state_values(q.c0), state));
    if (!q.p.empty()) t.Input("P", MakeTensor<T>(q.p, {D, 3 * H}));
  }
  // Y: layout 0 [S, D, B, H]; layout 1 [B, S, D, H].
  std::vector<double> y = ref.y;
  if (layout != 0) {
    y.assign(ref.y.size(), 0);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t d = 0; d < D; ++d)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < H; ++j) y[((b * S + s) * D + d) * H + j] = ref.y[((s * D + d) * B + b) * H + j];
  }
  t.Output("Y", layout == 0 ? Shape{S, D, B, H} : Shape{B, S, D, H}, y, rtol, atol);
  t.Output("Y_h", state, state_values(ref.yh), rtol, atol);
  if (q.op == Op::kLstm) t.Output("Y_c", state, state_values(ref.yc), rtol, atol);
  t.Run();
}

TEST(NnRecurrent, LstmBidirectionalWithPeepholesStatesLengthsAndClip) {
  Problem q;
  q.op = Op::kLstm;
  q.S = 5, q.B = 4, q.I = 3, q.H = 4, q.dirs = 2;
  Fill(q, true, true, true, 11);
  q.lens = {5, 3, 0, 1};  // one row with no steps: its state stays the initial one
  q.clip = 0.9;
  q.acts = {{{"Sigmoid"}, {"Tanh"}, {"Tanh"}}, {{"HardSigmoid", 0.3, 0.4}, {"Softsign"}, {"Tanh"}}};
  RunAndCompare<float>(q, 0, 1e-4, 1e-5);
  RunAndCompare<double>(q, 1, 1e-10, 1e-12);
}

TEST(NnRecurrent, LstmInputForgetReverse) {
  Problem q;
  q.op = Op::kLstm;
  q.reverse = true;
  Fill(q, true, true, false, 21);
  q.input_forget = true;
  q.acts = {{{"Sigmoid"}, {"Tanh"}, {"Tanh"}}};
  RunAndCompare<float>(q, 0, 1e-4, 1e-5, 14);
  q.lens = {2, 4, 1};
  RunAndCompare<double>(q, 0, 1e-10, 1e-12, 7);
}

TEST(NnRecurrent, GruBothResetFormsLayoutsAndLengths) {
  for (bool lbr : {false, true}) {
    SCOPED_TRACE(lbr ? "linear_before_reset = 1" : "linear_before_reset = 0");
    Problem q;
    q.op = Op::kGru;
    q.S = 6, q.B = 3, q.I = 2, q.H = 5, q.dirs = 2;
    Fill(q, true, true, false, lbr ? 31 : 41);
    q.linear_before_reset = lbr;
    q.lens = {6, 2, 4};
    q.acts = {{{"Sigmoid"}, {"Tanh"}}, {{"Sigmoid"}, {"ScaledTanh", 1.2, 0.7}}};
    RunAndCompare<float>(q, 0, 1e-4, 1e-5);
    RunAndCompare<float>(q, 1, 1e-4, 1e-5);
    q.clip = 0.5;
    RunAndCompare<double>(q, 1, 1e-10, 1e-12);
  }
}

TEST(NnRecurrent, RnnActivationsPerDirection) {
  Problem q;
  q.op = Op::kRnn;
  q.dirs = 2;
  Fill(q, true, true, false, 51);
  q.acts = {{{"LeakyRelu", 0.2}}, {{"Affine", 0.8, -0.1}}};
  RunAndCompare<float>(q, 0, 1e-4, 1e-5);
  q.acts = {{{"Elu", 0.7}}, {{"Relu"}}};
  q.lens = {1, 4, 3};
  RunAndCompare<float>(q, 1, 1e-4, 1e-5);
  q.acts = {{{"Softplus"}}, {{"ThresholdedRelu", 0.1}}};
  RunAndCompare<double>(q, 0, 1e-10, 1e-12);
}

TEST(NnRecurrent, OneDirectionsActivationsServeBoth) {
  // A bidirectional node given one direction's activations uses them for both.
  Problem q;
  q.op = Op::kGru;
  q.dirs = 2;
  Fill(q, false, false, false, 61);
  q.acts = {{{"Sigmoid"}, {"Softsign"}}, {{"Sigmoid"}, {"Softsign"}}};
  const Result ref = Reference(q);
  OpTester t("GRU", 14);
  t.Attr("hidden_size", Attribute::Int(q.H))
      .Attr("direction", Attribute::String("bidirectional"))
      .Attr("activations", Attribute::Strings({"Sigmoid", "Softsign"}));
  t.Input("X", MakeTensor<float>(q.x, {q.S, q.B, q.I}));
  t.Input("W", MakeTensor<float>(q.w, {2, 3 * q.H, q.I}));
  t.Input("R", MakeTensor<float>(q.r, {2, 3 * q.H, q.H}));
  t.Output("Y", {q.S, 2, q.B, q.H}, ref.y, 1e-4, 1e-5);
  t.Run();
}

TEST(NnRecurrent, Float16ComputesInFloat32) {
  Problem q;
  q.op = Op::kLstm;
  Fill(q, true, true, true, 71);
  q.acts = {{{"Sigmoid"}, {"Tanh"}, {"Tanh"}}};
  // The reference sees the float16-rounded inputs; the outputs are rounded once more.
  for (auto* v : {&q.x, &q.w, &q.r, &q.bias, &q.h0, &q.c0, &q.p})
    for (double& e : *v) e = static_cast<float>(Float16(static_cast<float>(e)));
  RunAndCompare<Float16>(q, 0, 2e-3, 2e-3, 14);
}

TEST(NnRecurrent, BadInputsAreNamedErrors) {
  auto base = [](const char* op) {
    OpTester t(op, 22);
    const int64_t g = std::string(op) == "LSTM" ? 4 : std::string(op) == "GRU" ? 3 : 1;
    t.Attr("hidden_size", Attribute::Int(2));
    t.Input("X", RandomTensor<float>({3, 1, 2}, -1, 1, 1));
    t.Input("W", RandomTensor<float>({1, g * 2, 2}, -1, 1, 2));
    t.Input("R", RandomTensor<float>({1, g * 2, 2}, -1, 1, 3));
    return t;
  };
  auto expect_error = [](OpTester& t, const std::string& needle) {
    t.Output("Y", {3, 1, 1, 2}, {});
    auto r = t.Compute();
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  {
    OpTester t = base("RNN");
    t.Attr("direction", Attribute::String("sideways"));
    expect_error(t, "forward, reverse or bidirectional");
  }
  {
    OpTester t = base("GRU");
    t.Attr("activations", Attribute::Strings({"Sigmoid", "Cosine"}));
    expect_error(t, "unknown activation 'Cosine'");
  }
  {
    OpTester t = base("LSTM");
    t.Attr("activations", Attribute::Strings({"Sigmoid", "Tanh"}));
    expect_error(t, "expected 3 per direction");
  }
  {
    OpTester t("LSTM", 22);
    t.Attr("hidden_size", Attribute::Int(2));
    t.Input("X", RandomTensor<float>({3, 1, 2}, -1, 1, 1));
    t.Input("W", RandomTensor<float>({1, 6, 2}, -1, 1, 2));  // 3 gates: not an LSTM's 4
    t.Input("R", RandomTensor<float>({1, 8, 2}, -1, 1, 3));
    expect_error(t, "input W must be");
  }
  {
    OpTester t = base("RNN");
    t.Input("", Tensor()).Input("sequence_lens", Tensor::FromVector<int32_t>({4}, {1}));
    expect_error(t, "sequence_lens[0] = 4 is outside [0, 3]");
  }
  {
    OpTester t("RNN", 7);
    t.Attr("hidden_size", Attribute::Int(2)).Attr("layout", Attribute::Int(1));
    t.Input("X", RandomTensor<float>({1, 3, 2}, -1, 1, 1));
    t.Input("W", RandomTensor<float>({1, 2, 2}, -1, 1, 2));
    t.Input("R", RandomTensor<float>({1, 2, 2}, -1, 1, 3));
    expect_error(t, "'layout' exists from opset 14");
  }
}

}  // namespace
}  // namespace tob::testing
