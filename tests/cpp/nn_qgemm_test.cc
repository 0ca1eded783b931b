// The integer GEMM (providers/cpu/nn/qgemm.h) against an int64 reference on random data with the
// extremes (-128/127, 0/255, zero points at the ends of the range), every int8/uint8 pairing,
// per-tensor and per-row/column zero points, odd sizes around the tile edges, both kernels
// (AVX-512 VNNI where the CPU has it, and the portable one), and int32 wrap-around on long sums.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "providers/cpu/nn/qgemm.h"

namespace tob {
namespace {

struct Problem {
  int64_t M, N, K;
  bool a_signed, b_signed;
  bool per_index;
};

int32_t Value(const std::vector<uint8_t>& v, size_t i, bool is_signed) {
  return is_signed ? static_cast<int8_t>(v[i]) : v[i];
}

// Random bytes, a fifth of them at the type's extremes.
std::vector<uint8_t> RandomBytes(size_t n, bool is_signed, std::mt19937& gen) {
  std::uniform_int_distribution<int> d(0, 255), pick(0, 9);
  std::vector<uint8_t> v(n);
  for (auto& x : v) {
    const int p = pick(gen);
    if (p == 0) x = is_signed ? 0x80 : 0x00;       // -128 / 0
    else if (p == 1) x = is_signed ? 0x7F : 0xFF;  // 127 / 255
    else x = static_cast<uint8_t>(d(gen));
  }
  return v;
}

std::vector<int32_t> ZeroPoints(size_t n, bool is_signed, std::mt19937& gen) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<int32_t> z(n);
  for (size_t i = 0; i < n; ++i) {
    const int lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    z[i] = i % 4 == 0 ? lo : i % 4 == 1 ? hi : (is_signed ? static_cast<int8_t>(d(gen)) : d(gen));
  }
  return z;
}

void Check(const Problem& p, qgemm::Isa isa, uint32_t seed) {
  std::mt19937 gen(seed);
  const int64_t lda = p.K + 3, ldb = p.N + 5, ldc = p.N + 2;  // leading dims past the data
  const std::vector<uint8_t> a = RandomBytes(static_cast<size_t>(p.M * lda), p.a_signed, gen);
  const std::vector<uint8_t> b = RandomBytes(static_cast<size_t>(p.K * ldb), p.b_signed, gen);
  const std::vector<int32_t> za = ZeroPoints(p.per_index ? p.M : 1, p.a_signed, gen);
  const std::vector<int32_t> zb = ZeroPoints(p.per_index ? p.N : 1, p.b_signed, gen);
  std::vector<int32_t> c(static_cast<size_t>(p.M * ldc), 12345);
  std::vector<uint8_t> work(qgemm::WorkspaceBytes(p.M, p.N, p.K) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(work.data()) + 63) / 64 * 64);
  ThreadPool pool(2);
  qgemm::Run(p.M, p.N, p.K, {a.data(), lda, p.a_signed, za.data(), p.per_index},
             {b.data(), ldb, p.b_signed, zb.data(), p.per_index}, c.data(), ldc, aligned, &pool, isa);
  for (int64_t m = 0; m < p.M; ++m) {
    for (int64_t n = 0; n < p.N; ++n) {
      int64_t ref = 0;
      const int64_t zam = za[p.per_index ? m : 0], zbn = zb[p.per_index ? n : 0];
      for (int64_t k = 0; k < p.K; ++k)
        ref += (Value(a, m * lda + k, p.a_signed) - zam) * (Value(b, k * ldb + n, p.b_signed) - zbn);
      const auto wrapped = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(ref)));
      ASSERT_EQ(c[m * ldc + n], wrapped) << qgemm::IsaName(isa) << " M " << p.M << " N " << p.N << " K " << p.K
                                         << " a_signed " << p.a_signed << " b_signed " << p.b_signed << " at (" << m
                                         << ", " << n << ")";
    }
    for (int64_t n = p.N; n < ldc; ++n) ASSERT_EQ(c[m * ldc + n], 12345) << "wrote past N";
  }
}

std::vector<qgemm::Isa> Isas() {
  std::vector<qgemm::Isa> r{qgemm::Isa::kPortable};
  if (qgemm::VnniAvailable()) r.push_back(qgemm::Isa::kAvx512Vnni);
  return r;
}

TEST(QGemm, AgreesWithInt64ReferenceAllSignsAndShapes) {
  const int64_t sizes[][3] = {{1, 1, 1},    {1, 33, 7},   {9, 1, 5},     {8, 32, 4},   {7, 31, 3},
                              {17, 65, 13}, {3, 100, 64}, {33, 47, 129}, {64, 96, 255}};
  uint32_t seed = 1;
  for (qgemm::Isa isa : Isas())
    for (const auto& s : sizes)
      for (bool as : {false, true})
        for (bool bs : {false, true})
          for (bool per_index : {false, true}) Check({s[0], s[1], s[2], as, bs, per_index}, isa, seed++);
}

TEST(QGemm, NoZeroPointsAndEmptyK) {
  std::vector<uint8_t> a{255, 255, 255, 255}, b{255, 255, 255, 255};  // uint8 x int8 (-1)
  std::vector<int32_t> c(4, 7);
  std::vector<uint8_t> work(qgemm::WorkspaceBytes(2, 2, 2) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(work.data()) + 63) / 64 * 64);
  for (qgemm::Isa isa : Isas()) {
    qgemm::Run(2, 2, 2, {a.data(), 2, false}, {b.data(), 2, true}, c.data(), 2, aligned, nullptr, isa);
    EXPECT_EQ(c, (std::vector<int32_t>{-510, -510, -510, -510}));
    qgemm::Run(2, 2, 0, {a.data(), 2, false}, {b.data(), 2, true}, c.data(), 2, aligned, nullptr, isa);
    EXPECT_EQ(c, (std::vector<int32_t>{0, 0, 0, 0}));
  }
}

// K = 70000 at 255 x 255: the sums pass 2^31 and wrap, identically on every path.
TEST(QGemm, LongSumsWrapLikeInt32) {
  for (qgemm::Isa isa : Isas()) Check({2, 3, 70000, false, false, false}, isa, 99);
  const int64_t K = 70000;
  std::vector<uint8_t> a(2 * K, 255), b(K * 3, 255);
  std::vector<int32_t> c(6);
  std::vector<uint8_t> work(qgemm::WorkspaceBytes(2, 3, K) + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(work.data()) + 63) / 64 * 64);
  for (qgemm::Isa isa : Isas()) {
    qgemm::Run(2, 3, K, {a.data(), K, false}, {b.data(), 3, false}, c.data(), 3, aligned, nullptr, isa);
    const int64_t exact = K * 255 * 255;  // 4.55e9
    EXPECT_EQ(c[0], static_cast<int32_t>(static_cast<uint32_t>(exact))) << qgemm::IsaName(isa);
  }
}

}  // namespace
}  // namespace tob
