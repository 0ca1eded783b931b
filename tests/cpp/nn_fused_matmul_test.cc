// com.microsoft FusedMatMul on the CPU: Y = alpha * op(A) @ op(B) with op swapping the last two
// axes in place (transA / transB), numpy batch broadcasting, every float type, against a float64
// reference; bad attributes and shapes are errors naming the node.
#include <gtest/gtest.h>

#include "core/domain.h"
#include "op_tester.h"

namespace tob {
namespace {

using testing::OpTester;
using testing::RandomTensor;
using testing::ToDoubles;

// Element (i, j) of each matrix of x (shape s, rank >= 2) as a flat offset within its matrix,
// reading x's last two axes swapped when `trans`.
int64_t MatrixOffset(const Shape& s, bool trans, int64_t i, int64_t j) {
  const int64_t cols = s.back();
  return trans ? j * cols + i : i * cols + j;
}

// float64 alpha * op(A) @ op(B), numpy batch broadcasting; a 1-D operand is a vector, its flag
// ignored (onnxruntime's FusedMatMul does the same).
std::vector<double> Reference(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha, Shape* out_shape) {
  Shape as = a.shape(), bs = b.shape();
  const bool av = as.size() == 1, bv = bs.size() == 1;
  if (av) {
    as.insert(as.begin(), 1);
    ta = false;
  }
  if (bv) {
    bs.push_back(1);
    tb = false;
  }
  const int64_t M = ta ? as.back() : as[as.size() - 2], K = ta ? as[as.size() - 2] : as.back();
  const int64_t N = tb ? bs[bs.size() - 2] : bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t r = std::max(ab.size(), bb.size());
  ab.insert(ab.begin(), r - ab.size(), 1);
  bb.insert(bb.begin(), r - bb.size(), 1);
  Shape ob(r);
  for (size_t i = 0; i < r; ++i) ob[i] = std::max(ab[i], bb[i]);
  const std::vector<double> ad = ToDoubles(a), bd = ToDoubles(b);
  const int64_t batch = NumElements(ob);
  std::vector<double> out(batch * M * N);
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < r; ++d) {
      ao = ao * ab[d] + (ab[d] == 1 ? 0 : idx[d]);
      bo = bo * bb[d] + (bb[d] == 1 ? 0 : idx[d]);
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += ad[ao * M * K + MatrixOffset(as, ta, m, k)] * bd[bo * K * N + MatrixOffset(bs, tb, k, n)];
        out[(i * M + m) * N + n] = alpha * s;
      }
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0 && ++idx[d] == ob[d]; --d) idx[d] = 0;
  }
  *out_shape = ob;
  if (!av) out_shape->push_back(M);
  if (!bv) out_shape->push_back(N);
  return out;
}

template <typename T>
void RunFused(const Shape& a_shape, const Shape& b_shape, bool ta, bool tb, float alpha, double tol, int threads = 1,
              uint32_t seed = 11) {
  Tensor a = RandomTensor<T>(a_shape, -1, 1, seed), b = RandomTensor<T>(b_shape, -1, 1, seed + 1);
  Shape out_shape;
  std::vector<double> expected = Reference(a, b, ta, tb, alpha, &out_shape);
  OpTester t("FusedMatMul", 1, kMicrosoftDomain);
  t.Attr("transA", Attribute::Int(ta)).Attr("transB", Attribute::Int(tb));
  if (alpha != 1.f) t.Attr("alpha", Attribute::Float(alpha));
  t.Input("A", a).Input("B", b).Output("Y", out_shape, expected, tol, tol).Threads(threads).Run();
}

// The stored shape of an operand whose op() is rows x cols: batch + [rows, cols], or [cols, rows].
Shape Stored(Shape batch, int64_t rows, int64_t cols, bool trans) {
  batch.push_back(trans ? cols : rows);
  batch.push_back(trans ? rows : cols);
  return batch;
}

TEST(FusedMatMul, TransposedOperandsOfBatchedProducts) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transA " << ta << " transB " << tb);
      // Attention's shapes: [batch, heads, seq, head_dim] and [batch, heads, seq, seq].
      RunFused<float>(Stored({2, 3}, 9, 5, ta), Stored({2, 3}, 5, 9, tb), ta, tb, 1.f, 1e-5);
      RunFused<float>(Stored({2, 3}, 7, 7, ta), Stored({2, 3}, 7, 4, tb), ta, tb, 0.125f, 1e-5);
      RunFused<double>(Stored({3}, 6, 4, ta), Stored({3}, 4, 6, tb), ta, tb, 1.f, 1e-12);
      // Broadcast batch axes, a 2-D operand beside a 3-D one.
      RunFused<float>(Stored({2, 1}, 5, 6, ta), Stored({3}, 6, 5, tb), ta, tb, 1.f, 1e-5);
      RunFused<float>(Stored({4}, 8, 6, ta), Stored({}, 6, 8, tb), ta, tb, 2.f, 1e-5);
      RunFused<float>(Stored({}, 6, 8, ta), Stored({4}, 8, 6, tb), ta, tb, 1.f, 1e-5);
      // Large enough for the packed GEMMs and the thread pool (M > 128 on AVX-512 CPUs).
      RunFused<float>(Stored({2}, 160, 72, ta), Stored({2}, 72, 150, tb), ta, tb, 1.f, 1e-4, 2);
    }
}

TEST(FusedMatMul, SixteenBitTypes) {
  // bfloat16 on the native kernel where the CPU has one (a transposed A is packed, a transposed B
  // read as its panels are packed), float16 widened to float32: one rounding of each result.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "transA " << ta << " transB " << tb);
      RunFused<BFloat16>(Stored({2, 3}, 16, 24, ta), Stored({2, 3}, 24, 16, tb), ta, tb, 1.f, 3e-2);
      RunFused<BFloat16>(Stored({2}, 40, 300, ta), Stored({}, 300, 24, tb), ta, tb, 1.f, 3e-2);  // K past one block
      RunFused<Float16>(Stored({2}, 16, 24, ta), Stored({2}, 24, 16, tb), ta, tb, 0.5f, 5e-3);
    }
}

TEST(FusedMatMul, VectorOperandsIgnoreTheirFlag) {
  RunFused<float>({7}, {2, 3, 5, 7}, true, true, 1.f, 1e-5);
  RunFused<float>({2, 7, 5}, {7}, true, true, 1.f, 1e-5);
}

TEST(FusedMatMul, BadAttributesAndShapesAreErrors) {
  auto run = [](const char* attr, int64_t value, const Shape& bs) {
    return OpTester("FusedMatMul", 1, kMicrosoftDomain)
        .Attr(attr, Attribute::Int(value))
        .Input("A", RandomTensor<float>({2, 3, 4}))
        .Input("B", RandomTensor<float>(bs))
        .Output("Y", {2, 3, 5}, {})
        .Compute();
  };
  for (auto [attr, value] : std::vector<std::pair<const char*, int64_t>>{{"transBatchA", 1}, {"transBatchB", 1}}) {
    auto r = run(attr, value, {2, 4, 5});
    ASSERT_FALSE(r.ok()) << attr;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidModel);
    EXPECT_NE(r.status().message().find("test_node"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("transBatch"), std::string::npos) << r.status().message();
  }
  auto bad_flag = run("transA", 2, {2, 4, 5});
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("transA/transB must be 0 or 1"), std::string::npos);
  // op(B) = B^T is [2, 5, 4]: K = 4 against A's 4 would fit untransposed, not transposed.
  auto mismatch = run("transB", 1, {2, 4, 5});
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find("inner dimensions do not match"), std::string::npos)
      << mismatch.status().message();
}

}  // namespace
}  // namespace tob
