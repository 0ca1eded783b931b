// Tensor (data movement) ops: every op against a reference computed here by plain index
// arithmetic, on random non-zero data, over opset variants, negative axes, all element sizes,
// aliasing, shape inference with unknown values, and bad inputs. Indexing ops (Gather*, Scatter*)
// are in tensor_index_ops_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>

#include "op_tester.h"
#include "providers/cpu/tensor/transpose.h"

#include "tensor_test_util.h"

namespace tob {
namespace {

using namespace tensor_test;  // NOLINT: test helpers

TEST(TensorOpsReshape, ZeroAndMinusOne) {
  Tensor x = RandomTensor<float>({2, 3, 4});
  auto ref = ToDoubles(x);
  for (auto [target, expected] : std::vector<std::pair<std::vector<int64_t>, Shape>>{{{4, 2, 3}, {4, 2, 3}},
                                                                                     {{2, -1, 2}, {2, 6, 2}},
                                                                                     {{2, 0, 4, 1}, {2, 3, 4, 1}},
                                                                                     {{2, 0, 1, -1}, {2, 3, 1, 4}},
                                                                                     {{-1}, {24}}}) {
    OpTester t("Reshape", 13);
    t.Input("x", x).Input("shape", I64(target)).Output("y", expected, ref, 0, 0);
    t.Run();
  }
}

TEST(TensorOpsReshape, AllowZeroKeepsZeros) {
  Tensor x = RandomTensor<float>({0, 3, 4});
  OpTester t("Reshape", 14);
  t.Attr("allowzero", Int(1)).Input("x", x).Input("shape", I64({3, 4, 0})).Output("y", {3, 4, 0}, {});
  t.Run();
}

TEST(TensorOpsReshape, BadSizeIsAnError) {
  OpTester t("Reshape", 14);
  t.Input("x", RandomTensor<float>({2, 3})).Input("shape", I64({4, 2})).Output("y", {4, 2}, {});
  ExpectFailure(t, "cannot reshape");
  OpTester t2("Reshape", 14);
  t2.Input("x", RandomTensor<float>({2, 3})).Input("shape", I64({-1, -1})).Output("y", {}, {});
  ExpectFailure(t2, "more than one -1");
}

TEST(TensorOpsReshape, SymbolicShapeInference) {
  Dims in{Dim::Symbol("batch"), Dim::Symbol("seq"), 12, 64};
  auto r = InferStatic("Reshape", 14, {F32(in), I64Type({3})}, {{1, I64({0, 0, -1})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[batch, seq, 768]");
  // [batch, seq, 768] -> [-1, 768]: the -1 is batch*seq, unknown as a single symbol.
  r = InferStatic("Reshape", 14, {F32({Dim::Symbol("b"), Dim::Symbol("s"), 768}), I64Type({2})}, {{1, I64({-1, 768})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[?, 768]");
  // [b, 12, 64] -> [0, -1]: the symbols cancel.
  r = InferStatic("Reshape", 14, {F32({Dim::Symbol("b"), 12, 64}), I64Type({2})}, {{1, I64({0, -1})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[b, 768]");
  // An unknown shape tensor of known length gives the rank.
  r = InferStatic("Reshape", 14, {F32(in), I64Type({3})}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()[0].rank(), 3);
  // Unknown length: unknown rank, dtype still set.
  r = InferStatic("Reshape", 14, {F32(in), I64Type({Dim::Symbol("n")})}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value()[0].has_rank());
  EXPECT_EQ(r.value()[0].dtype, DType::kFloat32);
}

TEST(TensorOpsFlatten, AxesIncludingNegative) {
  Tensor x = RandomTensor<double>({2, 3, 4, 5});
  auto ref = ToDoubles(x);
  for (int64_t axis = -4; axis <= 4; ++axis) {
    int64_t a = axis < 0 ? axis + 4 : axis;
    int64_t outer = 1;
    for (int64_t i = 0; i < a; ++i) outer *= x.dim(i);
    OpTester t("Flatten", 13);
    t.Attr("axis", Int(axis)).Input("x", x).Output("y", {outer, 120 / outer}, ref, 0, 0);
    t.Run();
  }
  OpTester bad("Flatten", 13);
  bad.Attr("axis", Int(5)).Input("x", x).Output("y", {}, {});
  ExpectFailure(bad, "out of range");
}

TEST(TensorOpsSqueeze, AttributeAndInputForms) {
  Tensor x = RandomTensor<int32_t>({1, 3, 1, 5}, -100, 100);
  auto ref = ToDoubles(x);
  OpTester t11("Squeeze", 11);
  t11.Attr("axes", Ints({0, -2})).Input("x", x).Output("y", {3, 5}, ref, 0, 0);
  t11.Run();
  OpTester t13("Squeeze", 13);
  t13.Input("x", x).Input("axes", I64({-4})).Output("y", {3, 1, 5}, ref, 0, 0);
  t13.Run();
  OpTester all("Squeeze", 13);
  all.Input("x", x).Output("y", {3, 5}, ref, 0, 0);
  all.Run();
  OpTester bad("Squeeze", 13);
  bad.Input("x", x).Input("axes", I64({1})).Output("y", {}, {});
  ExpectFailure(bad, "cannot squeeze");
}

TEST(TensorOpsUnsqueeze, AttributeAndInputForms) {
  Tensor x = RandomTensor<Float16>({3, 4});
  auto ref = ToDoubles(x);
  OpTester t11("Unsqueeze", 11);
  t11.Attr("axes", Ints({0, -1})).Input("x", x).Output("y", {1, 3, 4, 1}, ref, 0, 0);
  t11.Run();
  OpTester t13("Unsqueeze", 13);
  t13.Input("x", x).Input("axes", I64({3, 1})).Output("y", {3, 1, 4, 1}, ref, 0, 0);
  t13.Run();
  OpTester dup("Unsqueeze", 13);
  dup.Input("x", x).Input("axes", I64({1, -3})).Output("y", {}, {});
  ExpectFailure(dup, "repeated");
}

TEST(TensorOpsIdentity, CopiesEveryDtype) {
  Tensor b = Tensor::FromVector<bool>({true, false, true}, {3});
  OpTester t("Identity", 21);
  t.Input("x", b).Output("y", {3}, {1, 0, 1}, 0, 0);
  t.Run();
  Tensor u = RandomTensor<uint64_t>({2, 2}, 1, 1000);
  OpTester t2("Identity", 13);
  t2.Input("x", u).Output("y", {2, 2}, ToDoubles(u), 0, 0);
  t2.Run();
}

// Runs an aliasing op's kernel directly, with an output that shares the input's buffer (as the
// executor does when it can) and with a separate one.
TEST(TensorOpsAlias, KernelDoesNothingWhenAliasedAndCopiesOtherwise) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    Graph g;
    g.SetOpset("", 17);
    Tensor x = RandomTensor<float>({2, 1, 6});
    ASSERT_TRUE(g.AddInput("x", ValueType::OfTensor(x)).ok());
    std::vector<std::string> inputs{"x"};
    Tensor second;
    Shape out_shape{2, 1, 6};
    const std::string name = op;
    if (name == "Reshape") {
      second = I64({3, 4});
      out_shape = {3, 4};
    } else if (name == "Squeeze") {
      second = I64({1});
      out_shape = {2, 6};
    } else if (name == "Unsqueeze") {
      second = I64({0});
      out_shape = {1, 2, 1, 6};
    } else if (name == "Flatten") {
      out_shape = {2, 6};
    }
    if (second.defined()) {
      ASSERT_TRUE(g.AddInitializer("s", second).ok());
      inputs.push_back("s");
    }
    auto node = g.AddNode(op, "", inputs, {"y"}, {}, "test_node");
    ASSERT_TRUE(node.ok());
    std::vector<DType> dtypes{DType::kFloat32};
    if (second.defined()) dtypes.push_back(DType::kInt64);
    const KernelDef* def = KernelRegistry::Global().Find(kCpuProvider, "", op, 17, dtypes);
    ASSERT_NE(def, nullptr) << op;
    ASSERT_EQ(def->aliases, (std::vector<std::pair<int, int>>{{0, 0}})) << op;
    auto kernel = def->factory(*node.value());
    ASSERT_TRUE(kernel.ok());
    std::vector<const Tensor*> ins{&x};
    if (second.defined()) ins.push_back(&second);

    Tensor aliased = x.Reshaped(out_shape);
    KernelContext actx(*node.value(), ins, {&aliased}, nullptr, CpuAllocator::Default());
    ASSERT_TRUE(kernel.value()->Compute(actx).ok()) << op;
    EXPECT_TRUE(aliased.SharesDataWith(x));
    EXPECT_EQ(ToDoubles(aliased), ToDoubles(x)) << op;

    auto fresh = Tensor::Allocate(DType::kFloat32, out_shape, CpuAllocator::Default());
    ASSERT_TRUE(fresh.ok());
    KernelContext cctx(*node.value(), ins, {&fresh.value()}, nullptr, CpuAllocator::Default());
    ASSERT_TRUE(kernel.value()->Compute(cctx).ok()) << op;
    EXPECT_FALSE(fresh.value().SharesDataWith(x));
    EXPECT_EQ(ToDoubles(fresh.value()), ToDoubles(x)) << op;
  }
}

TEST(TensorOpsShape, StartEndAndSize) {
  Tensor x = RandomTensor<float>({2, 3, 4, 5});
  OpTester t("Shape", 13);
  t.Input("x", x).Output("y", {4}, {2, 3, 4, 5}, 0, 0);
  t.Run();
  OpTester t15("Shape", 15);
  t15.Attr("start", Int(-3)).Attr("end", Int(-1)).Input("x", x).Output("y", {2}, {3, 4}, 0, 0);
  t15.Run();
  OpTester clamp("Shape", 19);
  clamp.Attr("start", Int(-10)).Attr("end", Int(10)).Input("x", x).Output("y", {4}, {2, 3, 4, 5}, 0, 0);
  clamp.Run();
  OpTester size("Size", 13);
  size.Input("x", x).Output("y", {}, {120}, 0, 0);
  size.Run();
}

// ---------------------------------------------------------------- Transpose

template <typename T>
void CheckTranspose(const Shape& shape, const std::vector<int64_t>& perm, int threads = 2) {
  Tensor x = RandomTensor<T>(shape, -100, 100, 7);
  Shape out_shape;
  auto expected = TransposeReference(ToDoubles(x), shape, perm, &out_shape);
  OpTester t("Transpose", 21);
  t.Attr("perm", Ints(perm)).Input("x", x).Output("y", out_shape, expected, 0, 0).Threads(threads);
  t.Run();
}

TEST(TensorOpsTranspose, AllElementSizes) {
  // Each size through the blocked 2-D path (odd sizes exercise the ragged tile edges), the
  // row-copy path and a general 4-D permutation.
  for (const auto& [shape, perm] :
       std::vector<std::pair<Shape, std::vector<int64_t>>>{{{37, 53}, {1, 0}},
                                                           {{3, 19, 70}, {0, 2, 1}},
                                                           {{2, 5, 3, 8}, {0, 2, 1, 3}},
                                                           {{2, 3, 4, 5}, {3, 1, 0, 2}},
                                                           {{4, 6, 5}, {2, 0, 1}}}) {
    CheckTranspose<float>(shape, perm);
    CheckTranspose<double>(shape, perm);
    CheckTranspose<Float16>(shape, perm);
    CheckTranspose<int8_t>(shape, perm);
    CheckTranspose<int64_t>(shape, perm);
  }
}

TEST(TensorOpsTranspose, AllPermutationsOf3D) {
  std::vector<int64_t> perm{0, 1, 2};
  do {
    CheckTranspose<float>({2, 3, 4}, perm);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(TensorOpsTranspose, DefaultPermReversesAndBoolWorks) {
  Tensor x = Tensor::FromVector<bool>({true, false, false, true, true, false}, {2, 3});
  OpTester t("Transpose", 13);
  t.Input("x", x).Output("y", {3, 2}, {1, 1, 0, 1, 0, 0}, 0, 0);
  t.Run();
}

TEST(TensorOpsTranspose, LargeBatchedMatrixWithThreadsAndUnitDims) {
  CheckTranspose<float>({4, 1, 130, 260}, {0, 1, 3, 2}, 4);  // attention K^T
  CheckTranspose<BFloat16>({2, 64, 12, 33}, {0, 2, 3, 1}, 4);
  CheckTranspose<float>({1, 7, 1, 9}, {2, 0, 1, 3}, 2);  // only size-1 dims move: a copy
}

TEST(TensorOpsTranspose, WrongPermIsAnError) {
  OpTester t("Transpose", 13);
  t.Attr("perm", Ints({0, 0, 1})).Input("x", RandomTensor<float>({2, 3, 4})).Output("y", {}, {});
  ExpectFailure(t, "perm");
  OpTester t2("Transpose", 13);
  t2.Attr("perm", Ints({1, 0})).Input("x", RandomTensor<float>({2, 3, 4})).Output("y", {}, {});
  ExpectFailure(t2, "perm");
}

TEST(TensorOpsTranspose, BytesApiMatchesReferenceOnLargeTiles) {
  // Directly through the shared helper with a real pool: 2-byte and 4-byte micro tiles.
  ThreadPool pool(3);
  Shape shape{3, 200, 136};
  Tensor x = RandomTensor<float>(shape, -5, 5, 3);
  Shape out_shape;
  auto expected = TransposeReference(ToDoubles(x), shape, {0, 2, 1}, &out_shape);
  auto y = Tensor::Allocate(DType::kFloat32, out_shape, CpuAllocator::Default());
  ASSERT_TRUE(y.ok());
  tensor_ops::TransposeBytes(&pool, x.raw_data(), y.value().raw_data(), 4, shape, {0, 2, 1});
  EXPECT_EQ(ToDoubles(y.value()), expected);
}

// ---------------------------------------------------------------- Expand, Tile

TEST(TensorOpsExpand, BroadcastsBothWays) {
  Tensor x = RandomTensor<float>({3, 1});
  auto in = ToDoubles(x);
  std::vector<double> expected;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) expected.push_back(in[i]);
  OpTester t("Expand", 13);
  t.Input("x", x).Input("shape", I64({2, 1, 4})).Output("y", {2, 3, 4}, expected, 0, 0);
  t.Run();
  // A target dim of 1 keeps the input's dim; a shorter target keeps the input's rank.
  Tensor z = RandomTensor<int16_t>({2, 3}, -50, 50);
  OpTester t2("Expand", 8);
  t2.Input("x", z).Input("shape", I64({1, 1})).Output("y", {2, 3}, ToDoubles(z), 0, 0);
  t2.Run();
  OpTester bad("Expand", 13);
  bad.Input("x", RandomTensor<float>({3, 2})).Input("shape", I64({3, 4})).Output("y", {}, {});
  ExpectFailure(bad, "broadcast");
}

TEST(TensorOpsTile, RepeatsPerAxis) {
  for (const auto& [shape, reps] : std::vector<std::pair<Shape, std::vector<int64_t>>>{
           {{2, 3}, {2, 3}}, {{3}, {4}}, {{2, 1, 3}, {1, 5, 2}}, {{2, 3, 4}, {3, 1, 1}}, {{4, 5}, {1, 1}}}) {
    Tensor x = RandomTensor<float>(shape, -3, 3, 11);
    Shape out;
    for (size_t i = 0; i < shape.size(); ++i) out.push_back(shape[i] * reps[i]);
    auto expected = MapReference(ToDoubles(x), shape, out, [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
      for (size_t i = 0; i < o.size(); ++i) (*s)[i] = o[i] % shape[i];
      return true;
    });
    OpTester t("Tile", 13);
    t.Input("x", x).Input("repeats", I64(reps)).Output("y", out, expected, 0, 0).Threads(3);
    t.Run();
  }
  OpTester bad("Tile", 13);
  bad.Input("x", RandomTensor<float>({2, 3})).Input("repeats", I64({2})).Output("y", {}, {});
  ExpectFailure(bad, "repeats");
}

// ---------------------------------------------------------------- Concat, Split

TEST(TensorOpsConcat, EveryAxisIncludingNegative) {
  Tensor a = RandomTensor<float>({2, 3, 4}, -2, 2, 1), b = RandomTensor<float>({2, 3, 4}, -2, 2, 2);
  for (int64_t axis = -3; axis < 3; ++axis) {
    int64_t ax = axis < 0 ? axis + 3 : axis;
    Shape bs{2, 3, 4};
    bs[ax] = 5;
    Tensor c = RandomTensor<float>(bs, -2, 2, 3);
    Shape out{2, 3, 4};
    out[ax] = a.dim(ax) + b.dim(ax) + 5;
    auto va = ToDoubles(a), vb = ToDoubles(b), vc = ToDoubles(c);
    std::vector<double> expected(static_cast<size_t>(NumElements(out)));
    for (int64_t i = 0; i < NumElements(out); ++i) {
      auto o = Unravel(i, out);
      int64_t k = o[ax];
      if (k < a.dim(ax)) {
        expected[i] = va[Ravel(o, a.shape())];
      } else if (k < a.dim(ax) + b.dim(ax)) {
        o[ax] = k - a.dim(ax);
        expected[i] = vb[Ravel(o, b.shape())];
      } else {
        o[ax] = k - a.dim(ax) - b.dim(ax);
        expected[i] = vc[Ravel(o, c.shape())];
      }
    }
    OpTester t("Concat", 13);
    t.Attr("axis", Int(axis)).Input("a", a).Input("b", b).Input("c", c).Output("y", out, expected, 0, 0);
    t.Run();
  }
  OpTester bad("Concat", 13);
  bad.Attr("axis", Int(0)).Input("a", a).Input("b", RandomTensor<float>({2, 4, 4})).Output("y", {}, {});
  ExpectFailure(bad, "incompatible");
}

std::vector<double> SliceAlong(const Tensor& x, int64_t axis, int64_t begin, int64_t len, Shape* out) {
  *out = x.shape();
  (*out)[axis] = len;
  return MapReference(ToDoubles(x), x.shape(), *out, [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
    *s = o;
    (*s)[axis] += begin;
    return true;
  });
}

TEST(TensorOpsSplit, OpsetVariants) {
  Tensor x = RandomTensor<float>({4, 6});
  Shape s0, s1, s2;
  // Opset 11: split attribute, negative axis.
  {
    OpTester t("Split", 11);
    auto e0 = SliceAlong(x, 1, 0, 2, &s0), e1 = SliceAlong(x, 1, 2, 4, &s1);
    t.Attr("axis", Int(-1)).Attr("split", Ints({2, 4})).Input("x", x);
    t.Output("a", s0, e0, 0, 0).Output("b", s1, e1, 0, 0);
    t.Run();
  }
  // Opset 13: split input; and equal parts without it.
  {
    OpTester t("Split", 13);
    auto e0 = SliceAlong(x, 0, 0, 1, &s0), e1 = SliceAlong(x, 0, 1, 3, &s1);
    t.Input("x", x).Input("split", I64({1, 3})).Output("a", s0, e0, 0, 0).Output("b", s1, e1, 0, 0);
    t.Run();
    OpTester eq("Split", 13);
    auto f0 = SliceAlong(x, 1, 0, 3, &s0), f1 = SliceAlong(x, 1, 3, 3, &s1);
    eq.Attr("axis", Int(1)).Input("x", x).Output("a", s0, f0, 0, 0).Output("b", s1, f1, 0, 0);
    eq.Run();
  }
  // Opset 18: num_outputs with an uneven last chunk (7 -> 3, 3, 1).
  {
    Tensor y = RandomTensor<int64_t>({7, 2}, -9, 9);
    OpTester t("Split", 18);
    auto e0 = SliceAlong(y, 0, 0, 3, &s0), e1 = SliceAlong(y, 0, 3, 3, &s1), e2 = SliceAlong(y, 0, 6, 1, &s2);
    t.Attr("num_outputs", Int(3)).Input("x", y);
    t.Output("a", s0, e0, 0, 0).Output("b", s1, e1, 0, 0).Output("c", s2, e2, 0, 0);
    t.Run();
  }
  OpTester bad("Split", 13);
  bad.Input("x", x).Input("split", I64({1, 2})).Output("a", {}, {}).Output("b", {}, {});
  ExpectFailure(bad, "sum to");
}

// ---------------------------------------------------------------- Slice

// Reference: numpy-style slicing with ONNX clamping, written independently of the kernel.
std::vector<double> SliceReference(const Tensor& x, const std::vector<int64_t>& starts,
                                   const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                                   const std::vector<int64_t>& steps, Shape* out) {
  const int64_t rank = x.rank();
  std::vector<int64_t> first(rank, 0), step(rank, 1);
  *out = x.shape();
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i], d = x.dim(a), st = steps[i];
    int64_t s = starts[i] < 0 ? starts[i] + d : starts[i], e = ends[i] < 0 ? ends[i] + d : ends[i];
    std::vector<int64_t> picked;
    if (st > 0) {
      s = std::max<int64_t>(0, std::min(s, d));
      e = std::max<int64_t>(0, std::min(e, d));
      for (int64_t k = s; k < e; k += st) picked.push_back(k);
    } else {
      s = std::max<int64_t>(0, std::min(s, d - 1));
      e = std::max<int64_t>(-1, std::min(e, d - 1));
      for (int64_t k = s; k > e; k += st) picked.push_back(k);
    }
    first[a] = picked.empty() ? 0 : picked[0];
    step[a] = st;
    (*out)[a] = static_cast<int64_t>(picked.size());
  }
  return MapReference(ToDoubles(x), x.shape(), *out, [&](const std::vector<int64_t>& o, std::vector<int64_t>* src) {
    for (int64_t k = 0; k < rank; ++k) (*src)[k] = first[k] + o[k] * step[k];
    return true;
  });
}

TEST(TensorOpsSlice, InputsWithNegativeStepsAndClamping) {
  Tensor x = RandomTensor<float>({5, 6, 7});
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  for (const Case& c : std::vector<Case>{{{1, 0}, {3, 4}, {0, 1}, {1, 1}},
                                         {{0}, {-1}, {-1}, {2}},
                                         {{-1, 10}, {-1000, -100}, {0, 2}, {-1, -2}},  // negative steps, clamped
                                         {{2}, {INT64_MAX}, {1}, {3}},
                                         {{-100}, {100}, {-3}, {1}},  // clamped to the whole axis
                                         {{4}, {2}, {0}, {1}},        // empty
                                         {{0, 0, 0}, {INT64_MAX, INT64_MAX, INT64_MAX}, {2, 1, 0}, {-1, -1, -1}}}) {
    Shape out;
    auto expected = SliceReference(x, c.starts, c.ends, c.axes, c.steps, &out);
    OpTester t("Slice", 13);
    t.Input("x", x).Input("starts", I64(c.starts)).Input("ends", I64(c.ends)).Input("axes", I64(c.axes));
    t.Input("steps", I64(c.steps)).Output("y", out, expected, 0, 0);
    t.Run();
  }
}

TEST(TensorOpsSlice, DefaultAxesInt32AndOpset1Attributes) {
  Tensor x = RandomTensor<int8_t>({4, 5}, -100, 100);
  Shape out;
  auto expected = SliceReference(x, {1, -4}, {3, 5}, {0, 1}, {1, 1}, &out);
  OpTester t("Slice", 10);
  t.Input("x", x).Input("starts", I32({1, -4})).Input("ends", I32({3, 5})).Output("y", out, expected, 0, 0);
  t.Run();
  OpTester t1("Slice", 9);
  t1.Attr("starts", Ints({1, -4})).Attr("ends", Ints({3, 5})).Input("x", x).Output("y", out, expected, 0, 0);
  t1.Run();
  OpTester zero("Slice", 13);
  zero.Input("x", x)
      .Input("starts", I64({0}))
      .Input("ends", I64({1}))
      .Input("axes", I64({0}))
      .Input("steps", I64({0}))
      .Output("y", {}, {});
  ExpectFailure(zero, "step cannot be 0");
}

TEST(TensorOpsSlice, ShapeInferenceWithUnknownStarts) {
  Dims in{Dim::Symbol("b"), 8, 16};
  // Starts not constant, axes constant: only axis 2 becomes unknown.
  auto r = InferStatic("Slice", 13, {F32(in), I64Type({1}), I64Type({1}), I64Type({1})}, {{3, I64({2})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[b, 8, ?]");
  // Everything constant: exact, the symbolic dim sliced whole keeps its symbol.
  r = InferStatic("Slice", 13, {F32(in), I64Type({2}), I64Type({2}), I64Type({2})},
                  {{1, I64({0, 4})}, {2, I64({INT64_MAX, -4})}, {3, I64({0, 2})}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[b, 8, 8]");
}

// ---------------------------------------------------------------- Pad

// numpy.pad semantics: reflect repeats by bouncing between the edges.
int64_t PadSource(int64_t i, int64_t d, const std::string& mode) {
  if (i >= 0 && i < d) return i;
  if (mode == "constant") return -1;
  if (mode == "edge") return std::clamp<int64_t>(i, 0, d - 1);
  if (mode == "wrap") return ((i % d) + d) % d;
  if (d == 1) return 0;
  while (i < 0 || i >= d) i = i < 0 ? -i : 2 * (d - 1) - i;
  return i;
}

std::vector<double> PadReference(const Tensor& x, const std::vector<int64_t>& begin, const std::vector<int64_t>& end,
                                 const std::string& mode, double value, Shape* out) {
  *out = x.shape();
  for (size_t k = 0; k < out->size(); ++k) (*out)[k] += begin[k] + end[k];
  return MapReference(
      ToDoubles(x), x.shape(), *out,
      [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
        for (size_t k = 0; k < o.size(); ++k) {
          (*s)[k] = PadSource(o[k] - begin[k], x.dim(k), mode);
          if ((*s)[k] < 0) return false;
        }
        return true;
      },
      value);
}

TEST(TensorOpsPad, AllModes) {
  Tensor x = RandomTensor<float>({2, 3, 4});
  for (const char* mode : {"constant", "reflect", "edge", "wrap"}) {
    for (const auto& [b, e] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
             {{0, 1, 2}, {1, 2, 3}}, {{1, 0, 7}, {0, 5, 1}}, {{0, 0, 0}, {0, 0, 0}}}) {
      Shape out;
      auto expected = PadReference(x, b, e, mode, 1.5, &out);
      std::vector<int64_t> pads = b;
      pads.insert(pads.end(), e.begin(), e.end());
      OpTester t("Pad", 19);
      t.Attr("mode", Attribute::String(mode)).Input("x", x).Input("pads", I64(pads));
      t.Input("value", Tensor::FromVector<float>({1.5f}, {})).Output("y", out, expected, 0, 0);
      t.Run();
    }
  }
}

TEST(TensorOpsPad, NegativePadsCropAndAxesInput) {
  Tensor x = RandomTensor<int32_t>({3, 6}, -100, 100);
  Shape out;
  auto expected = PadReference(x, {0, -2}, {0, 3}, "constant", 0, &out);
  OpTester t("Pad", 18);
  t.Input("x", x).Input("pads", I64({-2, 3})).Input("", Tensor()).Input("axes", I64({-1}));
  t.Output("y", out, expected, 0, 0);
  t.Run();
  OpTester crop("Pad", 13);
  auto e2 = PadReference(x, {-1, 1}, {-1, -2}, "edge", 0, &out);
  crop.Attr("mode", Attribute::String("edge")).Input("x", x).Input("pads", I64({-1, 1, -1, -2}));
  crop.Output("y", out, e2, 0, 0);
  crop.Run();
}

TEST(TensorOpsPad, Opset2AttributesAndErrors) {
  Tensor x = RandomTensor<double>({2, 2});
  Shape out;
  auto expected = PadReference(x, {1, 0}, {0, 2}, "constant", -3.25, &out);
  OpTester t("Pad", 2);
  t.Attr("pads", Ints({1, 0, 0, 2})).Attr("value", Attribute::Float(-3.25f)).Input("x", x);
  t.Output("y", out, expected, 0, 0);
  t.Run();
  OpTester bad("Pad", 13);
  bad.Input("x", x).Input("pads", I64({1, 1})).Output("y", {}, {});
  ExpectFailure(bad, "pads has 2 entries");
  OpTester mode("Pad", 13);
  mode.Attr("mode", Attribute::String("mirror")).Input("x", x).Input("pads", I64({1, 1, 1, 1})).Output("y", {}, {});
  ExpectFailure(mode, "unknown pad mode");
}

// ---------------------------------------------------------------- Gather family

TEST(TensorOpsDepthSpace, BothModesRoundTrip) {
  const int64_t n = 2, c = 8, h = 3, w = 5, b = 2;
  Tensor x = RandomTensor<float>({n, c, h, w});
  auto xv = ToDoubles(x);
  for (const char* mode : {"DCR", "CRD"}) {
    const bool dcr = std::string(mode) == "DCR";
    Shape out{n, c / (b * b), h * b, w * b};
    auto expected = MapReference(xv, x.shape(), out, [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
      int64_t bh = o[2] % b, bw = o[3] % b, cc = o[1];
      int64_t ch = dcr ? (bh * b + bw) * (c / (b * b)) + cc : cc * b * b + bh * b + bw;
      *s = {o[0], ch, o[2] / b, o[3] / b};
      return true;
    });
    OpTester d2s("DepthToSpace", 13);
    d2s.Attr("blocksize", Int(b)).Attr("mode", Attribute::String(mode)).Input("x", x).Output("y", out, expected, 0, 0);
    d2s.Run();
    // SpaceToDepth (DCR; CRD from opset 28) inverts DepthToSpace of the same mode.
    Tensor y = Tensor::FromVector<float>(std::vector<float>(expected.begin(), expected.end()), out);
    OpTester s2d("SpaceToDepth", dcr ? 13 : 28);
    s2d.Attr("blocksize", Int(b));
    if (!dcr) s2d.Attr("mode", Attribute::String(mode));
    s2d.Input("y", y).Output("x", x.shape(), xv, 0, 0);
    s2d.Run();
  }
  OpTester bad("DepthToSpace", 13);
  bad.Attr("blocksize", Int(3)).Input("x", x).Output("y", {}, {});
  ExpectFailure(bad, "multiple of blocksize");
}

// Every op registered with every dtype handles bool and 8-byte types the same way: spot-check a
// few ops on uint64 and bool data.
TEST(TensorOpsDtypes, ByteMoversOnBoolAndUInt64) {
  Tensor b = Tensor::FromVector<bool>({true, false, true, true, false, false}, {2, 3});
  OpTester c("Concat", 13);
  c.Attr("axis", Int(0)).Input("a", b).Input("b", b).Output("y", {4, 3}, {1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 0}, 0, 0);
  c.Run();
  Tensor u = Tensor::FromVector<uint64_t>({1ull << 60, 2, 3, (1ull << 63) + 5}, {2, 2});
  OpTester s("Slice", 13);
  s.Input("x", u).Input("s", I64({1})).Input("e", I64({2})).Input("a", I64({1}));
  s.Output("y", {2, 1}, {2, static_cast<double>((1ull << 63) + 5)}, 0, 0);
  s.Run();
}

// Big enough that every copy is split across the pool: the parallel paths must agree with the
// references as the serial ones do.
TEST(TensorOpsThreads, LargeCopiesSplitAcrossThreads) {
  Tensor x = RandomTensor<float>({4, 96, 320}, -2, 2, 9);
  auto xv = ToDoubles(x);
  {
    OpTester t("Concat", 13);
    Shape out{4, 192, 320};
    auto e = MapReference(xv, x.shape(), out, [](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
      *s = {o[0], o[1] % 96, o[2]};
      return true;
    });
    t.Attr("axis", Int(1)).Input("a", x).Input("b", x).Output("y", out, e, 0, 0).Threads(4);
    t.Run();
  }
  {
    OpTester t("Split", 18);
    Shape s0, s1;
    auto e0 = SliceAlong(x, 2, 0, 160, &s0), e1 = SliceAlong(x, 2, 160, 160, &s1);
    t.Attr("axis", Int(2)).Attr("num_outputs", Int(2)).Input("x", x);
    t.Output("a", s0, e0, 0, 0).Output("b", s1, e1, 0, 0).Threads(4);
    t.Run();
  }
  {
    Shape out;
    auto e = SliceReference(x, {1, -1}, {96, 0}, {1, 2}, {1, -1}, &out);
    OpTester t("Slice", 13);
    t.Input("x", x).Input("s", I64({1, -1})).Input("e", I64({96, 0})).Input("a", I64({1, 2}));
    t.Input("st", I64({1, -1})).Output("y", out, e, 0, 0).Threads(4);
    t.Run();
  }
  {
    Shape out;
    auto e = PadReference(x, {0, 3, 2}, {1, 0, 5}, "reflect", 0, &out);
    OpTester t("Pad", 13);
    t.Attr("mode", Attribute::String("reflect")).Input("x", x).Input("p", I64({0, 3, 2, 1, 0, 5}));
    t.Output("y", out, e, 0, 0).Threads(4);
    t.Run();
  }
  {
    Tensor row = RandomTensor<float>({1, 1, 320}, -2, 2, 4);
    Shape out{4, 96, 320};
    auto e = MapReference(ToDoubles(row), row.shape(), out, [](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
      *s = {0, 0, o[2]};
      return true;
    });
    OpTester t("Expand", 13);
    t.Input("x", row).Input("s", I64({4, 96, 1})).Output("y", out, e, 0, 0).Threads(4);
    t.Run();
  }
  {
    std::vector<int64_t> ids(300);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37) % 96) - 48;
    Shape out{4, 300, 320};
    auto e = MapReference(xv, x.shape(), out, [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
      *s = {o[0], ids[o[1]] < 0 ? ids[o[1]] + 96 : ids[o[1]], o[2]};
      return true;
    });
    OpTester t("Gather", 13);
    t.Attr("axis", Int(1)).Input("x", x).Input("i", I64(ids)).Output("y", out, e, 0, 0).Threads(4);
    t.Run();
  }
}

// Static inference: values unknown at compile time give the dtype and as much of the shape as
// is certain, never an error.
TEST(TensorOpsShapeInference, DegradesGracefully) {
  Dims x{Dim::Symbol("b"), 1, 64};
  auto r = InferStatic("Expand", 13, {F32(x), I64Type({4})}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[?, ?, ?, 64]");
  r = InferStatic("Tile", 13, {F32(x), I64Type({3})}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()[0].rank(), 3);
  r = InferStatic("Tile", 13, {F32(x), I64Type({3})}, {{1, I64({1, 4, 2})}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[b, 4, 128]");
  r = InferStatic("Split", 13, {F32(x), I64Type({2})}, {}, {{"axis", Int(2)}}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DimsToString(*r.value()[1].shape), "[b, 1, ?]");
  r = InferStatic("Pad", 18, {F32(x), I64Type({6})}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()[0].rank(), 3);
  r = InferStatic("Concat", 13, {F32(x), F32({Dim::Symbol("b"), 3, 64})}, {}, {{"axis", Int(1)}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[b, 4, 64]");
  r = InferStatic("Gather", 13, {F32({1000, 64}), I64Type({Dim::Symbol("b"), Dim::Symbol("s")})}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(DimsToString(*r.value()[0].shape), "[b, s, 64]");
  r = InferStatic("Squeeze", 13, {F32(x)}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value()[0].has_rank());  // whether b is 1 is only known at run time
  r = InferStatic("Unsqueeze", 13, {F32(x), I64Type({2})}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value()[0].rank(), 5);
  // Malformed models still fail.
  r = InferStatic("Concat", 13, {F32(x), F32({2, 64})}, {}, {{"axis", Int(0)}});
  EXPECT_FALSE(r.ok());
  r = InferStatic("Transpose", 13, {F32(x)}, {}, {{"perm", Ints({0, 1})}});
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace tob
