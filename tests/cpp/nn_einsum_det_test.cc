// Einsum and Det against float64 references written here: a naive Einsum that loops over every
// label combination (the kernel contracts through GEMMs) and the Leibniz formula for Det (the
// kernel factorises). Random data; the equations onnx's node tests leave out (chains of three
// operands, ellipsis broadcasting, size-1 broadcasting, traces, sums of a label one operand has
// alone), 16-bit types, and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

struct Operand {
  std::string labels;  // one letter per dim (the reference's spelling; no ellipsis)
  Shape shape;
  std::vector<double> values;
};

// out[labels of `out`] = sum over all other labels of the product of the operands, with dims of
// size 1 broadcast.
std::vector<double> NaiveEinsum(const std::vector<Operand>& ops, const std::string& out, Shape* out_shape) {
  std::map<char, int64_t> size;
  for (const Operand& op : ops)
    for (size_t d = 0; d < op.labels.size(); ++d) size[op.labels[d]] = std::max(size[op.labels[d]], op.shape[d]);
  std::vector<char> labels;
  for (const auto& [c, n] : size) labels.push_back(c);
  out_shape->clear();
  for (char c : out) out_shape->push_back(size[c]);
  std::vector<double> result(static_cast<size_t>(NumElements(*out_shape)), 0.0);
  std::map<char, int64_t> at;
  for (char c : labels) at[c] = 0;
  while (true) {
    double p = 1.0;
    for (const Operand& op : ops) {
      int64_t off = 0;
      for (size_t d = 0; d < op.labels.size(); ++d) off = off * op.shape[d] + (op.shape[d] == 1 ? 0 : at[op.labels[d]]);
      p *= op.values[off];
    }
    int64_t o = 0;
    for (char c : out) o = o * size[c] + at[c];
    result[o] += p;
    size_t k = labels.size();
    while (k > 0) {
      --k;
      if (++at[labels[k]] < size[labels[k]]) break;
      at[labels[k]] = 0;
      if (k == 0) return result;
    }
    if (labels.empty()) return result;
  }
}

void CheckEinsum(const std::string& equation, const std::vector<Operand>& ops, const std::string& out,
                 double rtol = 1e-5, double atol = 1e-5) {
  Shape shape;
  const std::vector<double> ref = NaiveEinsum(ops, out, &shape);
  OpTester t("Einsum", 12);
  t.Attr("equation", Attribute::String(equation));
  for (size_t i = 0; i < ops.size(); ++i) {
    std::vector<float> v(ops[i].values.begin(), ops[i].values.end());
    t.Input("x" + std::to_string(i), Tensor::FromVector<float>(v, ops[i].shape));
  }
  t.Output("y", shape, ref, rtol, atol);
  SCOPED_TRACE(equation);
  t.Run();
}

Operand Rand(const std::string& labels, Shape shape, uint32_t seed) {
  Tensor t = RandomTensor<float>(shape, -1, 1, seed);
  return Operand{labels, shape, ToDoubles(t)};
}

TEST(NnEinsum, ContractionsMatchTheNaiveSum) {
  CheckEinsum("bij,bjk->bik", {Rand("bij", {3, 4, 5}, 1), Rand("bjk", {3, 5, 2}, 2)}, "bik");
  CheckEinsum("ij,jk", {Rand("ij", {4, 6}, 3), Rand("jk", {6, 3}, 4)}, "ik");  // implicit output
  CheckEinsum("ba", {Rand("ba", {3, 4}, 5)}, "ab");                            // implicit: sorted labels
  CheckEinsum("i,i", {Rand("i", {7}, 6), Rand("i", {7}, 7)}, "");
  CheckEinsum("ab,cd->abcd", {Rand("ab", {2, 3}, 8), Rand("cd", {4, 2}, 9)}, "abcd");  // outer product
  CheckEinsum("abc,cd,de->bae", {Rand("abc", {2, 3, 4}, 10), Rand("cd", {4, 5}, 11), Rand("de", {5, 3}, 12)}, "bae");
  // 'x' only in the first operand and not in the output: summed before the GEMM.
  CheckEinsum("xij,jk->ik", {Rand("xij", {3, 2, 4}, 13), Rand("jk", {4, 5}, 14)}, "ik");
  CheckEinsum("ij->", {Rand("ij", {3, 4}, 15)}, "");
  CheckEinsum("Ab,bA->A", {Rand("Ab", {3, 4}, 16), Rand("bA", {4, 3}, 17)}, "A");
}

TEST(NnEinsum, DiagonalsAndTraces) {
  // "ii": the trace (implicit output empty); "ii->i": the diagonal. The reference spells the
  // diagonal as one label read twice, i.e. the same values at (i, i).
  Tensor m = RandomTensor<float>({4, 4}, -1, 1, 20);
  const std::vector<double> v = ToDoubles(m);
  double trace = 0;
  std::vector<double> diag;
  for (int i = 0; i < 4; ++i) {
    trace += v[i * 5];
    diag.push_back(v[i * 5]);
  }
  OpTester tr("Einsum", 12);
  tr.Attr("equation", Attribute::String("ii")).Input("x", m).Output("y", {}, {trace}, 1e-6, 1e-6);
  tr.Run();
  OpTester dg("Einsum", 12);
  dg.Attr("equation", Attribute::String("ii->i")).Input("x", m).Output("y", {4}, diag, 0, 0);
  dg.Run();
  // A diagonal inside a contraction: "bii,bi->b".
  Tensor a = RandomTensor<float>({2, 3, 3}, -1, 1, 21), b = RandomTensor<float>({2, 3}, -1, 1, 22);
  const std::vector<double> av = ToDoubles(a), bv = ToDoubles(b);
  std::vector<double> ref(2, 0.0);
  for (int n = 0; n < 2; ++n)
    for (int i = 0; i < 3; ++i) ref[n] += av[n * 9 + i * 4] * bv[n * 3 + i];
  OpTester t("Einsum", 12);
  t.Attr("equation", Attribute::String("bii,bi->b")).Input("a", a).Input("b", b).Output("y", {2}, ref, 1e-5, 1e-6);
  t.Run();
}

TEST(NnEinsum, EllipsisAndSizeOneBroadcasting) {
  // "...ij,...jk->...ik" with batch dims [2, 1] and [5] broadcasting to [2, 5].
  Operand a = Rand("pqij", {2, 1, 3, 4}, 30), b = Rand("qjk", {5, 4, 2}, 31);
  Shape shape;
  const std::vector<double> ref = NaiveEinsum({a, b}, "pqik", &shape);
  OpTester t("Einsum", 12);
  t.Attr("equation", Attribute::String("...ij, ...jk -> ...ik"));
  t.Input("a", Tensor::FromVector<float>(std::vector<float>(a.values.begin(), a.values.end()), a.shape));
  t.Input("b", Tensor::FromVector<float>(std::vector<float>(b.values.begin(), b.values.end()), b.shape));
  t.Output("y", shape, ref, 1e-5, 1e-6);
  t.Run();
  // Implicit output with an ellipsis: the ellipsis dims first, then the single letters.
  CheckEinsum("ij,jk", {Rand("ij", {4, 1}, 32), Rand("jk", {3, 2}, 33)}, "ik");  // j broadcast (numpy allows it)
  Operand c = Rand("xyb", {2, 3, 4}, 34);
  Shape s2;
  const std::vector<double> r2 = NaiveEinsum({c}, "xyb", &s2);
  OpTester u("Einsum", 12);
  u.Attr("equation", Attribute::String("...b"));
  u.Input("c", Tensor::FromVector<float>(std::vector<float>(c.values.begin(), c.values.end()), c.shape));
  u.Output("y", s2, r2, 0, 0);
  u.Run();
}

TEST(NnEinsum, Float64And16BitTypes) {
  Tensor a = RandomTensor<double>({3, 4}, -1, 1, 40), b = RandomTensor<double>({4, 5}, -1, 1, 41);
  Shape shape;
  const std::vector<double> ref =
      NaiveEinsum({Operand{"ij", {3, 4}, ToDoubles(a)}, Operand{"jk", {4, 5}, ToDoubles(b)}}, "ki", &shape);
  OpTester t("Einsum", 12);
  t.Attr("equation", Attribute::String("ij,jk->ki")).Input("a", a).Input("b", b).Output("y", shape, ref, 1e-12, 1e-12);
  t.Run();
  // bfloat16 / float16: the products summed in float32, rounded once: within two ulps of the type.
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    Tensor af = RandomTensor<float>({2, 3, 8}, -1, 1, 42), bf = RandomTensor<float>({2, 8, 3}, -1, 1, 43);
    auto narrow = [&](const Tensor& f) {
      std::vector<double> v = ToDoubles(f);
      if (dt == DType::kBFloat16) {
        std::vector<BFloat16> h;
        for (double e : v) h.push_back(BFloat16(static_cast<float>(e)));
        return Tensor::FromVector<BFloat16>(h, f.shape());
      }
      std::vector<Float16> h;
      for (double e : v) h.push_back(Float16(static_cast<float>(e)));
      return Tensor::FromVector<Float16>(h, f.shape());
    };
    Tensor ah = narrow(af), bh = narrow(bf);
    const std::vector<double> r16 = NaiveEinsum(
        {Operand{"bij", {2, 3, 8}, ToDoubles(ah)}, Operand{"bjk", {2, 8, 3}, ToDoubles(bh)}}, "bik", &shape);
    OpTester h("Einsum", 12);
    h.Attr("equation", Attribute::String("bij,bjk->bik")).Input("a", ah).Input("b", bh);
    h.Output("y", shape, r16, dt == DType::kBFloat16 ? 2.0 / 128 : 2.0 / 1024, 1e-2);
    h.Run();
  }
}

TEST(NnEinsum, MalformedEquationsAreNamedErrors) {
  auto expect = [](const std::string& eq, std::vector<Shape> shapes, const std::string& needle) {
    OpTester t("Einsum", 12);
    t.Attr("equation", Attribute::String(eq));
    for (size_t i = 0; i < shapes.size(); ++i)
      t.Input("x" + std::to_string(i), RandomTensor<float>(shapes[i], -1, 1, 50 + static_cast<uint32_t>(i)));
    t.Output("y", {1}, {});
    auto r = t.Compute();
    ASSERT_FALSE(r.ok()) << eq;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << eq << ": " << r.status().message();
  };
  expect("ij,jk->il", {{2, 3}, {3, 4}}, "output label 'l'");
  expect("ij,jk", {{2, 3}}, "2 input terms for 1 inputs");
  expect("ijk->i", {{2, 3}}, "has 3 labels");
  expect("i.j->i", {{2, 3}}, "outside an ellipsis");
  expect("ij,jk->ik", {{2, 3}, {4, 5}}, "label 'j' has size 3");
  expect("ii->i", {{2, 3}}, "label 'i' has size 2");
  expect("...i->i", {{2, 3}}, "its output has no '...'");
  expect("ij->ii", {{2, 3}}, "is repeated");
}

// ---- Det ----

double Leibniz(const std::vector<double>& a, int n, int offset) {
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  double det = 0;
  do {
    int inversions = 0;
    for (int i = 0; i < n; ++i)
      for (int j = i + 1; j < n; ++j) inversions += perm[i] > perm[j];
    double p = inversions % 2 ? -1.0 : 1.0;
    for (int i = 0; i < n; ++i) p *= a[offset + i * n + perm[i]];
    det += p;
  } while (std::next_permutation(perm.begin(), perm.end()));
  return det;
}

TEST(NnDet, BatchedMatchesLeibnizInEveryType) {
  for (int n : {1, 2, 3, 4}) {
    Tensor x = RandomTensor<double>({2, 3, n, n}, -2, 2, 60 + static_cast<uint32_t>(n));
    const std::vector<double> v = ToDoubles(x);
    std::vector<double> ref;
    for (int m = 0; m < 6; ++m) ref.push_back(Leibniz(v, n, m * n * n));
    OpTester d("Det", 22);
    d.Input("x", x).Output("y", {2, 3}, ref, 1e-12, 1e-12);
    SCOPED_TRACE("n = " + std::to_string(n));
    d.Run();
    std::vector<float> f(v.begin(), v.end());
    std::vector<double> fref;
    for (int m = 0; m < 6; ++m) fref.push_back(Leibniz(std::vector<double>(f.begin(), f.end()), n, m * n * n));
    OpTester s("Det", 11);
    s.Input("x", Tensor::FromVector<float>(f, {2, 3, n, n})).Output("y", {2, 3}, fref, 1e-5, 1e-6);
    s.Run();
  }
  // A singular matrix (two equal rows) gives 0; a 2-D input gives a scalar.
  OpTester sing("Det", 22);
  sing.Input("x", Tensor::FromVector<float>({1, 2, 3, 1, 2, 3, 4, 5, 7}, {3, 3})).Output("y", {}, {0.0}, 0, 1e-6);
  sing.Run();
  Tensor h = RandomTensor<float>({4, 3, 3}, -1, 1, 70);
  std::vector<BFloat16> hb;
  for (double e : ToDoubles(h)) hb.push_back(BFloat16(static_cast<float>(e)));
  Tensor hbt = Tensor::FromVector<BFloat16>(hb, {4, 3, 3});
  const std::vector<double> hv = ToDoubles(hbt);
  std::vector<double> href;
  for (int m = 0; m < 4; ++m) href.push_back(Leibniz(hv, 3, m * 9));
  OpTester b16("Det", 22);
  b16.Input("x", hbt).Output("y", {4}, href, 1.0 / 128, 1e-3);  // float64 rounded once to bfloat16
  b16.Run();
}

TEST(NnDet, NonSquareIsAnError) {
  OpTester t("Det", 22);
  t.Input("x", RandomTensor<float>({2, 3, 4}, -1, 1, 71)).Output("y", {2}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("square matrices"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tob::testing
