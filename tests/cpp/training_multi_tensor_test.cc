// Multi-tensor optimizer code (csrc/training): FusedAdam's update against a float64 reference of
// each mode, the vector paths against the scalar host/device function bit for bit, the 16-bit
// conversions against core/half.h, the helpers (L2 norm, scale, non-finite check) against float64
// references, thread-count independence, and bad input.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/float_convert.h"
#include "core/half.h"
#include "framework/thread_pool.h"
#include "training/adam_math.h"
#include "training/multi_tensor_adam.h"
#include "training/multi_tensor_apply.h"
#include "training/multi_tensor_ops.h"

namespace tob::training {
namespace {

// Random non-zero values, magnitudes in [0.05, 2), random signs.
std::vector<float> RandomValues(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mag(0.05f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = scale * (negative(gen) ? -mag(gen) : mag(gen));
  return v;
}

template <typename T>
std::vector<T> Convert(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = T(v[i]);
  return out;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The three modes as their reference libraries write them, in float64.
struct ReferenceAdam {
  AdamHyperParams h;
  std::vector<double> p, m, v;

  void Step(const std::vector<double>& g_in, int64_t t) {
    const double bc1 = h.bias_correction ? 1 - std::pow(h.beta1, t) : 1.0;
    const double bc2 = h.bias_correction ? 1 - std::pow(h.beta2, t) : 1.0;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g_in[i] * h.grad_scale;
      if (h.mode == AdamWMode::kL2Regularization) g += h.weight_decay * p[i];
      if (h.mode == AdamWMode::kAdamWTorch) p[i] *= 1 - h.lr * h.weight_decay;
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      if (h.mode == AdamWMode::kAdamWTransformers) {
        p[i] -= h.lr * std::sqrt(bc2) / bc1 * (m[i] / (std::sqrt(v[i]) + h.eps));
        p[i] -= h.lr * h.weight_decay * p[i];
      } else {
        p[i] -= h.lr / bc1 * (m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + h.eps));
      }
    }
  }
};

AdamHyperParams Hyper(AdamWMode mode) {
  AdamHyperParams h;
  h.lr = 1e-2;
  h.beta1 = 0.85;
  h.beta2 = 0.995;
  h.eps = 1e-6;
  h.weight_decay = 0.05;
  h.mode = mode;
  return h;
}

// Several tensors of awkward sizes: an empty one, vector tails, and one over a segment.
const std::vector<int64_t> kSizes = {37, 0, 1, 1000, MultiTensorPlan::kSegmentElements + 129};

template <typename T>
void CheckAdamAgainstReference(AdamWMode mode, bool bias_correction, double tolerance, double state_tolerance = 1e-5) {
  AdamHyperParams h = Hyper(mode);
  h.bias_correction = bias_correction;
  auto pool = ThreadPool::Shared(2);
  std::vector<std::vector<T>> params, grads;
  std::vector<std::vector<float>> exp_avg, exp_avg_sq;
  std::vector<ReferenceAdam> refs;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    std::vector<float> p = RandomValues(kSizes[t], 100 + t);
    params.push_back(Convert<T>(p));
    exp_avg.emplace_back(kSizes[t], 0.0f);
    exp_avg_sq.emplace_back(kSizes[t], 0.0f);
    ReferenceAdam r{h, {}, std::vector<double>(kSizes[t], 0.0), std::vector<double>(kSizes[t], 0.0)};
    for (const T& x : params.back()) r.p.push_back(static_cast<float>(x));
    refs.push_back(r);
  }
  for (int64_t step = 1; step <= 5; ++step) {
    std::vector<void*> p_ptrs;
    std::vector<const void*> g_ptrs;
    std::vector<float*> m_ptrs, v_ptrs;
    grads.clear();
    for (size_t t = 0; t < kSizes.size(); ++t) {
      grads.push_back(Convert<T>(RandomValues(kSizes[t], 1000 * step + t, 0.1f)));
      p_ptrs.push_back(params[t].data());
      g_ptrs.push_back(grads[t].data());
      m_ptrs.push_back(exp_avg[t].data());
      v_ptrs.push_back(exp_avg_sq[t].data());
    }
    AdamTensorLists lists{p_ptrs, g_ptrs, m_ptrs, v_ptrs, kSizes};
    ASSERT_TRUE(MultiTensorAdam(DTypeOf<T>(), lists, h, step, pool.get()).ok());
    for (size_t t = 0; t < kSizes.size(); ++t) {
      std::vector<double> g(kSizes[t]);
      for (int64_t i = 0; i < kSizes[t]; ++i) g[i] = static_cast<float>(grads[t][i]);
      refs[t].Step(g, step);
      if constexpr (!std::is_same_v<T, float>) {
        // The reference continues from the rounded parameters, as the optimizer does.
        for (int64_t i = 0; i < kSizes[t]; ++i) {
          refs[t].p[i] = static_cast<float>(T(static_cast<float>(refs[t].p[i])));
        }
      }
      for (int64_t i = 0; i < kSizes[t]; ++i) {
        ASSERT_NEAR(static_cast<float>(params[t][i]), refs[t].p[i], tolerance)
            << "mode " << static_cast<int>(mode) << " step " << step << " tensor " << t << " element " << i;
        ASSERT_NEAR(exp_avg[t][i], refs[t].m[i], state_tolerance);
        ASSERT_NEAR(exp_avg_sq[t][i], refs[t].v[i], state_tolerance);
      }
    }
  }
}

TEST(MultiTensor, AdamFloat32MatchesReferenceInEveryMode) {
  for (AdamWMode mode : {AdamWMode::kL2Regularization, AdamWMode::kAdamWTransformers, AdamWMode::kAdamWTorch}) {
    CheckAdamAgainstReference<float>(mode, true, 2e-6);
    CheckAdamAgainstReference<float>(mode, false, 2e-6);
  }
}

TEST(MultiTensor, AdamHalfPrecisionParametersMatchReference) {
  // The parameter is rounded once per step; float32 and float64 arithmetic may round to
  // neighbouring values: two ulps at |p| < 2, and the L2 term carries that into the moments.
  for (AdamWMode mode : {AdamWMode::kL2Regularization, AdamWMode::kAdamWTransformers, AdamWMode::kAdamWTorch}) {
    CheckAdamAgainstReference<Float16>(mode, true, 2e-3, 2e-5);
    CheckAdamAgainstReference<BFloat16>(mode, true, 1.6e-2, 2e-4);
  }
}

TEST(MultiTensor, AdamVectorPathsMatchTheScalarFunctionBitForBit) {
  const int64_t n = 1037;  // every vector width plus a tail
  for (AdamWMode mode : {AdamWMode::kL2Regularization, AdamWMode::kAdamWTransformers, AdamWMode::kAdamWTorch}) {
    AdamHyperParams h = Hyper(mode);
    h.grad_scale = 0.5;
    const AdamScalars s = MakeAdamScalars(h, 3);
    std::vector<float> p = RandomValues(n, 1), g = RandomValues(n, 2), m = RandomValues(n, 3, 0.1f);
    std::vector<float> v = RandomValues(n, 4, 0.1f);
    for (float& x : v) x = std::fabs(x);
    std::vector<float> p2 = p, m2 = m, v2 = v;
    AdamFloat32(s, p.data(), g.data(), m.data(), v.data(), n);
    for (int64_t i = 0; i < n; ++i) AdamUpdate(s, p2[i], g[i], m2[i], v2[i]);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Bits(p[i]), Bits(p2[i])) << "mode " << static_cast<int>(mode) << " element " << i;
      ASSERT_EQ(Bits(m[i]), Bits(m2[i]));
      ASSERT_EQ(Bits(v[i]), Bits(v2[i]));
    }
  }
}

TEST(MultiTensor, AdamResultDoesNotDependOnThreadCount) {
  const std::vector<int64_t> sizes = {300000, 5, 70001};
  auto run = [&](ThreadPool* pool) {
    std::vector<std::vector<float>> p, g, m, v;
    std::vector<void*> pp;
    std::vector<const void*> gp;
    std::vector<float*> mp, vp;
    for (size_t t = 0; t < sizes.size(); ++t) {
      p.push_back(RandomValues(sizes[t], 10 + t));
      g.push_back(RandomValues(sizes[t], 20 + t));
      m.emplace_back(sizes[t], 0.0f);
      v.emplace_back(sizes[t], 0.0f);
    }
    for (size_t t = 0; t < sizes.size(); ++t) {
      pp.push_back(p[t].data());
      gp.push_back(g[t].data());
      mp.push_back(m[t].data());
      vp.push_back(v[t].data());
    }
    EXPECT_TRUE(MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, sizes}, Hyper(AdamWMode::kAdamWTorch), 1, pool).ok());
    return p;
  };
  auto serial = run(nullptr);
  auto pool = ThreadPool::Shared(3);
  auto parallel = run(pool.get());
  for (size_t t = 0; t < sizes.size(); ++t)
    ASSERT_EQ(0, std::memcmp(serial[t].data(), parallel[t].data(), sizes[t] * sizeof(float))) << "tensor " << t;
}

TEST(MultiTensor, AdamRejectsBadInput) {
  std::vector<float> p(4, 1.0f), g(4, 1.0f), m(4, 0.0f), v(4, 0.0f);
  std::vector<void*> pp = {p.data()};
  std::vector<const void*> gp = {g.data()};
  std::vector<float*> mp = {m.data()}, vp = {v.data()};
  std::vector<int64_t> numels = {4};
  const AdamHyperParams h = Hyper(AdamWMode::kAdamWTorch);
  EXPECT_EQ(MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, numels}, h, 1, nullptr).code(), StatusCode::kOk);

  Status s = MultiTensorAdam(DType::kFloat64, {pp, gp, mp, vp, numels}, h, 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("float64"), std::string::npos) << s.message();

  std::vector<int64_t> two = {4, 4};
  EXPECT_EQ(MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, two}, h, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
  std::vector<int64_t> negative = {-1};
  EXPECT_EQ(MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, negative}, h, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
  std::vector<float*> null_m = {nullptr};
  EXPECT_EQ(MultiTensorAdam(DType::kFloat32, {pp, gp, null_m, vp, numels}, h, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, numels}, h, 0, nullptr).code(),
            StatusCode::kInvalidArgument);
  AdamHyperParams bad = h;
  bad.beta1 = 1.0;
  s = MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, numels}, bad, 1, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("beta1"), std::string::npos) << s.message();
  bad = h;
  bad.lr = -1;
  EXPECT_EQ(MultiTensorAdam(DType::kFloat32, {pp, gp, mp, vp, numels}, bad, 1, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST(MultiTensor, BlockConversionsRoundExactlyLikeHalfH) {
  // Every 16-bit pattern to float, and floats (specials, ties, subnormals, overflow) back.
  std::vector<Float16> halves(65536);
  std::vector<BFloat16> bhalves(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    halves[b] = Float16::FromBits(static_cast<uint16_t>(b));
    bhalves[b] = BFloat16::FromBits(static_cast<uint16_t>(b));
  }
  std::vector<float> out(65536);
  ToFloat(halves.data(), out.data(), 65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    float expect = HalfBitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(expect)) ASSERT_TRUE(std::isnan(out[b])) << b;
    else ASSERT_EQ(Bits(out[b]), Bits(expect)) << b;
  }
  ToFloat(bhalves.data(), out.data(), 65536);
  for (uint32_t b = 0; b < 65536; ++b)
    ASSERT_EQ(Bits(out[b]), Bits(BFloat16BitsToFloat(static_cast<uint16_t>(b)))) << b;

  std::vector<float> floats = RandomValues(4000, 7, 100.0f);
  std::mt19937 gen(8);
  for (int i = 0; i < 4000; ++i) {
    uint32_t u = gen();
    float f;
    std::memcpy(&f, &u, 4);
    floats.push_back(f);  // any bit pattern: NaNs, infs, subnormals
  }
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.99f, 1e-8f, 6.1e-5f, 3.0e-8f, 1.0009765625f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN()})
    floats.push_back(f);
  const int64_t n = static_cast<int64_t>(floats.size());
  std::vector<Float16> h(n);
  std::vector<BFloat16> bf(n);
  FromFloat(floats.data(), h.data(), n);
  FromFloat(floats.data(), bf.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t expect = FloatToHalfBits(floats[i]);
    if (std::isnan(floats[i])) ASSERT_TRUE((h[i].bits & 0x7c00) == 0x7c00 && (h[i].bits & 0x3ff) != 0) << i;
    else ASSERT_EQ(h[i].bits, expect) << "float " << floats[i];
    ASSERT_EQ(bf[i].bits, FloatToBFloat16Bits(floats[i])) << "float " << floats[i];
  }
}

TEST(MultiTensor, L2NormMatchesFloat64Reference) {
  auto pool = ThreadPool::Shared(2);
  std::vector<std::vector<float>> data;
  for (size_t t = 0; t < kSizes.size(); ++t) data.push_back(RandomValues(kSizes[t], 40 + t));
  std::vector<const void*> ptrs;
  for (auto& d : data) ptrs.push_back(d.data());
  auto check = [&](DType dtype, const std::vector<const void*>& buffers, auto value_of, double rel) {
    StatusOr<L2NormResult> r = MultiTensorL2Norm(dtype, buffers, kSizes, pool.get());
    ASSERT_TRUE(r.ok()) << r.status().message();
    double total = 0;
    for (size_t t = 0; t < kSizes.size(); ++t) {
      double sum = 0;
      for (int64_t i = 0; i < kSizes[t]; ++i) sum += value_of(t, i) * value_of(t, i);
      total += sum;
      EXPECT_NEAR(r.value().per_tensor[t], std::sqrt(sum), rel * std::sqrt(sum) + 1e-12) << "tensor " << t;
    }
    EXPECT_NEAR(r.value().total, std::sqrt(total), rel * std::sqrt(total));
  };
  check(
      DType::kFloat32, ptrs, [&](size_t t, int64_t i) { return static_cast<double>(data[t][i]); }, 1e-12);

  std::vector<std::vector<BFloat16>> bdata;
  std::vector<const void*> bptrs;
  for (auto& d : data) bdata.push_back(Convert<BFloat16>(d));
  for (auto& d : bdata) bptrs.push_back(d.data());
  auto bf16_value = [&](size_t t, int64_t i) { return static_cast<double>(static_cast<float>(bdata[t][i])); };
  check(DType::kBFloat16, bptrs, bf16_value, 1e-12);

  data[4][12345] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(MultiTensorL2Norm(DType::kFloat32, ptrs, kSizes, pool.get()).value().total));
  EXPECT_EQ(MultiTensorL2Norm(DType::kInt32, ptrs, kSizes, pool.get()).status().code(), StatusCode::kInvalidArgument);
}

TEST(MultiTensor, ScaleConvertsAndFlagsNonFinite) {
  auto pool = ThreadPool::Shared(2);
  std::vector<std::vector<Float16>> src;
  std::vector<std::vector<float>> dst;
  std::vector<const void*> sp;
  std::vector<void*> dp;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    src.push_back(Convert<Float16>(RandomValues(kSizes[t], 60 + t, 100.0f)));
    dst.emplace_back(kSizes[t], 0.0f);
  }
  for (size_t t = 0; t < kSizes.size(); ++t) {
    sp.push_back(src[t].data());
    dp.push_back(dst[t].data());
  }
  StatusOr<bool> r = MultiTensorScale(DType::kFloat16, sp, DType::kFloat32, dp, kSizes, 1.0f / 1024, pool.get());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r.value());
  for (size_t t = 0; t < kSizes.size(); ++t)
    for (int64_t i = 0; i < kSizes[t]; ++i) ASSERT_EQ(dst[t][i], static_cast<float>(src[t][i]) * (1.0f / 1024));

  // float32 in place, then overflow produced by the scale itself.
  std::vector<const void*> in_place_src(dp.begin(), dp.end());
  r = MultiTensorScale(DType::kFloat32, in_place_src, DType::kFloat32, dp, kSizes, 2.0f, pool.get());
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value());
  EXPECT_EQ(dst[4][7], static_cast<float>(src[4][7]) * (1.0f / 1024) * 2.0f);
  dst[3][999] = 3e38f;
  EXPECT_TRUE(MultiTensorScale(DType::kFloat32, in_place_src, DType::kFloat32, dp, kSizes, 2.0f, pool.get()).value());

  // A NaN in a 16-bit source, converted to bfloat16 destinations.
  src[4][kSizes[4] - 1] = Float16::FromBits(0x7e00);
  std::vector<std::vector<BFloat16>> bdst;
  std::vector<void*> bdp;
  for (size_t t = 0; t < kSizes.size(); ++t) bdst.emplace_back(kSizes[t]);
  for (auto& d : bdst) bdp.push_back(d.data());
  r = MultiTensorScale(DType::kFloat16, sp, DType::kBFloat16, bdp, kSizes, 0.5f, pool.get());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value());
  EXPECT_EQ(bdst[0][3].bits, BFloat16(static_cast<float>(src[0][3]) * 0.5f).bits);

  std::vector<void*> short_dst(dp.begin(), dp.end() - 1);
  EXPECT_EQ(MultiTensorScale(DType::kFloat16, sp, DType::kFloat32, short_dst, kSizes, 1.0f, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MultiTensor, HasNonFiniteFindsInfAndNanAnywhere) {
  auto pool = ThreadPool::Shared(2);
  std::vector<std::vector<float>> f32;
  for (size_t t = 0; t < kSizes.size(); ++t) f32.push_back(RandomValues(kSizes[t], 80 + t, 1e30f));
  f32[4][0] = std::numeric_limits<float>::max();  // the largest finite value is finite
  std::vector<const void*> ptrs;
  for (auto& d : f32) ptrs.push_back(d.data());
  EXPECT_FALSE(MultiTensorHasNonFinite(DType::kFloat32, ptrs, kSizes, pool.get()).value());
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    float saved = f32[4][kSizes[4] - 1];
    f32[4][kSizes[4] - 1] = bad;
    EXPECT_TRUE(MultiTensorHasNonFinite(DType::kFloat32, ptrs, kSizes, pool.get()).value()) << bad;
    f32[4][kSizes[4] - 1] = saved;
  }

  std::vector<std::vector<Float16>> f16;
  std::vector<std::vector<BFloat16>> bf16;
  std::vector<const void*> hp, bp;
  for (size_t t = 0; t < kSizes.size(); ++t) {
    f16.push_back(Convert<Float16>(RandomValues(kSizes[t], 90 + t, 1000.0f)));
    bf16.push_back(Convert<BFloat16>(RandomValues(kSizes[t], 95 + t, 1e30f)));
  }
  for (auto& d : f16) hp.push_back(d.data());
  for (auto& d : bf16) bp.push_back(d.data());
  f16[3][5] = Float16(65504.0f);
  EXPECT_FALSE(MultiTensorHasNonFinite(DType::kFloat16, hp, kSizes, pool.get()).value());
  EXPECT_FALSE(MultiTensorHasNonFinite(DType::kBFloat16, bp, kSizes, pool.get()).value());
  f16[3][6] = Float16::FromBits(0xfc00);     // -inf
  bf16[0][36] = BFloat16::FromBits(0x7fc1);  // NaN
  EXPECT_TRUE(MultiTensorHasNonFinite(DType::kFloat16, hp, kSizes, pool.get()).value());
  EXPECT_TRUE(MultiTensorHasNonFinite(DType::kBFloat16, bp, kSizes, pool.get()).value());
  EXPECT_EQ(MultiTensorHasNonFinite(DType::kInt64, hp, kSizes, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(MultiTensor, PlanVisitsEverySegmentOnce) {
  const std::vector<int64_t> sizes = {5, 0, 3 * MultiTensorPlan::kSegmentElements + 1, 70, 200000};
  MultiTensorPlan plan(sizes);
  int64_t covered = 0;
  for (const TensorSegment& s : plan.segments()) {
    EXPECT_GT(s.end, s.begin);
    EXPECT_LE(s.end - s.begin, MultiTensorPlan::kSegmentElements);
    covered += s.end - s.begin;
  }
  EXPECT_EQ(covered, plan.total_elements());
  EXPECT_EQ(plan.total_elements(), 5 + 3 * MultiTensorPlan::kSegmentElements + 1 + 70 + 200000);
  auto pool = ThreadPool::Shared(3);
  std::vector<std::atomic<int>> hits(plan.segments().size());
  plan.Run(pool.get(), [&](size_t index, const TensorSegment&) { hits[index].fetch_add(1); });
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "segment " << i;
}

}  // namespace
}  // namespace tob::training
