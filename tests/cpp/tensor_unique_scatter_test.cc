// Unique, TensorScatter and ReverseSequence against references computed here on random data:
// what onnx's node tests leave out (Unique with NaN, integer and bool inputs, an inner axis, all
// four outputs unsorted; TensorScatter on a middle axis with per-batch write indices in both modes;
// ReverseSequence on a 3-D input with batch_axis 0) and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

void ExpectError(OpTester& t, const std::string& needle) {
  auto r = t.Compute();
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// ---- Unique ----

struct UniqueRef {
  std::vector<double> y;
  std::vector<double> indices, inverse, counts;
};

// Flattened unique of `v` (NaN equal to NaN, sorted last), sorted or by first occurrence.
UniqueRef ReferenceUnique(const std::vector<double>& v, bool sorted) {
  auto less = [](double a, double b) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
    return a < b;
  };
  auto same = [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); };
  std::vector<size_t> firsts;  // first occurrence of each distinct value, in order of appearance
  for (size_t i = 0; i < v.size(); ++i) {
    bool seen = false;
    for (size_t f : firsts) seen = seen || same(v[f], v[i]);
    if (!seen) firsts.push_back(i);
  }
  if (sorted) std::stable_sort(firsts.begin(), firsts.end(), [&](size_t a, size_t b) { return less(v[a], v[b]); });
  UniqueRef r;
  for (size_t f : firsts) {
    r.y.push_back(v[f]);
    r.indices.push_back(static_cast<double>(f));
    r.counts.push_back(static_cast<double>(std::count_if(v.begin(), v.end(), [&](double e) { return same(e, v[f]); })));
  }
  for (double e : v)
    for (size_t k = 0; k < firsts.size(); ++k)
      if (same(v[firsts[k]], e)) r.inverse.push_back(static_cast<double>(k));
  return r;
}

TEST(TensorUnique, FlattenedSortedAndUnsortedWithNanAndAllOutputs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs{2.5f, -1.0f, nan, 2.5f, 0.0f, -0.0f, 7.0f, -1.0f, nan, 3.0f, 2.5f, 0.5f};
  std::vector<double> xd(xs.begin(), xs.end());
  for (bool sorted : {true, false}) {
    const UniqueRef ref = ReferenceUnique(xd, sorted);
    OpTester t("Unique", 11);
    t.Attr("sorted", Attribute::Int(sorted ? 1 : 0)).Input("x", Tensor::FromVector<float>(xs, {3, 4}));
    const int64_t k = static_cast<int64_t>(ref.y.size());
    t.Output("y", {k}, ref.y, 0, 0).Output("indices", {k}, ref.indices, 0, 0);
    t.Output("inverse", {12}, ref.inverse, 0, 0).Output("counts", {k}, ref.counts, 0, 0);
    SCOPED_TRACE(sorted ? "sorted" : "unsorted");
    t.Run();
  }
}

TEST(TensorUnique, IntegersAndBools) {
  Tensor r = RandomTensor<float>({40}, 0, 6, 5, 0.0);
  std::vector<int32_t> xi;
  for (double v : ToDoubles(r)) xi.push_back(static_cast<int32_t>(v) - 3);
  const UniqueRef ref = ReferenceUnique(std::vector<double>(xi.begin(), xi.end()), false);
  OpTester t("Unique", 11);
  t.Attr("sorted", Attribute::Int(0)).Input("x", Tensor::FromVector<int32_t>(xi, {40}));
  const int64_t k = static_cast<int64_t>(ref.y.size());
  t.Output("y", {k}, ref.y, 0, 0).Output("indices", {k}, ref.indices, 0, 0);
  t.Output("inverse", {40}, ref.inverse, 0, 0).Output("counts", {k}, ref.counts, 0, 0);
  t.Run();
  OpTester b("Unique", 11);
  b.Input("x", Tensor::FromVector<bool>({true, false, true, true}, {4}));
  b.Output("y", {2}, {0, 1}, 0, 0).Output("indices", {2}, {1, 0}, 0, 0);
  b.Run();
}

TEST(TensorUnique, InnerAxisComparesSlicesLexicographically) {
  // x [2, 5, 2], axis 1: slice k = (x[0, k, :], x[1, k, :]); slices 1 and 3 are equal.
  std::vector<float> x{3, 1, 0, 2, 5, 5, 0, 2, 3, 0,   // batch 0: (3,1) (0,2) (5,5) (0,2) (3,0)
                       4, 4, 1, 1, 9, 9, 1, 1, 4, 3};  // batch 1: (4,4) (1,1) (9,9) (1,1) (4,3)
  // Slices as 4-tuples: k0 (3,1,4,4), k1 (0,2,1,1), k2 (5,5,9,9), k3 = k1, k4 (3,0,4,3).
  // Sorted: k1 < k4 < k0 < k2.
  const std::vector<int64_t> order{1, 4, 0, 2};
  std::vector<double> y;
  for (int b = 0; b < 2; ++b)
    for (int64_t k : order)
      for (int i = 0; i < 2; ++i) y.push_back(x[(b * 5 + k) * 2 + i]);
  OpTester t("Unique", 11);
  t.Attr("axis", Attribute::Int(-2)).Input("x", Tensor::FromVector<float>(x, {2, 5, 2}));
  t.Output("y", {2, 4, 2}, y, 0, 0).Output("indices", {4}, {1, 4, 0, 2}, 0, 0);
  t.Output("inverse", {5}, {2, 0, 3, 0, 1}, 0, 0).Output("counts", {4}, {2, 1, 1, 1}, 0, 0);
  t.Run();
  OpTester bad("Unique", 11);
  bad.Attr("axis", Attribute::Int(3)).Input("x", Tensor::FromVector<float>(x, {2, 5, 2})).Output("y", {1}, {});
  ExpectError(bad, "axis");
}

// ---- TensorScatter ----

std::vector<double> ReferenceScatter(std::vector<double> cache, const std::vector<double>& update,
                                     const std::vector<int64_t>& write, int64_t b, int64_t mid, int64_t max_seq,
                                     int64_t seq, int64_t inner, bool circular) {
  for (int64_t n = 0; n < b; ++n)
    for (int64_t m = 0; m < mid; ++m)
      for (int64_t s = 0; s < seq; ++s) {
        const int64_t at = circular ? (write[n] + s) % max_seq : write[n] + s;
        for (int64_t i = 0; i < inner; ++i)
          cache[((n * mid + m) * max_seq + at) * inner + i] = update[((n * mid + m) * seq + s) * inner + i];
      }
  return cache;
}

TEST(TensorScatter, LinearAndCircularPerBatchWriteIndices) {
  const int64_t b = 3, heads = 2, max_seq = 6, seq = 3, size = 4;
  Tensor cache = RandomTensor<float>({b, heads, max_seq, size}, -1, 1, 50);
  Tensor update = RandomTensor<float>({b, heads, seq, size}, -1, 1, 51);
  const std::vector<int64_t> linear{0, 3, 2}, circular{4, 5, 1};
  for (bool circ : {false, true}) {
    const std::vector<int64_t>& write = circ ? circular : linear;
    OpTester t("TensorScatter", 24);
    if (circ) t.Attr("mode", Attribute::String("circular"));
    t.Input("cache", cache).Input("update", update).Input("write", Tensor::FromVector<int64_t>(write, {b}));
    t.Output("present", {b, heads, max_seq, size},
             ReferenceScatter(ToDoubles(cache), ToDoubles(update), write, b, heads, max_seq, seq, size, circ), 0, 0);
    SCOPED_TRACE(circ ? "circular" : "linear");
    t.Run();
  }
  // Axis 1 of a 3-D int64 cache, write indices omitted (zeros).
  std::vector<int64_t> c3(2 * 5 * 3), u3(2 * 2 * 3);
  for (size_t i = 0; i < c3.size(); ++i) c3[i] = static_cast<int64_t>(i) + 100;
  for (size_t i = 0; i < u3.size(); ++i) u3[i] = -static_cast<int64_t>(i) - 1;
  std::vector<double> r3 = ReferenceScatter(std::vector<double>(c3.begin(), c3.end()),
                                            std::vector<double>(u3.begin(), u3.end()), {0, 0}, 2, 1, 5, 2, 3, false);
  OpTester t3("TensorScatter", 24);
  t3.Attr("axis", Attribute::Int(1)).Input("cache", Tensor::FromVector<int64_t>(c3, {2, 5, 3}));
  t3.Input("update", Tensor::FromVector<int64_t>(u3, {2, 2, 3})).Output("present", {2, 5, 3}, r3, 0, 0);
  t3.Run();
}

TEST(TensorScatter, LinearWriteOffTheEndIsAnError) {
  OpTester t("TensorScatter", 24);
  t.Input("cache", RandomTensor<float>({2, 4, 2}, -1, 1, 52))
      .Input("update", RandomTensor<float>({2, 2, 2}, -1, 1, 53));
  t.Input("write", Tensor::FromVector<int64_t>({0, 3}, {2})).Output("present", {2, 4, 2}, {});
  ExpectError(t, "write_indices[1] = 3 with 2 new positions does not fit the cache of 4 (linear mode)");
}

// ---- ReverseSequence ----

TEST(TensorReverseSequence, BatchAxisZeroThreeDimensional) {
  const int64_t b = 3, steps = 4, inner = 2;
  Tensor x = RandomTensor<float>({b, steps, inner}, -1, 1, 60);
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<int64_t> lens{4, 0, 2};
  std::vector<double> ref(xv.size());
  for (int64_t n = 0; n < b; ++n)
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t from = t < lens[n] ? lens[n] - 1 - t : t;
        ref[(n * steps + t) * inner + i] = xv[(n * steps + from) * inner + i];
      }
  OpTester t("ReverseSequence", 10);
  t.Attr("batch_axis", Attribute::Int(0)).Attr("time_axis", Attribute::Int(1));
  t.Input("x", x).Input("lens", Tensor::FromVector<int64_t>(lens, {b})).Output("y", {b, steps, inner}, ref, 0, 0);
  t.Run();
  OpTester bad("ReverseSequence", 10);
  bad.Input("x", RandomTensor<float>({4, 2}, -1, 1, 61)).Input("lens", Tensor::FromVector<int64_t>({5, 1}, {2}));
  bad.Output("y", {4, 2}, {});
  ExpectError(bad, "sequence_lens[0] = 5 is outside [0, 4]");
}

}  // namespace
}  // namespace tob::testing
