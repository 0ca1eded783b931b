// Attention (opset 23-25), RotaryEmbedding and RMSNormalization against float64 references
// written as plain loops over the logical [batch, heads, seq, size] indices, on random non-zero
// data; every mode of Attention (GQA, past/present, masks of each rank and kind, causal with and
// without a cache offset, nonpad_kv_seqlen, softcap, scale, the four qk_matmul_output modes,
// windows) and the bad inputs each kernel names.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "training_test_util.h"

namespace tob {
namespace {

using namespace training_test;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- Attention

struct AttnCase {
  int64_t batch = 2, q_heads = 4, kv_heads = 2, q_seq = 5, kv_seq = 6, past = 0, head = 8, v_head = 8;
  bool three_d = false, causal = false;
  std::optional<float> scale;
  float softcap = 0;
  int64_t qk_mode = -1;  // -1: no qk_matmul_output
  Shape mask_shape;      // empty: no mask
  bool mask_bool = false;
  std::vector<int64_t> nonpad;  // empty: none
  int64_t left = -1, right = -1;
  int opset = 23;
  int64_t total() const { return past + kv_seq; }
};

struct AttnData {
  Tensor q, k, v, past_k, past_v, mask, nonpad;
};

template <typename T>
AttnData MakeData(const AttnCase& c) {
  AttnData d;
  auto shape = [&](int64_t heads, int64_t seq, int64_t size) {
    return c.three_d ? Shape{c.batch, seq, heads * size} : Shape{c.batch, heads, seq, size};
  };
  d.q = RandomTensor<T>(shape(c.q_heads, c.q_seq, c.head), -1, 1, 11);
  d.k = RandomTensor<T>(shape(c.kv_heads, c.kv_seq, c.head), -1, 1, 12);
  d.v = RandomTensor<T>(shape(c.kv_heads, c.kv_seq, c.v_head), -1, 1, 13);
  if (c.past > 0) {
    d.past_k = RandomTensor<T>({c.batch, c.kv_heads, c.past, c.head}, -1, 1, 14);
    d.past_v = RandomTensor<T>({c.batch, c.kv_heads, c.past, c.v_head}, -1, 1, 15);
  }
  if (!c.mask_shape.empty()) {
    if (c.mask_bool) {
      std::vector<bool> visible;
      for (double x : ToDoubles(RandomTensor<double>(c.mask_shape, 0, 1, 16, 0))) visible.push_back(x < 0.7);
      d.mask = Tensor::FromVector<bool>(visible, c.mask_shape);
    } else {
      d.mask = RandomTensor<T>(c.mask_shape, -2, 2, 16);
    }
  }
  if (!c.nonpad.empty()) d.nonpad = Tensor::FromVector<int64_t>(c.nonpad, {c.batch});
  return d;
}

struct AttnRef {
  std::vector<double> y, present_k, present_v, qk;
};

AttnRef AttentionRef(const AttnCase& c, const AttnData& d) {
  const std::vector<double> q = ToDoubles(d.q), k = ToDoubles(d.k), v = ToDoubles(d.v);
  const std::vector<double> pk = c.past > 0 ? ToDoubles(d.past_k) : std::vector<double>();
  const std::vector<double> pv = c.past > 0 ? ToDoubles(d.past_v) : std::vector<double>();
  const std::vector<double> mask = d.mask.defined() ? ToDoubles(d.mask) : std::vector<double>();
  auto at = [&](const std::vector<double>& t, int64_t heads, int64_t seq, int64_t size, int64_t b, int64_t h, int64_t s,
                int64_t x) {
    return c.three_d ? t[((b * seq + s) * heads + h) * size + x] : t[((b * heads + h) * seq + s) * size + x];
  };
  const int64_t total = c.total();
  auto key = [&](int64_t b, int64_t g, int64_t j, int64_t x) {
    return j < c.past ? pk[((b * c.kv_heads + g) * c.past + j) * c.head + x]
                      : at(k, c.kv_heads, c.kv_seq, c.head, b, g, j - c.past, x);
  };
  auto value = [&](int64_t b, int64_t g, int64_t j, int64_t x) {
    return j < c.past ? pv[((b * c.kv_heads + g) * c.past + j) * c.v_head + x]
                      : at(v, c.kv_heads, c.kv_seq, c.v_head, b, g, j - c.past, x);
  };
  Shape m4(4 - c.mask_shape.size(), 1);
  m4.insert(m4.end(), c.mask_shape.begin(), c.mask_shape.end());
  auto mask_bias = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    if (mask.empty()) return 0.0;
    if (j >= m4[3]) return kNegInf;
    const int64_t idx[4] = {m4[0] == 1 ? 0 : b, m4[1] == 1 ? 0 : h, m4[2] == 1 ? 0 : i, j};
    int64_t off = 0;
    for (int dd = 0; dd < 4; ++dd) off = off * m4[dd] + idx[dd];
    if (c.mask_bool) return mask[off] != 0 ? 0.0 : kNegInf;
    return mask[off];
  };
  AttnRef r;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t g = 0; g < c.kv_heads; ++g)
      for (int64_t j = 0; j < total; ++j) {
        for (int64_t x = 0; x < c.head; ++x) r.present_k.push_back(key(b, g, j, x));
      }
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t g = 0; g < c.kv_heads; ++g)
      for (int64_t j = 0; j < total; ++j)
        for (int64_t x = 0; x < c.v_head; ++x) r.present_v.push_back(value(b, g, j, x));
  const double scale = c.scale ? *c.scale : 1 / std::sqrt(static_cast<double>(c.head));
  const int64_t group = c.q_heads / c.kv_heads;
  std::vector<double> y4(c.batch * c.q_heads * c.q_seq * c.v_head);
  r.qk.assign(c.batch * c.q_heads * c.q_seq * total, 0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.q_heads; ++h)
      for (int64_t i = 0; i < c.q_seq; ++i) {
        const int64_t offset = c.past > 0 ? c.past : (c.nonpad.empty() ? 0 : c.nonpad[b] - c.q_seq);
        std::vector<double> s(total), bias(total);
        bool any = false;
        for (int64_t j = 0; j < total; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < c.head; ++x)
            dot += at(q, c.q_heads, c.q_seq, c.head, b, h, i, x) * key(b, h / group, j, x);
          s[j] = dot * scale;
          if (c.softcap > 0) s[j] = c.softcap * std::tanh(s[j] / c.softcap);
          bool visible = !(c.causal && j > i + offset);
          if (!c.nonpad.empty() && j >= c.nonpad[b]) visible = false;
          const int64_t diff = i + offset - j;
          if (c.left >= 0 && diff > c.left) visible = false;
          if (c.right >= 0 && -diff > c.right) visible = false;
          bias[j] = (visible ? 0.0 : kNegInf) + mask_bias(b, h, i, j);
          any = any || bias[j] != kNegInf;
        }
        double* qk = &r.qk[((b * c.q_heads + h) * c.q_seq + i) * total];
        for (int64_t j = 0; j < total; ++j) qk[j] = c.qk_mode == 2 ? s[j] + bias[j] : s[j];
        std::vector<double> p(total, 0.0);
        if (any) {
          double max = kNegInf, sum = 0;
          for (int64_t j = 0; j < total; ++j) max = std::max(max, s[j] + bias[j]);
          for (int64_t j = 0; j < total; ++j) sum += p[j] = std::exp(s[j] + bias[j] - max);
          for (double& pj : p) pj /= sum;
        }
        if (c.qk_mode == 3) std::copy(p.begin(), p.end(), qk);
        for (int64_t x = 0; x < c.v_head; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < total; ++j) acc += p[j] * value(b, h / group, j, x);
          y4[((b * c.q_heads + h) * c.q_seq + i) * c.v_head + x] = acc;
        }
      }
  if (!c.three_d) {
    r.y = y4;
  } else {
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t i = 0; i < c.q_seq; ++i)
        for (int64_t h = 0; h < c.q_heads; ++h)
          for (int64_t x = 0; x < c.v_head; ++x) r.y.push_back(y4[((b * c.q_heads + h) * c.q_seq + i) * c.v_head + x]);
  }
  return r;
}

OpTester MakeAttention(const AttnCase& c, const AttnData& d) {
  OpTester t("Attention", c.opset);
  if (c.three_d) t.Attr("q_num_heads", Int(c.q_heads)).Attr("kv_num_heads", Int(c.kv_heads));
  if (c.causal) t.Attr("is_causal", Int(1));
  if (c.scale) t.Attr("scale", Attribute::Float(*c.scale));
  if (c.softcap > 0) t.Attr("softcap", Attribute::Float(c.softcap));
  if (c.qk_mode >= 0) t.Attr("qk_matmul_output_mode", Int(c.qk_mode));
  if (c.left >= 0) t.Attr("left_window_size", Int(c.left));
  if (c.right >= 0) t.Attr("right_window_size", Int(c.right));
  t.Input("Q", d.q).Input("K", d.k).Input("V", d.v);
  const bool past = c.past > 0, nonpad = !c.nonpad.empty();
  if (d.mask.defined() || past || nonpad) t.Input(d.mask.defined() ? "attn_mask" : "", d.mask);
  if (past || nonpad) t.Input(past ? "past_key" : "", d.past_k).Input(past ? "past_value" : "", d.past_v);
  if (nonpad) t.Input("nonpad_kv_seqlen", d.nonpad);
  return t;
}

template <typename T>
void RunAttention(const AttnCase& c, double tol) {
  const AttnData d = MakeData<T>(c);
  const AttnRef r = AttentionRef(c, d);
  OpTester t = MakeAttention(c, d);
  const Shape y_shape =
      c.three_d ? Shape{c.batch, c.q_seq, c.q_heads * c.v_head} : Shape{c.batch, c.q_heads, c.q_seq, c.v_head};
  t.Output("Y", y_shape, r.y, tol, tol)
      .Output("present_key", {c.batch, c.kv_heads, c.total(), c.head}, r.present_k, 0, 0)
      .Output("present_value", {c.batch, c.kv_heads, c.total(), c.v_head}, r.present_v, 0, 0);
  if (c.qk_mode >= 0) t.Output("qk_matmul_output", {c.batch, c.q_heads, c.q_seq, c.total()}, r.qk, tol, tol);
  t.Threads(3).Run();
}

TEST(NnAttention, FourDimensionalModes) {
  RunAttention<float>(AttnCase{}, 1e-5);
  AttnCase gqa_causal_past;  // GQA, causal aligned after a cache, more query rows than one tile
  gqa_causal_past.q_seq = 37;
  gqa_causal_past.kv_seq = 37;
  gqa_causal_past.past = 3;
  gqa_causal_past.causal = true;
  RunAttention<float>(gqa_causal_past, 1e-5);
  AttnCase masks;  // float mask [q_seq, keys - 2]: the missing keys are masked
  masks.mask_shape = {5, 4};
  masks.v_head = 5;
  masks.scale = 0.3f;
  RunAttention<float>(masks, 1e-5);
  masks.mask_shape = {2, 1, 5, 6};
  masks.causal = true;
  RunAttention<float>(masks, 1e-5);
  masks.mask_shape = {4, 5, 6};  // rank 3: (heads, q, keys)
  masks.mask_bool = true;
  RunAttention<float>(masks, 1e-5);
  AttnCase softcap;
  softcap.softcap = 2.5f;
  softcap.mask_shape = {5, 6};
  for (int64_t mode : {0, 1, 2, 3}) {
    softcap.qk_mode = mode;
    RunAttention<float>(softcap, 1e-5);
  }
  RunAttention<double>(softcap, 1e-12);
}

TEST(NnAttention, ThreeDimensionalAndPast) {
  AttnCase c;
  c.three_d = true;
  c.q_heads = 6;
  c.kv_heads = 3;
  c.v_head = 4;
  c.past = 2;
  c.causal = true;
  c.mask_shape = {2, 1, 1, 8};
  c.mask_bool = true;
  c.qk_mode = 2;
  RunAttention<float>(c, 1e-5);
  c.qk_mode = 3;
  c.mask_shape.clear();
  RunAttention<float>(c, 1e-5);
}

TEST(NnAttention, NonpadKvSeqlenAndWindows) {
  AttnCase c;
  c.opset = 24;
  c.q_seq = 2;
  c.kv_seq = 7;
  c.nonpad = {5, 7};
  c.causal = true;  // offset nonpad - q_seq: the two queries continue a cache of 3 and 5 keys
  RunAttention<float>(c, 1e-5);
  c.causal = false;
  c.opset = 25;
  c.left = 2;
  c.right = 0;
  RunAttention<float>(c, 1e-5);
  AttnCase window;
  window.opset = 25;
  window.left = 1;
  window.right = 1;
  window.past = 2;
  window.qk_mode = 3;
  RunAttention<float>(window, 1e-5);
}

TEST(NnAttention, FullyMaskedRowsGiveZeros) {
  AttnCase c;  // rows 0 and 1 see no key: nonpad 2 with 4 queries (offset -2), causal
  c.opset = 24;
  c.batch = 1;
  c.q_seq = 4;
  c.kv_seq = 4;
  c.nonpad = {2};
  c.causal = true;
  c.qk_mode = 3;
  RunAttention<float>(c, 1e-5);
  c.qk_mode = -1;  // without qk_matmul_output the kernel skips the keys no row of a tile sees
  c.nonpad = {0};
  RunAttention<float>(c, 1e-5);
}

TEST(NnAttention, SixteenBitTypesComputeInFloat) {
  AttnCase c;
  c.causal = true;
  c.past = 2;
  c.mask_shape = {5, 8};
  RunAttention<Float16>(c, 3e-3);
  RunAttention<BFloat16>(c, 2e-2);
}

TEST(NnAttention, BadInputsAreNamed) {
  AttnCase c;
  AttnData d = MakeData<float>(c);
  OpTester three_d("Attention", 23);
  three_d.Input("Q", RandomTensor<float>({2, 5, 32}))
      .Input("K", RandomTensor<float>({2, 6, 16}))
      .Input("V", RandomTensor<float>({2, 6, 16}))
      .Output("Y", {2, 5, 32}, {});
  ExpectFailure(three_d, "3-D inputs need positive q_num_heads and kv_num_heads");
  OpTester heads("Attention", 23);
  heads.Input("Q", RandomTensor<float>({2, 3, 5, 8})).Input("K", d.k).Input("V", d.v).Output("Y", {2, 3, 5, 8}, {});
  ExpectFailure(heads, "heads are not a multiple of K/V's 2");
  OpTester mask("Attention", 23);
  mask.Input("Q", d.q)
      .Input("K", d.k)
      .Input("V", d.v)
      .Input("attn_mask", RandomTensor<float>({5, 9}))
      .Output("Y", {2, 4, 5, 8}, {});
  ExpectFailure(mask, "attn_mask's last dim 9 exceeds the 6 keys");
}

// ---------------------------------------------------------------- RotaryEmbedding

template <typename T>
void RunRotary(bool three_d, bool positions, bool interleaved, int64_t rotary_dim, double tol) {
  const int64_t batch = 2, heads = 3, seq = 4, head = 8, max_pos = 10;
  const int64_t rot = rotary_dim == 0 ? head : rotary_dim, half = rot / 2;
  const Shape x_shape = three_d ? Shape{batch, seq, heads * head} : Shape{batch, heads, seq, head};
  Tensor x = RandomTensor<T>(x_shape, -1, 1, 21);
  const Shape cache_shape = positions ? Shape{max_pos, half} : Shape{batch, seq, half};
  Tensor cos = RandomTensor<T>(cache_shape, -1, 1, 22), sin = RandomTensor<T>(cache_shape, -1, 1, 23);
  const std::vector<int64_t> pos{7, 0, 3, 9, 1, 1, 4, 2};
  const std::vector<double> xv = ToDoubles(x), cv = ToDoubles(cos), sv = ToDoubles(sin);
  std::vector<double> y = xv;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t off = three_d ? (b * seq + s) * heads * head + h * head : ((b * heads + h) * seq + s) * head;
        const int64_t row = positions ? pos[b * seq + s] : b * seq + s;
        for (int64_t k = 0; k < half; ++k) {
          const int64_t i1 = interleaved ? 2 * k : k, i2 = interleaved ? 2 * k + 1 : k + half;
          const double c = cv[row * half + k], sn = sv[row * half + k];
          y[off + i1] = c * xv[off + i1] - sn * xv[off + i2];
          y[off + i2] = sn * xv[off + i1] + c * xv[off + i2];
        }
      }
  OpTester t("RotaryEmbedding", 23);
  if (three_d) t.Attr("num_heads", Int(heads));
  if (interleaved) t.Attr("interleaved", Int(1));
  if (rotary_dim != 0) t.Attr("rotary_embedding_dim", Int(rotary_dim));
  t.Input("X", x).Input("cos_cache", cos).Input("sin_cache", sin);
  if (positions) t.Input("position_ids", Tensor::FromVector<int64_t>(pos, {batch, seq}));
  t.Output("Y", x_shape, y, tol, tol).Threads(3).Run();
}

TEST(NnRotaryEmbedding, LayoutsCachesAndPairings) {
  RunRotary<float>(false, true, false, 0, 1e-6);
  RunRotary<float>(true, false, false, 0, 1e-6);
  RunRotary<float>(false, true, true, 0, 1e-6);
  RunRotary<float>(true, true, false, 4, 1e-6);   // partial rotation: the rest passes through
  RunRotary<float>(false, false, true, 6, 1e-6);  // interleaved and partial
  RunRotary<Float16>(false, true, false, 0, 2e-3);
  RunRotary<BFloat16>(true, true, true, 0, 2e-2);
}

TEST(NnRotaryEmbedding, PositionOutsideTheCacheIsAnError) {
  OpTester t("RotaryEmbedding", 23);
  t.Input("X", RandomTensor<float>({1, 2, 2, 4}))
      .Input("cos_cache", RandomTensor<float>({3, 2}))
      .Input("sin_cache", RandomTensor<float>({3, 2}))
      .Input("position_ids", Tensor::FromVector<int64_t>({0, 3}, {1, 2}))
      .Output("Y", {1, 2, 2, 4}, {});
  ExpectFailure(t, "position_ids[1] = 3 is outside the caches' 3 positions");
}

// ---------------------------------------------------------------- RMSNormalization

template <typename T, typename V>
void RunRmsNorm(const Shape& x_shape, int64_t axis, const Shape& scale_shape, double tol) {
  Tensor x = RandomTensor<T>(x_shape, -2, 2, 31);
  Tensor scale = RandomTensor<V>(scale_shape, -2, 2, 32);
  const int64_t rank = static_cast<int64_t>(x_shape.size()), a = axis < 0 ? axis + rank : axis;
  int64_t D = 1;
  for (int64_t i = a; i < rank; ++i) D *= x_shape[i];
  const std::vector<double> xv = ToDoubles(x), sv = ToDoubles(scale);
  // scale broadcast (right-aligned) to the D normalized values.
  const Shape norm(x_shape.begin() + a, x_shape.end());
  std::vector<double> y(xv.size());
  for (size_t r = 0; r < xv.size() / D; ++r) {
    double squares = 0;
    for (int64_t i = 0; i < D; ++i) squares += xv[r * D + i] * xv[r * D + i];
    const double inv = 1 / std::sqrt(squares / D + 1e-5);
    for (int64_t i = 0; i < D; ++i) {
      int64_t off = 0, rem = i, stride = 1;
      std::vector<int64_t> idx(norm.size());
      for (int64_t d = static_cast<int64_t>(norm.size()) - 1; d >= 0; --d) {
        idx[d] = rem % norm[d];
        rem /= norm[d];
      }
      for (int64_t d = static_cast<int64_t>(scale_shape.size()) - 1; d >= 0; --d) {
        const int64_t nd = static_cast<int64_t>(norm.size() - scale_shape.size()) + d;
        off += (scale_shape[d] == 1 ? 0 : idx[nd]) * stride;
        stride *= scale_shape[d];
      }
      y[r * D + i] = xv[r * D + i] * inv * sv[off];
    }
  }
  OpTester t("RMSNormalization", 23);
  t.Attr("axis", Int(axis)).Input("X", x).Input("scale", scale).Output("Y", x_shape, y, tol, tol).Threads(3).Run();
}

TEST(NnRmsNormalization, AxesScalesAndTypes) {
  RunRmsNorm<float, float>({2, 3, 4, 5}, -1, {5}, 1e-5);
  RunRmsNorm<float, float>({2, 3, 4, 5}, 1, {3, 4, 5}, 1e-5);
  RunRmsNorm<float, float>({2, 3, 4, 5}, -2, {1, 5}, 1e-5);  // broadcast scale
  RunRmsNorm<double, double>({3, 7}, -1, {7}, 1e-12);
  RunRmsNorm<Float16, Float16>({4, 33}, -1, {33}, 3e-3);
  RunRmsNorm<float, Float16>({4, 16}, -1, {16}, 3e-3);  // Y takes the scale's type
  RunRmsNorm<BFloat16, BFloat16>({2, 64}, 0, {2, 64}, 2e-2);
}

TEST(NnRmsNormalization, ScaleThatDoesNotBroadcastIsAnError) {
  OpTester t("RMSNormalization", 23);
  t.Input("X", RandomTensor<float>({2, 6})).Input("scale", RandomTensor<float>({4})).Output("Y", {2, 6}, {});
  ExpectFailure(t, "does not broadcast to the normalized shape");
}

}  // namespace
}  // namespace tob
