// Indexing ops (Gather, GatherElements, GatherND, ScatterElements, ScatterND) against references
// computed here by index arithmetic, including negative and out-of-range indices.
#include "tensor_test_util.h"

namespace tob {
namespace {

using namespace tensor_test;  // NOLINT: test helpers

TEST(TensorOpsGather, EmbeddingLookupAndOtherAxes) {
  Tensor table = RandomTensor<float>({10, 16});
  auto tv = ToDoubles(table);
  std::vector<int64_t> ids{3, 0, 9, -1, 3, -10};
  std::vector<double> expected;
  for (int64_t id : ids)
    for (int j = 0; j < 16; ++j) expected.push_back(tv[(id < 0 ? id + 10 : id) * 16 + j]);
  OpTester t("Gather", 13);
  t.Input("table", table)
      .Input("ids", Tensor::FromVector<int64_t>(ids, {2, 3}))
      .Output("y", {2, 3, 16}, expected, 0, 0);
  t.Run();

  // Axis 1 (and -2) of a 3-D tensor with int32 indices: single-element rows and wider ones.
  for (Shape shape : {Shape{3, 5, 1}, Shape{3, 5, 3}}) {
    Tensor x = RandomTensor<Float16>(shape, -4, 4, 5);
    std::vector<int32_t> idx{4, -5, 2};
    Shape out{3, 3, shape[2]};
    auto e = MapReference(ToDoubles(x), shape, out, [&](const std::vector<int64_t>& o, std::vector<int64_t>* s) {
      *s = {o[0], idx[o[1]] < 0 ? idx[o[1]] + 5 : idx[o[1]], o[2]};
      return true;
    });
    OpTester g("Gather", 11);
    g.Attr("axis", Int(-2)).Input("x", x).Input("i", I32(idx)).Output("y", out, e, 0, 0);
    g.Run();
  }
  // A scalar index drops the axis.
  OpTester s("Gather", 13);
  s.Attr("axis", Int(1)).Input("x", table).Input("i", Tensor::FromVector<int64_t>({2}, {}));
  std::vector<double> col;
  for (int r = 0; r < 10; ++r) col.push_back(tv[r * 16 + 2]);
  s.Output("y", {10}, col, 0, 0);
  s.Run();
}

TEST(TensorOpsGather, OutOfRangeIndexIsAnError) {
  OpTester t("Gather", 13);
  t.Input("x", RandomTensor<float>({4, 2})).Input("i", I64({1, 4})).Output("y", {2, 2}, {});
  ExpectFailure(t, "index 4");
  OpTester n("Gather", 13);
  n.Input("x", RandomTensor<float>({4, 2})).Input("i", I32({-5})).Output("y", {1, 2}, {});
  ExpectFailure(n, "index -5");
}

TEST(TensorOpsGatherElements, BothAxesNegativeIndicesAndSmallerIndexShape) {
  Tensor x = RandomTensor<double>({3, 4});
  auto xv = ToDoubles(x);
  Tensor idx = Tensor::FromVector<int64_t>({0, -1, 2, 1, -3, 0}, {2, 3});
  auto iv = idx.ToInt64Vector();
  for (int64_t axis : {0, 1, -1}) {
    int64_t a = axis < 0 ? axis + 2 : axis;
    std::vector<double> expected;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 3; ++c) {
        int64_t v = iv[r * 3 + c];
        v = v < 0 ? v + x.dim(a) : v;
        expected.push_back(a == 0 ? xv[v * 4 + c] : xv[r * 4 + v]);
      }
    OpTester t("GatherElements", 13);
    t.Attr("axis", Int(axis)).Input("x", x).Input("i", idx).Output("y", {2, 3}, expected, 0, 0);
    t.Run();
  }
  OpTester bad("GatherElements", 13);
  bad.Attr("axis", Int(1)).Input("x", x).Input("i", Tensor::FromVector<int64_t>({4}, {1, 1})).Output("y", {}, {});
  ExpectFailure(bad, "out of range");
}

TEST(TensorOpsGatherND, SlicesElementsAndBatchDims) {
  Tensor x = RandomTensor<float>({2, 3, 4});
  auto xv = ToDoubles(x);
  // k = 1: whole [3, 4] slices; k = 3: single elements.
  OpTester t1("GatherND", 13);
  std::vector<double> e1(xv.begin() + 12, xv.end());
  e1.insert(e1.end(), xv.begin(), xv.begin() + 12);
  t1.Input("x", x).Input("i", Tensor::FromVector<int64_t>({1, -2}, {2, 1})).Output("y", {2, 3, 4}, e1, 0, 0);
  t1.Run();
  OpTester t3("GatherND", 11);
  t3.Input("x", x).Input("i", Tensor::FromVector<int64_t>({1, 2, 3, 0, -1, 0}, {2, 3}));
  t3.Output("y", {2}, {xv[1 * 12 + 2 * 4 + 3], xv[0 * 12 + 2 * 4 + 0]}, 0, 0);
  t3.Run();
  // batch_dims = 1: per batch, index rows of a [3, 4] matrix.
  OpTester b("GatherND", 13);
  b.Attr("batch_dims", Int(1)).Input("x", x).Input("i", Tensor::FromVector<int64_t>({2, 0}, {2, 1}));
  std::vector<double> eb(xv.begin() + 8, xv.begin() + 12);
  eb.insert(eb.end(), xv.begin() + 12, xv.begin() + 16);
  b.Output("y", {2, 4}, eb, 0, 0);
  b.Run();
  OpTester bad("GatherND", 13);
  bad.Input("x", x).Input("i", Tensor::FromVector<int64_t>({0, 3}, {1, 2})).Output("y", {}, {});
  ExpectFailure(bad, "index 3");
}

// ---------------------------------------------------------------- Scatter family

TEST(TensorOpsScatterElements, Reductions) {
  Tensor data = RandomTensor<float>({3, 4}, -2, 2, 1);
  Tensor upd = RandomTensor<float>({2, 4}, -2, 2, 2);
  Tensor idx = Tensor::FromVector<int64_t>({1, 0, -1, 1, 1, 2, 0, 1}, {2, 4});  // column 0 and 3 repeat row 1
  auto dv = ToDoubles(data), uv = ToDoubles(upd);
  auto iv = idx.ToInt64Vector();
  for (const char* reduction : {"none", "add", "mul", "max", "min"}) {
    std::vector<double> expected = dv;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t c = 0; c < 4; ++c) {
        int64_t row = iv[r * 4 + c] < 0 ? iv[r * 4 + c] + 3 : iv[r * 4 + c];
        double& o = expected[row * 4 + c];
        double u = uv[r * 4 + c];
        std::string red = reduction;
        o = red == "none"  ? u
            : red == "add" ? o + u
            : red == "mul" ? o * u
            : red == "max" ? std::max(o, u)
                           : std::min(o, u);
      }
    OpTester t("ScatterElements", 18);
    t.Attr("reduction", Attribute::String(reduction)).Input("d", data).Input("i", idx).Input("u", upd);
    t.Output("y", {3, 4}, expected, 1e-6, 1e-6);
    if (std::string(reduction) == "none") {
      // With duplicates "none" is order-dependent; compare only where indices are unique.
      auto out = t.Compute();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      auto got = ToDoubles(out.value()[0]);
      for (int64_t i : {0, 2, 5, 6, 8, 9, 10}) EXPECT_EQ(got[i], expected[i]) << i;
    } else {
      t.Run();
    }
  }
}

TEST(TensorOpsScatterElements, AxisOneInt32IndicesOldScatterAndErrors) {
  Tensor data = RandomTensor<int32_t>({2, 5}, -50, 50);
  Tensor upd = Tensor::FromVector<int32_t>({7, 8, 9, 10}, {2, 2});
  Tensor idx = Tensor::FromVector<int32_t>({4, -5, 0, 2}, {2, 2});
  auto expected = ToDoubles(data);
  expected[4] = 7, expected[0] = 8, expected[5] = 9, expected[7] = 10;
  for (const char* op : {"ScatterElements", "Scatter"}) {
    OpTester t(op, std::string(op) == "Scatter" ? 10 : 13);
    t.Attr("axis", Int(-1)).Input("d", data).Input("i", idx).Input("u", upd).Output("y", {2, 5}, expected, 0, 0);
    t.Run();
  }
  OpTester bad("ScatterElements", 13);
  bad.Attr("axis", Int(1)).Input("d", data).Input("i", Tensor::FromVector<int32_t>({5, 0}, {1, 2}));
  bad.Input("u", Tensor::FromVector<int32_t>({1, 2}, {1, 2})).Output("y", {}, {});
  ExpectFailure(bad, "index 5");
  OpTester red("ScatterElements", 13);
  red.Attr("reduction", Attribute::String("add")).Input("d", data).Input("i", idx).Input("u", upd).Output("y", {}, {});
  ExpectFailure(red, "reduction");
}

TEST(TensorOpsScatterND, SlicesElementsAndReductions) {
  Tensor data = RandomTensor<float>({4, 3}, -2, 2, 4);
  Tensor upd = RandomTensor<float>({3, 3}, -2, 2, 5);
  Tensor idx = Tensor::FromVector<int64_t>({2, 0, -2}, {3, 1});  // row 2 twice
  auto dv = ToDoubles(data), uv = ToDoubles(upd);
  for (const char* reduction : {"add", "mul", "max", "min"}) {
    std::vector<double> expected = dv;
    std::string red = reduction;
    for (int t = 0; t < 3; ++t) {
      int64_t row = t == 2 ? 2 : (t == 0 ? 2 : 0);
      for (int c = 0; c < 3; ++c) {
        double& o = expected[row * 3 + c];
        double u = uv[t * 3 + c];
        o = red == "add" ? o + u : red == "mul" ? o * u : red == "max" ? std::max(o, u) : std::min(o, u);
      }
    }
    OpTester t("ScatterND", 18);
    t.Attr("reduction", Attribute::String(reduction)).Input("d", data).Input("i", idx).Input("u", upd);
    t.Output("y", {4, 3}, expected, 1e-6, 1e-6);
    t.Run();
  }
  // Element updates (k = rank), plain assignment.
  std::vector<double> expected = dv;
  expected[1 * 3 + 2] = 5;
  expected[3 * 3 + 0] = -6;
  OpTester e("ScatterND", 13);
  e.Input("d", data).Input("i", Tensor::FromVector<int64_t>({1, 2, -1, 0}, {2, 2}));
  e.Input("u", Tensor::FromVector<float>({5, -6}, {2})).Output("y", {4, 3}, expected, 0, 0);
  e.Run();
  OpTester bad("ScatterND", 13);
  bad.Input("d", data).Input("i", Tensor::FromVector<int64_t>({4}, {1, 1}));
  bad.Input("u", RandomTensor<float>({1, 3})).Output("y", {}, {});
  ExpectFailure(bad, "index 4");
}

// ---------------------------------------------------------------- DepthToSpace, SpaceToDepth

}  // namespace
}  // namespace tob
