// Reductions (Reduce*, ArgMax/ArgMin, CumSum/CumProd, TopK) against float64 references computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

enum class Ref { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

struct ReduceCase {
  const char* op;
  Ref ref;
  int axes_input_since;
  double lo, hi;  // input range keeping the op well conditioned
  double rtol;
};

const ReduceCase kCases[] = {
    {"ReduceSum", Ref::kSum, 13, -2, 2, 1e-5},
    {"ReduceMean", Ref::kMean, 18, -2, 2, 1e-5},
    {"ReduceMax", Ref::kMax, 18, -2, 2, 0},
    {"ReduceMin", Ref::kMin, 18, -2, 2, 0},
    {"ReduceProd", Ref::kProd, 18, 0.7, 1.3, 1e-5},
    {"ReduceL1", Ref::kL1, 18, -2, 2, 1e-5},
    {"ReduceL2", Ref::kL2, 18, -2, 2, 1e-5},
    {"ReduceLogSum", Ref::kLogSum, 18, 0.1, 2, 1e-5},
    {"ReduceLogSumExp", Ref::kLogSumExp, 18, -3, 3, 1e-5},
    {"ReduceSumSquare", Ref::kSumSquare, 18, -2, 2, 1e-5},
};

double Apply(Ref op, const std::vector<double>& v) {
  double r = 0;
  switch (op) {
    case Ref::kSum:
    case Ref::kMean:
    case Ref::kLogSum:
      for (double x : v) r += x;
      if (op == Ref::kMean) r /= static_cast<double>(v.size());
      if (op == Ref::kLogSum) r = std::log(r);
      return r;
    case Ref::kMax:
      r = -std::numeric_limits<double>::infinity();
      for (double x : v) r = std::max(r, x);
      return r;
    case Ref::kMin:
      r = std::numeric_limits<double>::infinity();
      for (double x : v) r = std::min(r, x);
      return r;
    case Ref::kProd:
      r = 1;
      for (double x : v) r *= x;
      return r;
    case Ref::kL1:
      for (double x : v) r += std::fabs(x);
      return r;
    case Ref::kL2:
    case Ref::kSumSquare:
      for (double x : v) r += x * x;
      return op == Ref::kL2 ? std::sqrt(r) : r;
    case Ref::kLogSumExp:
      for (double x : v) r += std::exp(x);
      return std::log(r);
  }
  return r;
}

// Reduces `x` (viewed as `shape`) over the axes set in `mask`; outputs in row-major order of the
// kept dims.
std::vector<double> ReferenceReduce(const std::vector<double>& x, const Shape& shape, const std::vector<bool>& mask,
                                    Ref op) {
  Shape kept;
  for (size_t d = 0; d < shape.size(); ++d) kept.push_back(mask[d] ? 1 : shape[d]);
  std::vector<std::vector<double>> buckets(static_cast<size_t>(NumElements(kept)));
  std::vector<int64_t> strides = ContiguousStrides(kept);
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    int64_t rest = i, out = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      int64_t idx = rest % shape[d];
      rest /= shape[d];
      if (!mask[d]) out += idx * strides[d];
    }
    buckets[out].push_back(x[i]);
  }
  std::vector<double> r;
  for (const auto& b : buckets) r.push_back(Apply(op, b));
  return r;
}

Shape ReducedShape(const Shape& shape, const std::vector<bool>& mask, bool keepdims) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!mask[d]) out.push_back(shape[d]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

// Element-wise equality that also accepts matching infinities and NaNs (ExpectClose cannot).
void ExpectSameValues(const Tensor& actual, const Shape& shape, const std::vector<double>& expected) {
  ASSERT_EQ(actual.shape(), shape);
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.ElementAsDouble(i), e = expected[i];
    if (std::isnan(e)) EXPECT_TRUE(std::isnan(a)) << "element " << i << ": got " << a;
    else EXPECT_EQ(a, e) << "element " << i;
  }
}

// Runs one Reduce* node, passing the axes the way `opset` wants them.
void CheckReduce(const ReduceCase& c, const Tensor& x, const std::vector<int64_t>& axes, bool keepdims, int opset,
                 double rtol, int threads = 2) {
  std::vector<bool> mask(x.rank(), axes.empty());
  for (int64_t a : axes) mask[a < 0 ? a + x.rank() : a] = true;
  OpTester t(c.op, opset);
  t.Input("x", x).Attr("keepdims", Attribute::Int(keepdims ? 1 : 0)).Threads(threads);
  if (opset >= c.axes_input_since) {
    t.Input("axes", Tensor::FromVector<int64_t>(axes, {static_cast<int64_t>(axes.size())}));
  } else if (!axes.empty()) {
    t.Attr("axes", Attribute::Ints(axes));
  }
  t.Output("y", ReducedShape(x.shape(), mask, keepdims), ReferenceReduce(ToDoubles(x), x.shape(), mask, c.ref), rtol,
           1e-6);
  SCOPED_TRACE(std::string(c.op) + " opset " + std::to_string(opset) + " keepdims " + std::to_string(keepdims));
  t.Run();
}

// Every subset of axes of a 3-D and a 4-D tensor (odd subsets with negative axes), keepdims on
// and off, axes as attribute and as input.
TEST(ReductionReduce, AllAxesCombinationsMatchFloat64Reference) {
  for (const ReduceCase& c : kCases) {
    for (const Shape& shape : {Shape{3, 4, 5}, Shape{2, 3, 4, 5}}) {
      Tensor x = RandomTensor<float>(shape, c.lo, c.hi, 7);
      int64_t rank = static_cast<int64_t>(shape.size());
      for (int64_t bits = 0; bits < (1 << rank); ++bits) {
        std::vector<int64_t> axes;
        for (int64_t d = 0; d < rank; ++d)
          if (bits & (1 << d)) axes.push_back(bits % 2 == 1 ? d - rank : d);
        for (bool keepdims : {true, false})
          for (int opset : {c.axes_input_since - 1, c.axes_input_since})
            CheckReduce(c, x, axes, keepdims, opset, c.rtol);
      }
    }
  }
}

TEST(ReductionReduce, LongRowsStayAccurateInFloat32) {
  for (const ReduceCase& c : kCases) {
    if (c.ref == Ref::kProd) continue;
    double lo = std::max(c.lo, 0.05);
    // Contiguous rows, strided columns, one long row (chunked over threads), tall columns.
    for (const Shape& shape : {Shape{8, 4096}, Shape{4096, 8}, Shape{1, 300000}, Shape{200000, 3}}) {
      Tensor x = RandomTensor<float>(shape, lo, c.hi, 11);
      std::vector<int64_t> axes = {shape[0] == 4096 || shape[0] == 200000 ? 0 : 1};
      CheckReduce(c, x, axes, /*keepdims=*/false, 18, 1e-5, /*threads=*/4);
    }
    Tensor all = RandomTensor<float>({64, 1000}, lo, c.hi, 12);
    CheckReduce(c, all, {}, /*keepdims=*/true, 18, 1e-5, /*threads=*/4);
  }
}

TEST(ReductionReduce, MultiThreadedPathsMatchReference) {
  const ReduceCase& sum = kCases[0];
  for (const Shape& shape : {Shape{64, 3000}, Shape{3000, 64}, Shape{16, 300, 40}, Shape{40, 7, 300, 3}}) {
    Tensor x = RandomTensor<float>(shape, 0.05, 2.0, 21);
    int64_t rank = static_cast<int64_t>(shape.size());
    for (int64_t bits = 1; bits < (1 << rank); ++bits) {
      std::vector<int64_t> axes;
      for (int64_t d = 0; d < rank; ++d)
        if (bits & (1 << d)) axes.push_back(d);
      CheckReduce(sum, x, axes, true, 13, 1e-5, /*threads=*/4);
    }
  }
}

TEST(ReductionReduce, OtherDtypes) {
  for (const ReduceCase& c : kCases) {
    Shape shape = {3, 4, 6};
    CheckReduce(c, RandomTensor<double>(shape, c.lo, c.hi, 3), {1}, true, 18, 1e-12);
    CheckReduce(c, RandomTensor<Float16>(shape, c.lo, c.hi, 3), {0, 2}, false, 18, 2e-3);
    CheckReduce(c, RandomTensor<BFloat16>(shape, c.lo, c.hi, 3), {2}, true, 18, 1e-2);
    // A long float16 row: accumulation is float32, so only the final rounding is lost.
    if (c.ref == Ref::kProd) continue;
    CheckReduce(c, RandomTensor<Float16>({2, 5000}, std::max(c.lo, 0.05), c.hi, 3), {1}, true, 18, 2e-3);
  }
  for (const ReduceCase& c : kCases) {
    if (c.ref != Ref::kSum && c.ref != Ref::kMax && c.ref != Ref::kMin && c.ref != Ref::kProd) continue;
    double lo = c.ref == Ref::kProd ? 1 : -50, hi = c.ref == Ref::kProd ? 4 : 50;
    for (std::vector<int64_t> axes : {std::vector<int64_t>{1}, {0, 2}, {}}) {
      if (c.ref == Ref::kProd && axes.empty()) continue;  // 3^60 overflows; the reference does not
      CheckReduce(c, RandomTensor<int32_t>({3, 4, 5}, lo, hi, 5), axes, true, 18, 0);
      CheckReduce(c, RandomTensor<int64_t>({3, 4, 5}, lo, hi, 5), axes, false, 18, 0);
    }
  }
  const ReduceCase& max = kCases[2];
  CheckReduce(max, RandomTensor<int8_t>({4, 9}, -100, 100, 5), {1}, true, 18, 0);
  CheckReduce(max, RandomTensor<uint8_t>({4, 9}, 1, 250, 5), {0}, false, 18, 0);
}

TEST(ReductionReduce, IntegerSumWrapsLikeTwosComplement) {
  Tensor x = Tensor::FromVector<int32_t>({2147483647, 1, 5, -7}, {2, 2});
  OpTester t("ReduceSum", 13);
  t.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({1}, {1}));
  t.Output("y", {2, 1}, {-2147483648.0, -2.0}, 0, 0);
  t.Run();
}

TEST(ReductionReduce, BoolMaxMinAreAnyAll) {
  Tensor x = Tensor::FromVector<bool>({true, false, false, false, true, true}, {3, 2});
  OpTester max("ReduceMax", 20);
  max.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({1}, {1}));
  max.Output("y", {3, 1}, {1, 0, 1}, 0, 0);
  max.Run();
  OpTester min("ReduceMin", 20);
  min.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({1}, {1}));
  min.Output("y", {3, 1}, {0, 0, 1}, 0, 0);
  min.Run();
}

TEST(ReductionReduce, EmptySetFollowsTheSpec) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = Tensor::FromVector<float>({}, {2, 0, 4});
  std::vector<std::pair<const char*, double>> expected = {
      {"ReduceSum", 0}, {"ReduceProd", 1},      {"ReduceMax", -inf},       {"ReduceMin", inf},     {"ReduceL1", 0},
      {"ReduceL2", 0},  {"ReduceLogSum", -inf}, {"ReduceLogSumExp", -inf}, {"ReduceSumSquare", 0}, {"ReduceMean", nan}};
  for (auto [op, value] : expected) {
    OpTester t(op, 18);
    t.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({1}, {1}));
    t.Output("y", {2, 1, 4}, {});
    auto r = t.Compute();
    ASSERT_TRUE(r.ok()) << op << ": " << r.status().ToString();
    SCOPED_TRACE(op);
    ExpectSameValues(r.value()[0], {2, 1, 4}, std::vector<double>(8, value));
  }
  OpTester imax("ReduceMax", 18);
  imax.Input("x", Tensor::FromVector<int32_t>({}, {0, 3})).Input("axes", Tensor::FromVector<int64_t>({0}, {1}));
  imax.Output("y", {1, 3}, std::vector<double>(3, std::numeric_limits<int32_t>::lowest()), 0, 0);
  imax.Run();
  // A zero-sized kept axis: an empty output.
  OpTester none("ReduceSum", 13);
  none.Input("x", Tensor::FromVector<float>({}, {0, 3})).Input("axes", Tensor::FromVector<int64_t>({1}, {1}));
  none.Output("y", {0, 1}, {}, 0, 0);
  none.Run();
}

TEST(ReductionReduce, EmptyAxesReduceAllOrAreANoop) {
  Tensor x = RandomTensor<float>({2, 3}, -2, 2, 9);
  std::vector<double> xs = ToDoubles(x);
  Tensor no_axes = Tensor::FromVector<int64_t>({}, {0});
  OpTester all("ReduceSum", 13);
  all.Input("x", x).Input("axes", no_axes).Attr("keepdims", Attribute::Int(0));
  all.Output("y", {}, ReferenceReduce(xs, {2, 3}, {true, true}, Ref::kSum));
  all.Run();
  OpTester omitted("ReduceMax", 18);
  omitted.Input("x", x);
  omitted.Output("y", {1, 1}, ReferenceReduce(xs, {2, 3}, {true, true}, Ref::kMax));
  omitted.Run();
  OpTester noop("ReduceSum", 13);
  noop.Input("x", x).Input("axes", no_axes).Attr("noop_with_empty_axes", Attribute::Int(1));
  noop.Output("y", {2, 3}, xs);
  noop.Run();
  // A noop still applies the element-wise part: ReduceL2 over nothing is |x|.
  std::vector<double> abs_x;
  for (double v : xs) abs_x.push_back(std::fabs(v));
  OpTester noop_l2("ReduceL2", 18);
  noop_l2.Input("x", x).Attr("noop_with_empty_axes", Attribute::Int(1)).Attr("keepdims", Attribute::Int(0));
  noop_l2.Output("y", {2, 3}, abs_x);
  noop_l2.Run();
}

TEST(ReductionReduce, NaNPropagatesThroughMaxAndMin) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<float> v(40, 1.0f);
  v[17] = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::FromVector<float>(v, {2, 20});
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    OpTester t(op, 18);
    t.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({1}, {1}));
    t.Output("y", {2, 1}, {nan, 1.0});
    t.Run();
  }
}

TEST(ReductionReduce, BadAxesAreErrors) {
  Tensor x = RandomTensor<float>({2, 3}, -1, 1, 1);
  OpTester out_of_range("ReduceSum", 13);
  out_of_range.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({2}, {1}));
  out_of_range.Output("y", {2, 3}, {});
  auto r1 = out_of_range.Compute();
  ASSERT_FALSE(r1.ok());
  EXPECT_NE(r1.status().message().find("out of range"), std::string::npos) << r1.status().message();

  OpTester attr_range("ReduceMean", 17);
  attr_range.Input("x", x).Attr("axes", Attribute::Ints({-3}));
  attr_range.Output("y", {2, 3}, {});
  EXPECT_FALSE(attr_range.Compute().ok());

  OpTester repeated("ReduceMax", 18);
  repeated.Input("x", x).Input("axes", Tensor::FromVector<int64_t>({1, -1}, {2}));
  repeated.Output("y", {2, 3}, {});
  EXPECT_FALSE(repeated.Compute().ok());

  OpTester wrong_form("ReduceL1", 18);
  wrong_form.Input("x", x).Attr("axes", Attribute::Ints({0}));
  wrong_form.Output("y", {2, 3}, {});
  EXPECT_FALSE(wrong_form.Compute().ok());
}

TEST(ReductionReduce, ShapeFunctionDegradesWithoutAxesValue) {
  Graph g;
  g.SetOpset("", 18);
  ASSERT_TRUE(g.AddInput("x", ValueType(DType::kFloat32, Dims{Dim::Symbol("b"), 3, 4})).ok());
  ASSERT_TRUE(g.AddInput("axes", ValueType(DType::kInt64, Dims{2})).ok());
  for (int64_t keepdims : {1, 0}) {
    auto node = g.AddNode("ReduceMean", "", {"x", "axes"}, {"y" + std::to_string(keepdims)},
                          {{"keepdims", Attribute::Int(keepdims)}});
    ASSERT_TRUE(node.ok());
    std::vector<const ValueType*> types = {&g.FindValue("x")->type(), &g.FindValue("axes")->type()};
    InferenceContext ctx(*node.value(), 18, types, {nullptr, nullptr});
    ASSERT_TRUE(OpSchemaRegistry::Global().Infer(ctx).ok());
    const ValueType& y = ctx.output_types()[0];
    EXPECT_EQ(y.dtype, DType::kFloat32);
    ASSERT_TRUE(y.has_rank());
    EXPECT_EQ(y.rank(), keepdims ? 3 : 1);
  }
}

// ---- ArgMax / ArgMin ----

std::vector<double> ReferenceArg(const std::vector<double>& x, const Shape& shape, int64_t axis, bool is_max,
                                 bool last) {
  int64_t outer = 1, inner = 1, n = shape[axis];
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> r;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < n; ++k) {
        double v = x[(o * n + k) * inner + i], b = x[(o * n + best) * inner + i];
        if ((is_max ? v > b : v < b) || (last && v == b)) best = k;
      }
      r.push_back(static_cast<double>(best));
    }
  return r;
}

template <typename T>
void CheckArg(const char* op, const Tensor& x, int64_t axis, bool keepdims, bool last) {
  int64_t a = axis < 0 ? axis + x.rank() : axis;
  std::vector<bool> mask(x.rank(), false);
  mask[a] = true;
  OpTester t(op, 13);
  t.Input("x", x)
      .Attr("axis", Attribute::Int(axis))
      .Attr("keepdims", Attribute::Int(keepdims))
      .Attr("select_last_index", Attribute::Int(last));
  t.Output("y", ReducedShape(x.shape(), mask, keepdims),
           ReferenceArg(ToDoubles(x), x.shape(), a, std::string(op) == "ArgMax", last), 0, 0);
  SCOPED_TRACE(std::string(op) + " axis " + std::to_string(axis) + " last " + std::to_string(last));
  t.Run();
}

TEST(ReductionArg, EveryAxisKeepdimsAndTieBreaking) {
  for (const char* op : {"ArgMax", "ArgMin"}) {
    // Small integers make ties common, so select_last_index matters.
    Tensor ints = RandomTensor<int32_t>({3, 4, 700}, -4, 4, 2);
    Tensor floats = RandomTensor<float>({5, 6, 7}, -2, 2, 2);
    Tensor halves = RandomTensor<Float16>({4, 33, 5}, -1, 1, 2);
    for (int64_t axis : {0, 1, 2, -1})
      for (bool keepdims : {true, false})
        for (bool last : {false, true}) {
          CheckArg<int32_t>(op, ints, axis, keepdims, last);
          CheckArg<float>(op, floats, axis, keepdims, last);
          CheckArg<Float16>(op, halves, axis, keepdims, last);
        }
  }
}

TEST(ReductionArg, NaNWinsFirstOrLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor rows = Tensor::FromVector<float>({1, nan, 3, nan, 2, 0}, {1, 6});
  for (bool last : {false, true}) {
    OpTester r("ArgMax", 13);
    r.Input("x", rows).Attr("axis", Attribute::Int(1)).Attr("select_last_index", Attribute::Int(last));
    r.Output("y", {1, 1}, {last ? 3.0 : 1.0}, 0, 0);
    r.Run();
    OpTester c("ArgMin", 13);
    // Two columns so the strided path runs.
    Tensor wide = Tensor::FromVector<float>({1, 1, nan, nan, 3, 3, nan, nan, 2, 2, 0, 0}, {6, 2});
    c.Input("x", wide).Attr("axis", Attribute::Int(0)).Attr("select_last_index", Attribute::Int(last));
    c.Output("y", {1, 2}, {last ? 3.0 : 1.0, last ? 3.0 : 1.0}, 0, 0);
    c.Run();
  }
}

TEST(ReductionArg, BadAxisIsAnError) {
  OpTester t("ArgMax", 13);
  t.Input("x", RandomTensor<float>({2, 3}, -1, 1, 1)).Attr("axis", Attribute::Int(2));
  t.Output("y", {2, 1}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << r.status().message();
}

// ---- CumSum ----

std::vector<double> ReferenceCumSum(const std::vector<double>& x, const Shape& shape, int64_t axis, bool exclusive,
                                    bool reverse) {
  int64_t outer = 1, inner = 1, n = shape[axis];
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  std::vector<double> r(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double acc = 0;
      for (int64_t k = 0; k < n; ++k) {
        int64_t j = reverse ? n - 1 - k : k;
        size_t at = static_cast<size_t>((o * n + j) * inner + i);
        if (exclusive) {
          r[at] = acc;
          acc += x[at];
        } else {
          acc += x[at];
          r[at] = acc;
        }
      }
    }
  return r;
}

TEST(ReductionCumSum, EveryAxisExclusiveAndReverse) {
  Tensor f = RandomTensor<float>({3, 4, 50}, -2, 2, 4);
  Tensor h = RandomTensor<Float16>({3, 4, 50}, -1, 1, 4);
  Tensor i = RandomTensor<int32_t>({3, 4, 50}, -100, 100, 4);
  for (int64_t axis : {0, 1, 2, -2})
    for (bool exclusive : {false, true})
      for (bool reverse : {false, true})
        for (const Tensor* x : {&f, &h, &i}) {
          int64_t a = axis < 0 ? axis + 3 : axis;
          double rtol = x->dtype() == DType::kFloat16 ? 3e-3 : 1e-5;
          OpTester t("CumSum", 14);
          t.Input("x", *x)
              .Input("axis", Tensor::FromVector<int64_t>({axis}, {}))
              .Attr("exclusive", Attribute::Int(exclusive))
              .Attr("reverse", Attribute::Int(reverse));
          t.Output("y", x->shape(), ReferenceCumSum(ToDoubles(*x), x->shape(), a, exclusive, reverse), rtol,
                   x->dtype() == DType::kFloat16 ? 1e-2 : 1e-5);
          SCOPED_TRACE("axis " + std::to_string(axis) + " exclusive " + std::to_string(exclusive) + " reverse " +
                       std::to_string(reverse) + " " + DTypeName(x->dtype()));
          t.Run();
        }
}

TEST(ReductionCumSum, Int32AxisAndBadAxis) {
  Tensor x = RandomTensor<double>({4, 5}, -1, 1, 8);
  OpTester ok("CumSum", 11);
  ok.Input("x", x).Input("axis", Tensor::FromVector<int32_t>({1}, {1}));
  ok.Output("y", {4, 5}, ReferenceCumSum(ToDoubles(x), {4, 5}, 1, false, false), 1e-12);
  ok.Run();
  OpTester bad("CumSum", 14);
  bad.Input("x", x).Input("axis", Tensor::FromVector<int64_t>({2}, {}));
  bad.Output("y", {4, 5}, {});
  auto r = bad.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("out of range"), std::string::npos) << r.status().message();
}

// ---- CumProd ----

TEST(ReductionCumProd, EveryAxisExclusiveAndReverseMatchFloat64) {
  // Values near 1 keep a product of 30 factors well conditioned.
  Tensor x = RandomTensor<float>({3, 30, 4}, 0.7, 1.3, 21);
  const std::vector<double> xd = ToDoubles(x);
  for (int64_t axis : {0, 1, 2, -1})
    for (bool exclusive : {false, true})
      for (bool reverse : {false, true}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        int64_t outer = 1, inner = 1, n = x.dim(a);
        for (int64_t d = 0; d < a; ++d) outer *= x.dim(d);
        for (int64_t d = a + 1; d < 3; ++d) inner *= x.dim(d);
        std::vector<double> ref(xd.size());
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            double acc = 1;
            for (int64_t k = 0; k < n; ++k) {
              const int64_t j = reverse ? n - 1 - k : k;
              const size_t at = static_cast<size_t>((o * n + j) * inner + i);
              if (exclusive) ref[at] = acc;
              acc *= xd[at];
              if (!exclusive) ref[at] = acc;
            }
          }
        OpTester t("CumProd", 26);
        t.Input("x", x)
            .Input("axis", Tensor::FromVector<int64_t>({axis}, {}))
            .Attr("exclusive", Attribute::Int(exclusive))
            .Attr("reverse", Attribute::Int(reverse));
        t.Output("y", x.shape(), ref, 1e-5, 1e-6);
        SCOPED_TRACE("axis " + std::to_string(axis) + " exclusive " + std::to_string(exclusive) + " reverse " +
                     std::to_string(reverse));
        t.Run();
      }
}

TEST(ReductionCumProd, IntegerProductsWrap) {
  // 2^40 does not fit int32: the product wraps modulo 2^32 (0 from 2^32 on).
  std::vector<int32_t> twos(40, 2);
  std::vector<double> expected;
  uint32_t acc = 1;
  for (int i = 0; i < 40; ++i) {
    acc *= 2u;
    expected.push_back(static_cast<double>(static_cast<int32_t>(acc)));
  }
  OpTester t("CumProd", 26);
  t.Input("x", Tensor::FromVector<int32_t>(twos, {40})).Input("axis", Tensor::FromVector<int64_t>({0}, {}));
  t.Output("y", {40}, expected, 0, 0);
  t.Run();
}

TEST(ReductionCumProd, BadExclusiveIsAnError) {
  OpTester t("CumProd", 26);
  t.Input("x", RandomTensor<float>({4}, 0.5, 1.5, 2))
      .Input("axis", Tensor::FromVector<int64_t>({0}, {}))
      .Attr("exclusive", Attribute::Int(2));
  t.Output("y", {4}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'exclusive' must be 0 or 1"), std::string::npos) << r.status().message();
}

// ---- TopK ----

// The k largest (or smallest) of each row along `axis` in order, equal values lower index first.
void ReferenceTopK(const std::vector<double>& x, const Shape& shape, int64_t axis, int64_t k, bool largest,
                   std::vector<double>* values, std::vector<double>* indices) {
  int64_t outer = 1, inner = 1, n = shape[axis];
  for (int64_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  values->assign(static_cast<size_t>(outer * k * inner), 0);
  indices->assign(values->size(), 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) order[j] = j;
      auto at = [&](int64_t j) { return x[static_cast<size_t>((o * n + j) * inner + i)]; };
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return largest ? at(a) > at(b) : at(a) < at(b); });
      for (int64_t j = 0; j < k; ++j) {
        (*values)[(o * k + j) * inner + i] = at(order[j]);
        (*indices)[(o * k + j) * inner + i] = static_cast<double>(order[j]);
      }
    }
}

TEST(ReductionTopK, LargestAndSmallestAlongEveryAxis) {
  Tensor f = RandomTensor<float>({3, 17, 5}, -4, 4, 31);
  // Integers from a small range: many ties, which must keep the lower index first.
  Tensor i = RandomTensor<int32_t>({3, 17, 5}, -4, 4, 32, 0);
  for (const Tensor* x : {&f, &i})
    for (int64_t axis : {0, 1, 2, -2})
      for (bool largest : {true, false}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        const int64_t k = std::min<int64_t>(4, x->dim(a));
        std::vector<double> values, indices;
        ReferenceTopK(ToDoubles(*x), x->shape(), a, k, largest, &values, &indices);
        Shape out = x->shape();
        out[a] = k;
        OpTester t("TopK", 11);
        t.Input("x", *x)
            .Input("k", Tensor::FromVector<int64_t>({k}, {1}))
            .Attr("axis", Attribute::Int(axis))
            .Attr("largest", Attribute::Int(largest));
        t.Output("values", out, values, 0, 0).Output("indices", out, indices, 0, 0);
        SCOPED_TRACE(std::string(DTypeName(x->dtype())) + " axis " + std::to_string(axis) + " largest " +
                     std::to_string(largest));
        t.Run();
      }
}

TEST(ReductionTopK, KFromTheAttributeBeforeOpset10) {
  Tensor x = RandomTensor<float>({2, 9}, -1, 1, 33);
  std::vector<double> values, indices;
  ReferenceTopK(ToDoubles(x), x.shape(), 1, 3, true, &values, &indices);
  OpTester t("TopK", 1);
  t.Input("x", x).Attr("k", Attribute::Int(3));
  t.Output("values", {2, 3}, values, 0, 0).Output("indices", {2, 3}, indices, 0, 0);
  t.Run();
}

TEST(ReductionTopK, KLargerThanTheAxisIsAnError) {
  OpTester t("TopK", 11);
  t.Input("x", RandomTensor<float>({2, 3}, -1, 1, 34)).Input("k", Tensor::FromVector<int64_t>({4}, {1}));
  t.Output("values", {2, 4}, {}).Output("indices", {2, 4}, {});
  auto r = t.Compute();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("k = 4 exceeds the size 3"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tob::testing
