// LinearAttention and CausalConvWithState (ai.onnx 27) against float64 references written from the
// spec's recurrences, for what onnx's node tests leave out: bfloat16, a state type other than the
// activations' (S != T), delta without gating, per-key and per-head decay with GQA groups of 3,
// a past state with a short input (CausalConvWithState's carry mixing past and input), chunked
// calls equal to one call, and the named refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

// ---- LinearAttention ----

struct LaCase {
  int64_t batch = 2, seq = 5, q_heads = 4, kv_heads = 2, dk = 3, dv = 4;
  std::string rule = "gated_delta";
  bool decay_per_key = true;
  bool beta_per_head = true;
  bool with_past = false;
  float scale = 0.0f;
};

struct LaInputs {
  Tensor q, k, v, past, decay, beta;
};

// output [B, T, Hq * dv] and state [B, Hkv, dk, dv] in float64 from the spec's update rules.
std::pair<std::vector<double>, std::vector<double>> ReferenceLinearAttention(const LaCase& c, const LaInputs& in) {
  const std::vector<double> q = ToDoubles(in.q), k = ToDoubles(in.k), v = ToDoubles(in.v);
  const bool gated = c.rule == "gated" || c.rule == "gated_delta";
  const bool delta = c.rule == "delta" || c.rule == "gated_delta";
  const std::vector<double> g = gated ? ToDoubles(in.decay) : std::vector<double>{};
  const std::vector<double> beta = delta ? ToDoubles(in.beta) : std::vector<double>{};
  std::vector<double> state =
      c.with_past ? ToDoubles(in.past) : std::vector<double>(size_t(c.batch * c.kv_heads * c.dk * c.dv), 0.0);
  std::vector<double> out(size_t(c.batch * c.seq * c.q_heads * c.dv));
  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(double(c.dk));
  const int64_t group = c.q_heads / c.kv_heads;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      double* S = &state[size_t((b * c.kv_heads + h) * c.dk * c.dv)];
      for (int64_t t = 0; t < c.seq; ++t) {
        const int64_t bt = b * c.seq + t;
        auto K = [&](int64_t d) { return k[size_t(bt * c.kv_heads * c.dk + h * c.dk + d)]; };
        if (gated)
          for (int64_t d = 0; d < c.dk; ++d) {
            const double e =
                c.decay_per_key ? g[size_t(bt * c.kv_heads * c.dk + h * c.dk + d)] : g[size_t(bt * c.kv_heads + h)];
            for (int64_t m = 0; m < c.dv; ++m) S[d * c.dv + m] *= std::exp(e);
          }
        std::vector<double> w(size_t(c.dv));
        for (int64_t m = 0; m < c.dv; ++m) w[m] = v[size_t(bt * c.kv_heads * c.dv + h * c.dv + m)];
        if (delta) {
          const double rate = c.beta_per_head ? beta[size_t(bt * c.kv_heads + h)] : beta[size_t(bt)];
          for (int64_t m = 0; m < c.dv; ++m) {
            double r = 0;
            for (int64_t d = 0; d < c.dk; ++d) r += S[d * c.dv + m] * K(d);
            w[m] = rate * (w[m] - r);
          }
        }
        for (int64_t d = 0; d < c.dk; ++d)
          for (int64_t m = 0; m < c.dv; ++m) S[d * c.dv + m] += K(d) * w[m];
        for (int64_t qh = h * group; qh < (h + 1) * group; ++qh)
          for (int64_t m = 0; m < c.dv; ++m) {
            double o = 0;
            for (int64_t d = 0; d < c.dk; ++d) o += q[size_t(bt * c.q_heads * c.dk + qh * c.dk + d)] * S[d * c.dv + m];
            out[size_t(bt * c.q_heads * c.dv + qh * c.dv + m)] = scale * o;
          }
      }
    }
  return {out, state};
}

template <typename T, typename S = T>
LaInputs MakeLaInputs(const LaCase& c, uint32_t seed) {
  LaInputs in;
  in.q = RandomTensor<T>({c.batch, c.seq, c.q_heads * c.dk}, -1, 1, seed);
  in.k = RandomTensor<T>({c.batch, c.seq, c.kv_heads * c.dk}, -0.6, 0.6, seed + 1);
  in.v = RandomTensor<T>({c.batch, c.seq, c.kv_heads * c.dv}, -1, 1, seed + 2);
  if (c.with_past) in.past = RandomTensor<S>({c.batch, c.kv_heads, c.dk, c.dv}, -0.5, 0.5, seed + 3);
  in.decay = RandomTensor<T>({c.batch, c.seq, c.decay_per_key ? c.kv_heads * c.dk : c.kv_heads}, -0.5, -0.01, seed + 4);
  in.beta = RandomTensor<T>({c.batch, c.seq, c.beta_per_head ? c.kv_heads : 1}, 0.1, 0.9, seed + 5);
  return in;
}

OpTester LaTester(const LaCase& c, const LaInputs& in) {
  OpTester t("LinearAttention", 27);
  t.Input("query", in.q).Input("key", in.k).Input("value", in.v);
  const bool gated = c.rule == "gated" || c.rule == "gated_delta";
  const bool delta = c.rule == "delta" || c.rule == "gated_delta";
  t.Input(c.with_past ? "past_state" : "", c.with_past ? in.past : Tensor());
  t.Input(gated ? "decay" : "", gated ? in.decay : Tensor());
  if (delta) t.Input("beta", in.beta);
  t.Attr("q_num_heads", Attribute::Int(c.q_heads)).Attr("kv_num_heads", Attribute::Int(c.kv_heads));
  t.Attr("update_rule", Attribute::String(c.rule));
  if (c.scale != 0.0f) t.Attr("scale", Attribute::Float(c.scale));
  return t;
}

template <typename T, typename S = T>
void RunLinearAttention(const LaCase& c, double tol, uint32_t seed) {
  LaInputs in = MakeLaInputs<T, S>(c, seed);
  auto [out, state] = ReferenceLinearAttention(c, in);
  OpTester t = LaTester(c, in);
  t.Output("output", {c.batch, c.seq, c.q_heads * c.dv}, out, tol, tol);
  t.Output("present_state", {c.batch, c.kv_heads, c.dk, c.dv}, state, tol, tol);
  t.Run();
}

TEST(NnLinearAttention, EveryUpdateRuleMatchesFloat64) {
  uint32_t seed = 10;
  for (const char* rule : {"linear", "gated", "delta", "gated_delta"})
    for (bool per_key : {true, false})
      for (bool past : {false, true}) {
        LaCase c;
        c.rule = rule;
        c.decay_per_key = per_key;
        c.beta_per_head = !per_key;
        c.with_past = past;
        SCOPED_TRACE(std::string(rule) + (per_key ? " per-key decay" : " per-head decay") + (past ? " past" : ""));
        RunLinearAttention<float>(c, 1e-5, seed += 10);
      }
}

TEST(NnLinearAttention, GroupsOfThreeExplicitScaleAndDecodeStep) {
  LaCase gqa;
  gqa.q_heads = 6;
  gqa.kv_heads = 2;
  gqa.scale = 0.3f;
  RunLinearAttention<float>(gqa, 1e-5, 200);
  LaCase decode;
  decode.seq = 1;
  decode.with_past = true;
  decode.q_heads = decode.kv_heads = 3;
  RunLinearAttention<float>(decode, 1e-5, 210);
  LaCase mqa;
  mqa.q_heads = 4;
  mqa.kv_heads = 1;
  mqa.beta_per_head = false;
  RunLinearAttention<float>(mqa, 1e-5, 220);
}

TEST(NnLinearAttention, SixteenBitTypesAndAStateTypeOfItsOwn) {
  LaCase c;
  c.with_past = true;
  RunLinearAttention<Float16>(c, 4e-3, 300);
  RunLinearAttention<BFloat16>(c, 3e-2, 310);
  RunLinearAttention<float, Float16>(c, 2e-3, 320);  // present_state takes past_state's float16
  RunLinearAttention<BFloat16, float>(c, 3e-2, 330);
}

TEST(NnLinearAttention, TwoChunksEqualOneCall) {
  LaCase whole;
  whole.seq = 6;
  LaInputs in = MakeLaInputs<float>(whole, 400);
  auto [out, state] = ReferenceLinearAttention(whole, in);
  // The first 4 tokens, then the last 2 from the first call's present_state.
  auto slice = [](const Tensor& t, int64_t from, int64_t to) {
    const int64_t b = t.shape()[0], s = t.shape()[1], w = t.shape()[2];
    std::vector<float> v;
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = from; j < to; ++j)
        for (int64_t x = 0; x < w; ++x) v.push_back(t.data<float>()[(i * s + j) * w + x]);
    return Tensor::FromVector<float>(v, {b, to - from, w});
  };
  LaCase first = whole;
  first.seq = 4;
  LaInputs a{slice(in.q, 0, 4), slice(in.k, 0, 4),     slice(in.v, 0, 4),
             Tensor(),          slice(in.decay, 0, 4), slice(in.beta, 0, 4)};
  OpTester t1 = LaTester(first, a);
  t1.Output("output", {2, 4, whole.q_heads * whole.dv}, {}).Output("present_state", {2, 2, 3, 4}, {});
  auto r1 = t1.Compute();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  LaCase second = whole;
  second.seq = 2;
  second.with_past = true;
  LaInputs b{slice(in.q, 4, 6), slice(in.k, 4, 6),     slice(in.v, 4, 6),
             r1.value()[1],     slice(in.decay, 4, 6), slice(in.beta, 4, 6)};
  OpTester t2 = LaTester(second, b);
  std::vector<double> tail;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 4; j < 6; ++j)
      for (int64_t x = 0; x < whole.q_heads * whole.dv; ++x) tail.push_back(out[(i * 6 + j) * 16 + x]);
  t2.Output("output", {2, 2, 16}, tail, 1e-5, 1e-5).Output("present_state", {2, 2, 3, 4}, state, 1e-5, 1e-5);
  t2.Run();
}

std::string LaError(const LaCase& c, const LaInputs& in) {
  OpTester t = LaTester(c, in);
  t.Output("output", {}, {}).Output("present_state", {}, {});
  auto r = t.Compute();
  return r.ok() ? std::string("no error") : r.status().message();
}

TEST(NnLinearAttention, RefusesInconsistentInputsByName) {
  LaCase c;
  LaInputs in = MakeLaInputs<float>(c, 500);
  // decay given to the linear rule.
  OpTester linear = LaTester(c, in);
  linear.Attr("update_rule", Attribute::String("linear")).Output("output", {}, {}).Output("present_state", {}, {});
  auto r = linear.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("takes no decay input"), std::string::npos) << r.status().message();
  // An unknown rule, heads that do not divide, a decay of the wrong width.
  OpTester rule = LaTester(c, in);
  rule.Attr("update_rule", Attribute::String("mamba")).Output("output", {}, {});
  r = rule.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("update_rule must be"), std::string::npos) << r.status().message();
  OpTester heads = LaTester(c, in);
  heads.Attr("kv_num_heads", Attribute::Int(3)).Output("output", {}, {});
  r = heads.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must be a positive multiple of kv_num_heads"), std::string::npos);
  LaInputs wide = in;
  wide.decay = RandomTensor<float>({2, 5, 5}, -0.5, -0.01, 501);
  EXPECT_NE(LaError(c, wide).find("decay's last dimension 5"), std::string::npos);
  LaInputs past = in;
  LaCase with_past = c;
  with_past.with_past = true;
  past.past = RandomTensor<float>({2, 2, 4, 3}, -1, 1, 502);
  EXPECT_NE(LaError(with_past, past).find("past_state's shape differs"), std::string::npos);
  LaCase no_beta = c;
  no_beta.rule = "gated";
  OpTester extra_beta = LaTester(no_beta, in);
  extra_beta.Input("beta", in.beta).Output("output", {}, {});
  r = extra_beta.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("takes no beta input"), std::string::npos) << r.status().message();
}

// ---- CausalConvWithState ----

// output [B, C, L] and present [B, C, K - 1] in float64.
std::pair<std::vector<double>, std::vector<double>> ReferenceCausalConv(const std::vector<double>& x,
                                                                        const std::vector<double>& w,
                                                                        const std::vector<double>* bias,
                                                                        const std::vector<double>* past, int64_t B,
                                                                        int64_t C, int64_t L, int64_t K, bool silu) {
  std::vector<double> y, state;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      std::vector<double> padded;
      for (int64_t i = 0; i < K - 1; ++i) padded.push_back(past ? (*past)[(b * C + c) * (K - 1) + i] : 0.0);
      for (int64_t t = 0; t < L; ++t) padded.push_back(x[(b * C + c) * L + t]);
      for (int64_t t = 0; t < L; ++t) {
        double acc = bias ? (*bias)[c] : 0.0;
        for (int64_t j = 0; j < K; ++j) acc += w[c * K + j] * padded[t + j];
        y.push_back(silu ? acc / (1.0 + std::exp(-acc)) : acc);
      }
      for (int64_t i = 0; i < K - 1; ++i) state.push_back(padded[L + i]);
    }
  return {y, state};
}

template <typename T>
void RunCausalConv(int64_t B, int64_t C, int64_t L, int64_t K, bool with_bias, bool with_past,
                   const std::string& activation, double tol, uint32_t seed) {
  Tensor x = RandomTensor<T>({B, C, L}, -1, 1, seed);
  Tensor w = RandomTensor<T>({C, 1, K}, -1, 1, seed + 1);
  Tensor bias = RandomTensor<T>({C}, -0.5, 0.5, seed + 2);
  Tensor past = RandomTensor<T>({B, C, K - 1}, -1, 1, seed + 3);
  const std::vector<double> bd = ToDoubles(bias), pd = ToDoubles(past);
  auto [y, state] = ReferenceCausalConv(ToDoubles(x), ToDoubles(w), with_bias ? &bd : nullptr,
                                        with_past ? &pd : nullptr, B, C, L, K, activation != "none");
  OpTester t("CausalConvWithState", 27);
  t.Input("input", x).Input("weight", w);
  t.Input(with_bias ? "bias" : "", with_bias ? bias : Tensor());
  if (with_past) t.Input("past_state", past);
  t.Attr("activation", Attribute::String(activation));
  t.Output("output", {B, C, L}, y, tol, tol).Output("present_state", {B, C, K - 1}, state, 0, 0);
  t.Run();
}

TEST(NnCausalConvWithState, EveryInputCombinationMatchesFloat64) {
  uint32_t seed = 600;
  for (bool bias : {false, true})
    for (bool past : {false, true})
      for (const char* act : {"none", "silu", "swish"}) {
        SCOPED_TRACE(std::string(act) + (bias ? " bias" : "") + (past ? " past" : ""));
        RunCausalConv<float>(2, 5, 9, 4, bias, past, act, 1e-6, seed += 10);
      }
}

TEST(NnCausalConvWithState, ShortInputsCarryPastValuesIntoTheNextState) {
  RunCausalConv<float>(2, 3, 2, 5, true, true, "none", 1e-6, 700);   // L < K - 1
  RunCausalConv<float>(1, 2, 1, 4, false, true, "silu", 1e-6, 710);  // one decode step
  RunCausalConv<float>(2, 3, 6, 1, true, false, "none", 1e-6, 720);  // K = 1: empty state
}

TEST(NnCausalConvWithState, SixteenBitTypes) {
  RunCausalConv<Float16>(2, 4, 8, 4, true, true, "silu", 2e-3, 800);
  RunCausalConv<BFloat16>(2, 4, 8, 3, true, false, "none", 2e-2, 810);
}

TEST(NnCausalConvWithState, RefusesBadShapesAndActivations) {
  auto error = [](const Tensor& x, const Tensor& w, const Tensor* past, const std::string& act) {
    OpTester t("CausalConvWithState", 27);
    t.Input("input", x).Input("weight", w).Input("", Tensor());
    if (past != nullptr) t.Input("past_state", *past);
    t.Attr("activation", Attribute::String(act));
    t.Output("output", {}, {}).Output("present_state", {}, {});
    auto r = t.Compute();
    return r.ok() ? std::string("no error") : r.status().message();
  };
  Tensor x = RandomTensor<float>({2, 3, 5}, -1, 1, 900);
  Tensor w = RandomTensor<float>({3, 1, 4}, -1, 1, 901);
  EXPECT_NE(error(x, w, nullptr, "relu").find("activation must be"), std::string::npos);
  Tensor grouped = RandomTensor<float>({3, 2, 4}, -1, 1, 902);
  EXPECT_NE(error(x, grouped, nullptr, "none").find("(depthwise)"), std::string::npos);
  Tensor past = RandomTensor<float>({2, 3, 2}, -1, 1, 903);
  EXPECT_NE(error(x, w, &past, "none").find("past_state must hold k - 1 positions"), std::string::npos);
  Tensor other_c = RandomTensor<float>({4, 1, 4}, -1, 1, 904);
  EXPECT_NE(error(x, other_c, nullptr, "none").find("weight's channels differ"), std::string::npos);
}

}  // namespace
}  // namespace tob::testing
