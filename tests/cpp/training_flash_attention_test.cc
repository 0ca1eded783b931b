// FlashAttention / FlashAttentionGrad against float64 references written as plain loops over the
// logical [batch, heads, seq, size] indices (naive softmax attention with the whole score row,
// and its analytic gradient), on random non-zero data; the analytic reference is itself checked
// against central differences. Shapes cross the kernel's query (64) and key (128) blocks with odd
// lengths, q_seq != kv_seq both ways, causal (top-left, as torch aligns it), bool and float masks
// of each broadcast, GQA, an explicit scale, rows that see no key, float16 / bfloat16 (float32
// inside), and the errors for bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/training/flash_attention_math.h"
#include "training_test_util.h"

namespace tob {
namespace {

using namespace training_test;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct FlashCase {
  int64_t batch = 2, heads = 4, kv_heads = 4, q_seq = 5, kv_seq = 7, head = 8, v_head = 8;
  bool causal = false;
  std::optional<float> scale;
  Shape mask_shape;  // empty: no mask
  bool mask_bool = false;
  bool hide_row = false;  // the mask hides every key of query row 1 (needs a mask with q_seq rows)
  Shape q() const { return {batch, heads, q_seq, head}; }
  Shape k() const { return {batch, kv_heads, kv_seq, head}; }
  Shape v() const { return {batch, kv_heads, kv_seq, v_head}; }
  Shape y() const { return {batch, heads, q_seq, v_head}; }
};

struct FlashData {
  std::vector<double> q, k, v, dy, mask;  // mask as the additive bias (bool: 0 / -inf)
};

template <typename T>
struct FlashTensors {
  Tensor q, k, v, dy, mask;
};

template <typename T>
FlashTensors<T> MakeTensors(const FlashCase& c) {
  FlashTensors<T> t;
  t.q = RandomTensor<T>(c.q(), -1, 1, 21);
  t.k = RandomTensor<T>(c.k(), -1, 1, 22);
  t.v = RandomTensor<T>(c.v(), -1, 1, 23);
  t.dy = RandomTensor<T>(c.y(), -1, 1, 24);
  if (!c.mask_shape.empty()) {
    std::vector<double> bias = ToDoubles(RandomTensor<double>(c.mask_shape, -2, 2, 25));
    const int64_t keys = c.mask_shape.back();
    if (c.hide_row)
      for (int64_t off = keys; off < static_cast<int64_t>(bias.size()); off += c.q_seq * keys)
        for (int64_t j = 0; j < keys; ++j) bias[off + j] = c.mask_bool ? 1.0 : -kInf;  // row 1 of each slice
    if (c.mask_bool) {
      std::vector<bool> visible;
      for (double x : bias) visible.push_back(x < 0.8);
      t.mask = Tensor::FromVector<bool>(visible, c.mask_shape);
    } else {
      t.mask = FromDoubles<T>(bias, c.mask_shape);
    }
  }
  return t;
}

template <typename T>
FlashData ToData(const FlashTensors<T>& t) {
  FlashData d{ToDoubles(t.q), ToDoubles(t.k), ToDoubles(t.v), ToDoubles(t.dy), {}};
  if (t.mask.defined()) {
    d.mask = ToDoubles(t.mask);
    if (t.mask.dtype() == DType::kBool)
      for (double& m : d.mask) m = m != 0 ? 0.0 : -kInf;
  }
  return d;
}

struct FlashRef {
  std::vector<double> y, lse, dq, dk, dv;
};

// Naive attention in float64 over whole score rows; with `grads`, the analytic gradient of
// sum(dY * Y) for the given dY.
FlashRef Reference(const FlashCase& c, const FlashData& d, bool grads = true) {
  FlashRef r;
  r.y.assign(d.dy.size(), 0);
  r.lse.assign(c.batch * c.heads * c.q_seq, 0);
  r.dq.assign(d.q.size(), 0);
  r.dk.assign(d.k.size(), 0);
  r.dv.assign(d.v.size(), 0);
  const double scale = c.scale ? *c.scale : 1 / std::sqrt(static_cast<double>(c.head));
  Shape m4(4 - c.mask_shape.size(), 1);
  m4.insert(m4.end(), c.mask_shape.begin(), c.mask_shape.end());
  auto bias = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    double x = c.causal && j > i ? -kInf : 0.0;
    if (d.mask.empty()) return x;
    const int64_t idx[4] = {m4[0] == 1 ? 0 : b, m4[1] == 1 ? 0 : h, m4[2] == 1 ? 0 : i, m4[3] == 1 ? 0 : j};
    int64_t off = 0;
    for (int dd = 0; dd < 4; ++dd) off = off * m4[dd] + idx[dd];
    return x + d.mask[off];
  };
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.q_seq; ++i) {
        const int64_t g = h / group;
        auto qi = [&](int64_t x) { return d.q[((b * c.heads + h) * c.q_seq + i) * c.head + x]; };
        auto kj = [&](int64_t j, int64_t x) { return d.k[((b * c.kv_heads + g) * c.kv_seq + j) * c.head + x]; };
        auto vj = [&](int64_t j, int64_t x) { return d.v[((b * c.kv_heads + g) * c.kv_seq + j) * c.v_head + x]; };
        const int64_t yi = ((b * c.heads + h) * c.q_seq + i) * c.v_head;
        std::vector<double> s(c.kv_seq), p(c.kv_seq, 0);
        double max = -kInf;
        for (int64_t j = 0; j < c.kv_seq; ++j) {
          double dot = 0;
          for (int64_t x = 0; x < c.head; ++x) dot += qi(x) * kj(j, x);
          s[j] = dot * scale + bias(b, h, i, j);
          max = std::max(max, s[j]);
        }
        double& lse = r.lse[(b * c.heads + h) * c.q_seq + i];
        if (max == -kInf) {
          lse = kInf;  // sees no key: Y = 0, no gradient
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < c.kv_seq; ++j) sum += p[j] = std::exp(s[j] - max);
        for (double& pj : p) pj /= sum;
        lse = max + std::log(sum);
        for (int64_t x = 0; x < c.v_head; ++x)
          for (int64_t j = 0; j < c.kv_seq; ++j) r.y[yi + x] += p[j] * vj(j, x);
        if (!grads) continue;
        // dP_j = dY . V_j; dS_j = P_j (dP_j - sum_l P_l dP_l); dQ = scale dS K; dK_j += scale dS_j Q.
        std::vector<double> dp(c.kv_seq, 0);
        double pdp = 0;
        for (int64_t j = 0; j < c.kv_seq; ++j) {
          for (int64_t x = 0; x < c.v_head; ++x) {
            dp[j] += d.dy[yi + x] * vj(j, x);
            r.dv[((b * c.kv_heads + g) * c.kv_seq + j) * c.v_head + x] += p[j] * d.dy[yi + x];
          }
          pdp += p[j] * dp[j];
        }
        for (int64_t j = 0; j < c.kv_seq; ++j) {
          const double ds = p[j] * (dp[j] - pdp) * scale;
          for (int64_t x = 0; x < c.head; ++x) {
            r.dq[((b * c.heads + h) * c.q_seq + i) * c.head + x] += ds * kj(j, x);
            r.dk[((b * c.kv_heads + g) * c.kv_seq + j) * c.head + x] += ds * qi(x);
          }
        }
      }
  return r;
}

OpTester Forward(const FlashCase& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  OpTester t("FlashAttention", 1, kMicrosoftDomain);
  if (c.causal) t.Attr("is_causal", Int(1));
  if (c.scale) t.Attr("scale", Attribute::Float(*c.scale));
  t.Input("Q", q).Input("K", k).Input("V", v);
  if (mask.defined()) t.Input("attn_mask", mask);
  return t;
}

template <typename T>
void RunFlash(const FlashCase& c, double tol) {
  const FlashTensors<T> t = MakeTensors<T>(c);
  const FlashRef r = Reference(c, ToData(t));
  Forward(c, t.q, t.k, t.v, t.mask)
      .Output("Y", c.y(), r.y, tol, tol)
      .Output("logsumexp", {c.batch, c.heads, c.q_seq}, r.lse, tol, tol)
      .Threads(3)
      .Run();
  // The backward reads Y as the forward saved it (in T) and logsumexp in the compute type.
  OpTester grad("FlashAttentionGrad", 1, kMicrosoftDomain);
  if (c.causal) grad.Attr("is_causal", Int(1));
  if (c.scale) grad.Attr("scale", Attribute::Float(*c.scale));
  grad.Input("dY", t.dy).Input("Q", t.q).Input("K", t.k).Input("V", t.v);
  grad.Input("Y", FromDoubles<T>(r.y, c.y()))
      .Input("logsumexp", FromDoubles<ComputeType<T>>(r.lse, {c.batch, c.heads, c.q_seq}));
  if (t.mask.defined()) grad.Input("attn_mask", t.mask);
  grad.Output("dQ", c.q(), r.dq, tol, tol)
      .Output("dK", c.k(), r.dk, tol, tol)
      .Output("dV", c.v(), r.dv, tol, tol)
      .Threads(3)
      .Run();
}

TEST(TrainingFlashAttention, AnalyticReferenceMatchesFiniteDifferences) {
  FlashCase c;
  c.batch = 1;
  c.heads = 2;
  c.kv_heads = 1;
  c.q_seq = 3;
  c.kv_seq = 4;
  c.head = 3;
  c.v_head = 2;
  c.causal = true;
  c.mask_shape = {3, 4};
  const FlashData d = ToData(MakeTensors<double>(c));
  const FlashRef r = Reference(c, d);
  auto loss = [&](FlashData moved) {
    const FlashRef y = Reference(c, moved, false);
    double l = 0;
    for (size_t i = 0; i < y.y.size(); ++i) l += y.y[i] * d.dy[i];
    return l;
  };
  const std::vector<double> FlashData::*operands[] = {&FlashData::q, &FlashData::k, &FlashData::v};
  const std::vector<double>* grads[] = {&r.dq, &r.dk, &r.dv};
  for (int o = 0; o < 3; ++o) {
    auto f = [&](const std::vector<double>& x) {
      FlashData moved = d;
      const_cast<std::vector<double>&>(moved.*operands[o]) = x;
      return loss(moved);
    };
    const std::vector<double> numeric = NumericGradient(f, d.*operands[o]);
    for (size_t i = 0; i < numeric.size(); ++i) EXPECT_NEAR((*grads[o])[i], numeric[i], 1e-8) << o << " " << i;
  }
}

TEST(TrainingFlashAttention, PlainAndScaled) {
  RunFlash<double>(FlashCase{}, 1e-12);
  RunFlash<float>(FlashCase{}, 1e-5);
  FlashCase scaled;
  scaled.scale = 0.3f;
  scaled.v_head = 5;
  scaled.q_seq = 9;
  scaled.kv_seq = 4;
  RunFlash<double>(scaled, 1e-12);
  RunFlash<float>(scaled, 1e-5);
}

TEST(TrainingFlashAttention, BlocksOddLengthsAndCausal) {
  FlashCase c;  // several query and key blocks, neither length a multiple of a block
  c.batch = 1;
  c.heads = 2;
  c.kv_heads = 2;
  c.q_seq = 150;
  c.kv_seq = 291;
  c.head = 16;
  c.v_head = 12;
  RunFlash<double>(c, 1e-11);
  RunFlash<float>(c, 2e-5);
  c.causal = true;  // top-left: query i sees keys 0..i, the trailing keys of K are seen by none
  RunFlash<double>(c, 1e-11);
  RunFlash<float>(c, 2e-5);
  c.q_seq = 291;  // more queries than keys: the late rows see every key
  c.kv_seq = 150;
  RunFlash<double>(c, 1e-11);
  RunFlash<float>(c, 2e-5);
}

TEST(TrainingFlashAttention, GroupedQueryHeads) {
  FlashCase c;
  c.heads = 6;
  c.kv_heads = 2;
  c.q_seq = 70;
  c.kv_seq = 133;
  c.causal = true;
  RunFlash<double>(c, 1e-11);
  RunFlash<float>(c, 2e-5);
  c.kv_heads = 1;  // multi-query
  c.causal = false;
  c.mask_shape = {2, 1, 70, 133};
  RunFlash<double>(c, 1e-11);
  RunFlash<float>(c, 2e-5);
}

TEST(TrainingFlashAttention, MasksOfEachBroadcast) {
  FlashCase c;
  c.q_seq = 67;
  c.kv_seq = 131;
  for (Shape shape : {Shape{2, 1, 67, 131}, Shape{2, 4, 67, 131}, Shape{67, 131}, Shape{2, 1, 1, 131}, Shape{131},
                      Shape{1, 4, 67, 1}}) {
    c.mask_shape = shape;
    c.mask_bool = false;
    RunFlash<double>(c, 1e-11);
    RunFlash<float>(c, 2e-5);
    if (shape.back() == 1) continue;  // a bool [.., 1] mask hides whole rows or nothing
    c.mask_bool = true;
    c.causal = shape.size() == 2;  // with the causal mask too
    RunFlash<double>(c, 1e-11);
    RunFlash<float>(c, 2e-5);
    c.causal = false;
  }
}

// float16 / bfloat16: float32 inside, each result rounded once (so within a few units of the
// type's roundoff of the float64 result on the same rounded inputs); logsumexp float32.
TEST(TrainingFlashAttention, SixteenBitTypesComputeInFloat32) {
  FlashCase c;
  c.heads = 4;
  c.kv_heads = 2;
  c.q_seq = 70;
  c.kv_seq = 133;
  c.causal = true;
  c.mask_shape = {2, 1, 70, 133};
  RunFlash<Float16>(c, 4e-3);
  RunFlash<BFloat16>(c, 2e-2);
}

// Elementwise error bounds of the bfloat16 path (every product on the bfloat16 GEMM, P and dS
// rounded to bfloat16 as torch's CPU flash attention rounds them): with u = 2^-8, bfloat16's unit
// roundoff, each rounded P or dS term is off by at most u of itself and each result by u of itself
// when stored, so |Y - Y*| <= u sum_j P_j |V_j| + u |Y*|, |dV - dV*| <= u sum_i P_ij |dY_i| +
// u |dV*|, and dQ / dK gain u |dS_ij| per term plus P_ij |d delta_i| from the bfloat16 Y the
// backward reads (delta = dY . Y): scale sum (u |dS_ij| + P_ij |d delta_i|) |K_j| (|Q_i|) + u |dQ*|
// (|dK*|). The float32 sums add ~1e-4 of the absolute sums at most. Y* and the gradients are the
// float64 results on the same bfloat16 inputs.
struct FlashBounds {
  std::vector<double> y, dq, dk, dv;
};

FlashBounds Bf16Bounds(const FlashCase& c, const FlashData& d, const FlashRef& r, const std::vector<double>& y_in) {
  constexpr double u = 1.0 / 256, sums = 1e-4;
  FlashBounds e;
  e.y.assign(r.y.size(), 0);
  e.dq.assign(r.dq.size(), 0);
  e.dk.assign(r.dk.size(), 0);
  e.dv.assign(r.dv.size(), 0);
  const double scale = c.scale ? *c.scale : 1 / std::sqrt(static_cast<double>(c.head));
  Shape m4(4 - c.mask_shape.size(), 1);
  m4.insert(m4.end(), c.mask_shape.begin(), c.mask_shape.end());
  const int64_t group = c.heads / c.kv_heads;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < c.q_seq; ++i) {
        const int64_t g = h / group, qi = (b * c.heads + h) * c.q_seq + i;
        const double lse = r.lse[qi];
        if (std::isinf(lse)) continue;
        double ddelta = 0, delta = 0;
        for (int64_t x = 0; x < c.v_head; ++x) {
          ddelta += std::abs(d.dy[qi * c.v_head + x]) * std::abs(y_in[qi * c.v_head + x] - r.y[qi * c.v_head + x]);
          delta += d.dy[qi * c.v_head + x] * r.y[qi * c.v_head + x];
        }
        for (int64_t j = 0; j < c.kv_seq; ++j) {
          const int64_t kj = (b * c.kv_heads + g) * c.kv_seq + j;
          double s = 0, dp = 0;
          for (int64_t x = 0; x < c.head; ++x) s += d.q[qi * c.head + x] * d.k[kj * c.head + x];
          s *= scale;
          if (c.causal && j > i) continue;
          if (!d.mask.empty()) {
            const int64_t idx[4] = {m4[0] == 1 ? 0 : b, m4[1] == 1 ? 0 : h, m4[2] == 1 ? 0 : i, m4[3] == 1 ? 0 : j};
            int64_t off = 0;
            for (int dd = 0; dd < 4; ++dd) off = off * m4[dd] + idx[dd];
            s += d.mask[off];
          }
          const double p = std::exp(s - lse);
          if (p == 0) continue;
          for (int64_t x = 0; x < c.v_head; ++x) {
            e.y[qi * c.v_head + x] += (u + sums) * p * std::abs(d.v[kj * c.v_head + x]);
            e.dv[kj * c.v_head + x] += (u + sums) * p * std::abs(d.dy[qi * c.v_head + x]);
            dp += d.dy[qi * c.v_head + x] * d.v[kj * c.v_head + x];
          }
          const double ds = (u + sums) * std::abs(p * (dp - delta)) + p * ddelta;
          for (int64_t x = 0; x < c.head; ++x) {
            e.dq[qi * c.head + x] += scale * ds * std::abs(d.k[kj * c.head + x]);
            e.dk[kj * c.head + x] += scale * ds * std::abs(d.q[qi * c.head + x]);
          }
        }
      }
  auto stored = [&](std::vector<double>& bound, const std::vector<double>& exact) {
    for (size_t i = 0; i < bound.size(); ++i) bound[i] += u * std::abs(exact[i]) + 1e-7;
  };
  stored(e.y, r.y);
  stored(e.dq, r.dq);
  stored(e.dk, r.dk);
  stored(e.dv, r.dv);
  return e;
}

void ExpectWithin(const Tensor& got, const std::vector<double>& want, const std::vector<double>& bound,
                  const char* what) {
  const std::vector<double> g = ToDoubles(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int64_t outside = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - want[i]) <= bound[i]) && outside++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << g[i] << ", float64 " << want[i] << ", bound " << bound[i];
  EXPECT_EQ(outside, 0) << what;
}

// bfloat16 on the all-bfloat16 path (both head sizes even, where the CPU has the native GEMM):
// forward and gradients within the bounds above, causal, with a float padding mask and GQA, a bool
// mask, blocks of odd lengths both ways.
TEST(TrainingFlashAttention, Bfloat16ProductsWithinTheirRoundingBounds) {
  FlashCase base;
  base.head = 32;
  base.v_head = 32;
  std::vector<FlashCase> cases;
  FlashCase causal_gqa = base;  // causal, an additive [batch, 1, q, kv] mask, 2 query heads per K/V head
  causal_gqa.heads = 4;
  causal_gqa.kv_heads = 2;
  causal_gqa.q_seq = 70;
  causal_gqa.kv_seq = 133;
  causal_gqa.causal = true;
  causal_gqa.mask_shape = {2, 1, 70, 133};
  cases.push_back(causal_gqa);
  FlashCase padding = base;  // a bool key-padding mask [batch, 1, 1, kv], more queries than one block
  padding.q_seq = 131;
  padding.kv_seq = 67;
  padding.mask_shape = {2, 1, 1, 67};
  padding.mask_bool = true;
  cases.push_back(padding);
  FlashCase odd = base;  // odd lengths across several blocks, an explicit scale, multi-query
  odd.kv_heads = 1;
  odd.q_seq = 151;
  odd.kv_seq = 259;
  odd.scale = 0.2f;
  cases.push_back(odd);
  for (const FlashCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << "q_seq " << c.q_seq << " kv_seq " << c.kv_seq);
    const FlashTensors<BFloat16> t = MakeTensors<BFloat16>(c);
    const FlashData d = ToData(t);
    const FlashRef r = Reference(c, d);
    const Tensor y_in = FromDoubles<BFloat16>(r.y, c.y());  // the backward reads Y as the forward stores it
    const FlashBounds e = Bf16Bounds(c, d, r, ToDoubles(y_in));
    OpTester fwd = Forward(c, t.q, t.k, t.v, t.mask);
    fwd.Output("Y", c.y(), {}).Output("logsumexp", {c.batch, c.heads, c.q_seq}, {}).Threads(3);
    auto outs = fwd.Compute();
    ASSERT_TRUE(outs.ok()) << outs.status().ToString();
    ExpectWithin(outs.value()[0], r.y, e.y, "Y");
    std::vector<double> lse_bound(r.lse.size(), 1e-5);
    ExpectWithin(outs.value()[1], r.lse, lse_bound, "logsumexp");  // float32 sums of the exact scores
    OpTester grad("FlashAttentionGrad", 1, kMicrosoftDomain);
    if (c.causal) grad.Attr("is_causal", Int(1));
    if (c.scale) grad.Attr("scale", Attribute::Float(*c.scale));
    grad.Input("dY", t.dy).Input("Q", t.q).Input("K", t.k).Input("V", t.v).Input("Y", y_in);
    grad.Input("logsumexp", FromDoubles<float>(r.lse, {c.batch, c.heads, c.q_seq}));
    if (t.mask.defined()) grad.Input("attn_mask", t.mask);
    grad.Output("dQ", c.q(), {}).Output("dK", c.k(), {}).Output("dV", c.v(), {}).Threads(3);
    auto grads = grad.Compute();
    ASSERT_TRUE(grads.ok()) << grads.status().ToString();
    ExpectWithin(grads.value()[0], r.dq, e.dq, "dQ");
    ExpectWithin(grads.value()[1], r.dk, e.dk, "dK");
    ExpectWithin(grads.value()[2], r.dv, e.dv, "dV");
  }
}

TEST(TrainingFlashAttention, RowThatSeesNoKeyIsZeroWithInfiniteLogsumexp) {
  FlashCase c;
  c.q_seq = 6;
  c.kv_seq = 9;
  c.mask_shape = {2, 4, 6, 9};
  c.hide_row = true;
  RunFlash<double>(c, 1e-12);
  c.mask_bool = true;
  RunFlash<float>(c, 1e-5);
}

// The CUDA forward's per-score arithmetic (kernels/training/flash_attention_math.h, one key at a
// time), run here on the host: one attention row against the float64 reference, causal rows
// (keys past i hidden), rows with masked keys and a row that sees no key.
TEST(TrainingFlashAttention, CudaRowArithmeticMatchesTheReference) {
  FlashCase c;
  c.batch = 1;
  c.heads = 1;
  c.kv_heads = 1;
  c.q_seq = 9;
  c.kv_seq = 23;
  c.head = 5;
  c.v_head = 3;
  c.mask_shape = {9, 23};
  c.hide_row = true;
  for (bool causal : {false, true}) {
    c.causal = causal;
    const FlashTensors<float> t = MakeTensors<float>(c);
    const FlashData d = ToData(t);
    const FlashRef r = Reference(c, d, false);
    const double scale = 1 / std::sqrt(static_cast<double>(c.head));
    for (int64_t i = 0; i < c.q_seq; ++i) {
      flash::OnlineSoftmax softmax;
      std::vector<float> acc(c.v_head, 0.f);
      for (int64_t j = 0; j < c.kv_seq; ++j) {
        float dot = 0;
        for (int64_t x = 0; x < c.head; ++x) dot += static_cast<float>(d.q[i * c.head + x] * d.k[j * c.head + x]);
        const float s = dot * static_cast<float>(scale) +
                        flash::ScoreBias(causal, i, j, static_cast<float>(d.mask[i * c.kv_seq + j]));
        float p = 0, rescale = 0;
        softmax.Add(s, &p, &rescale);
        for (int64_t x = 0; x < c.v_head; ++x)
          acc[x] = acc[x] * rescale + p * static_cast<float>(d.v[j * c.v_head + x]);
      }
      for (int64_t x = 0; x < c.v_head; ++x)
        EXPECT_NEAR(acc[x] * softmax.Normalizer(), r.y[i * c.v_head + x], 1e-5) << "row " << i << " causal " << causal;
      if (std::isinf(r.lse[i])) EXPECT_EQ(softmax.Logsumexp(), std::numeric_limits<float>::infinity()) << "row " << i;
      else EXPECT_NEAR(softmax.Logsumexp(), r.lse[i], 1e-5) << "row " << i << " causal " << causal;
    }
  }
}

TEST(TrainingFlashAttention, BadInputsNameTheOperand) {
  const Tensor q = RandomTensor<float>({1, 3, 4, 8}, -1, 1, 1);
  const Tensor k = RandomTensor<float>({1, 2, 5, 8}, -1, 1, 2);
  const Tensor v = RandomTensor<float>({1, 2, 5, 8}, -1, 1, 3);
  FlashCase c;
  OpTester heads = Forward(c, q, k, v, Tensor());
  heads.Output("Y", {1, 3, 4, 8}, {});
  ExpectFailure(heads, "heads are not a multiple of K");
  const Tensor k3 = RandomTensor<float>({1, 3, 5, 8}, -1, 1, 2);
  const Tensor v3 = RandomTensor<float>({1, 3, 5, 8}, -1, 1, 3);
  OpTester mask = Forward(c, q, k3, v3, RandomTensor<float>({1, 2, 4, 5}, -1, 1, 4));
  mask.Output("Y", {1, 3, 4, 8}, {});
  ExpectFailure(mask, "does not broadcast");
  OpTester mask_type = Forward(c, q, k3, v3, RandomTensor<double>({4, 5}, -1, 1, 4));
  mask_type.Output("Y", {1, 3, 4, 8}, {});
  ExpectFailure(mask_type, "attn_mask must be bool or Q's dtype");
}

}  // namespace
}  // namespace tob
