// The ai.onnx.ml ops without strings - ArrayFeatureExtractor, Binarizer, TreeEnsemble - against
// references computed here on random data: every node mode and aggregate function of
// TreeEnsemble, missing values, set membership, the post transforms (which onnx's reference
// skips; PROBIT checked by inverting it with std::erf), several trees and targets; and the
// refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "op_tester.h"

namespace tob::testing {
namespace {

const char* kMl = "ai.onnx.ml";

void ExpectError(OpTester& t, const std::string& needle) {
  auto r = t.Compute();
  ASSERT_FALSE(r.ok()) << needle;
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(MlArrayFeatureExtractor, GathersTheLastAxis) {
  Tensor x = RandomTensor<float>({2, 3, 5}, -2, 2, 1);
  const std::vector<double> xv = ToDoubles(x);
  const std::vector<int64_t> idx{4, 0, 4, 2};
  std::vector<double> ref;
  for (int r = 0; r < 6; ++r)
    for (int64_t k : idx) ref.push_back(xv[r * 5 + k]);
  OpTester t("ArrayFeatureExtractor", 1, kMl);
  t.Input("x", x).Input("i", Tensor::FromVector<int64_t>(idx, {2, 2})).Output("y", {2, 3, 4}, ref, 0, 0);
  t.Run();
  OpTester one("ArrayFeatureExtractor", 1, kMl);  // a 1-D X gives one row
  one.Input("x", Tensor::FromVector<int64_t>({7, 8, 9}, {3})).Input("i", Tensor::FromVector<int64_t>({2, 1}, {2}));
  one.Output("y", {1, 2}, {9, 8}, 0, 0);
  one.Run();
  OpTester bad("ArrayFeatureExtractor", 1, kMl);
  bad.Input("x", x).Input("i", Tensor::FromVector<int64_t>({5}, {1})).Output("y", {2, 3, 1}, {});
  ExpectError(bad, "index 5 (indices[0]) is outside [0, 5)");
}

TEST(MlBinarizer, ThresholdOnFloatsAndInts) {
  Tensor x = RandomTensor<double>({10}, -2, 2, 2);
  std::vector<double> ref;
  for (double v : ToDoubles(x)) ref.push_back(v > 0.25 ? 1 : 0);
  OpTester t("Binarizer", 1, kMl);
  t.Attr("threshold", Attribute::Float(0.25f)).Input("x", x).Output("y", {10}, ref, 0, 0);
  t.Run();
  OpTester i("Binarizer", 1, kMl);
  i.Attr("threshold", Attribute::Float(1.5f)).Input("x", Tensor::FromVector<int32_t>({-3, 1, 2, 5}, {4}));
  i.Output("y", {4}, {0, 0, 1, 1}, 0, 0);
  i.Run();
}

// ---- TreeEnsemble ----

struct TreeNode {
  int mode;  // 0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 MEMBER
  int64_t feature;
  double split;
  std::vector<double> members;
  bool nan_true;
  int64_t true_id, false_id;
  bool true_leaf, false_leaf;
};

struct Ensemble {
  std::vector<TreeNode> nodes;
  std::vector<int64_t> roots, leaf_targets;
  std::vector<double> leaf_weights;
  int64_t targets = 0;
};

bool Decide(const TreeNode& n, double x) {
  if (std::isnan(x) && n.nan_true) return true;
  switch (n.mode) {
    case 0: return x <= n.split;
    case 1: return x < n.split;
    case 2: return x >= n.split;
    case 3: return x > n.split;
    case 4: return x == n.split;
    case 5: return x != n.split;
    default: return std::find(n.members.begin(), n.members.end(), x) != n.members.end();
  }
}

std::vector<double> ReferenceEnsemble(const Ensemble& e, const std::vector<double>& x, int64_t rows, int64_t f,
                                      int aggregate, int post) {
  std::vector<double> y;
  for (int64_t r = 0; r < rows; ++r) {
    const double init = aggregate == 2   ? std::numeric_limits<float>::max()
                        : aggregate == 3 ? -std::numeric_limits<float>::max()
                                         : 0.0;
    std::vector<double> v(e.targets, init);
    for (int64_t root : e.roots) {
      int64_t at = root;
      bool leaf = false;
      while (!leaf) {
        const TreeNode& n = e.nodes[at];
        const bool t = Decide(n, x[r * f + n.feature]);
        leaf = t ? n.true_leaf : n.false_leaf;
        at = t ? n.true_id : n.false_id;
      }
      double& s = v[e.leaf_targets[at]];
      const double w = e.leaf_weights[at];
      s = aggregate == 2 ? std::min(s, w) : aggregate == 3 ? std::max(s, w) : s + w;
    }
    if (aggregate == 0)
      for (double& s : v) s /= static_cast<double>(e.roots.size());
    if (post == 1 || post == 3) {
      double sum = 0, mx = -1e300;
      for (double s : v)
        if (post == 1 || s != 0) mx = std::max(mx, s);
      for (double& s : v) sum += (s = (post == 3 && s == 0) ? 0 : std::exp(s - mx));
      for (double& s : v) s /= sum;
    } else if (post == 2) {
      for (double& s : v) s = 1 / (1 + std::exp(-s));
    } else if (post == 4) {
      for (double& s : v) {  // the y with Phi(y) = s, by bisection on std::erf
        double lo = -40, hi = 40;
        for (int i = 0; i < 200; ++i) {
          const double mid = (lo + hi) / 2;
          (0.5 * (1 + std::erf(mid / std::sqrt(2.0))) < s ? lo : hi) = mid;
        }
        s = (lo + hi) / 2;
      }
    }
    y.insert(y.end(), v.begin(), v.end());
  }
  return y;
}

// Three trees over 3 features and 3 targets, every node mode, NaN tracking on one node.
Ensemble MakeEnsemble() {
  Ensemble e;
  e.targets = 3;
  // tree 0: node 0 (LEQ f0 0.1) -> node 1 (MEMBER f2 {1, 3}) / leaf 0; node 1 -> leaf 1 / leaf 2
  e.nodes.push_back({0, 0, 0.1, {}, true, 1, 0, false, true});
  e.nodes.push_back({6, 2, 0, {1.0, 3.0}, false, 1, 2, true, true});
  // tree 1: node 2 (GT f1 -0.3) -> node 3 (NEQ f2 2) / node 4 (LT f0 0.5)
  e.nodes.push_back({3, 1, -0.3, {}, false, 3, 4, false, false});
  e.nodes.push_back({5, 2, 2.0, {}, false, 3, 4, true, true});
  e.nodes.push_back({1, 0, 0.5, {}, false, 5, 6, true, true});
  // tree 2: node 5 (GTE f1 0.2) -> leaf 7 / node 6 (EQ f2 1)
  e.nodes.push_back({2, 1, 0.2, {}, false, 7, 6, true, false});
  e.nodes.push_back({4, 2, 1.0, {}, false, 8, 0, true, true});
  e.roots = {0, 2, 5};
  e.leaf_targets = {0, 1, 2, 0, 1, 2, 0, 1, 2};
  e.leaf_weights = {0.5, -1.25, 2.0, 0.75, 1.5, -0.5, 0.25, 3.0, -2.0};
  return e;
}

void AddEnsembleAttrs(OpTester& t, const Ensemble& e, int aggregate, int post) {
  std::vector<int64_t> feat, tid, fid, tl, fl, nan;
  std::vector<double> splits, members;
  std::vector<uint8_t> modes;
  for (const TreeNode& n : e.nodes) {
    feat.push_back(n.feature);
    tid.push_back(n.true_id);
    fid.push_back(n.false_id);
    tl.push_back(n.true_leaf);
    fl.push_back(n.false_leaf);
    nan.push_back(n.nan_true);
    splits.push_back(n.split);
    modes.push_back(static_cast<uint8_t>(n.mode));
    if (n.mode == 6) {
      members.insert(members.end(), n.members.begin(), n.members.end());
      members.push_back(std::numeric_limits<double>::quiet_NaN());
    }
  }
  const Shape nodes{static_cast<int64_t>(e.nodes.size())};
  t.Attr("n_targets", Attribute::Int(e.targets)).Attr("aggregate_function", Attribute::Int(aggregate));
  t.Attr("post_transform", Attribute::Int(post)).Attr("tree_roots", Attribute::Ints(e.roots));
  t.Attr("nodes_featureids", Attribute::Ints(feat)).Attr("nodes_truenodeids", Attribute::Ints(tid));
  t.Attr("nodes_falsenodeids", Attribute::Ints(fid)).Attr("nodes_trueleafs", Attribute::Ints(tl));
  t.Attr("nodes_falseleafs", Attribute::Ints(fl)).Attr("nodes_missing_value_tracks_true", Attribute::Ints(nan));
  t.Attr("nodes_splits", Attribute::TensorValue(Tensor::FromVector<double>(splits, nodes)));
  t.Attr("nodes_modes", Attribute::TensorValue(Tensor::FromVector<uint8_t>(modes, nodes)));
  t.Attr("membership_values",
         Attribute::TensorValue(Tensor::FromVector<double>(members, {static_cast<int64_t>(members.size())})));
  t.Attr("leaf_targetids", Attribute::Ints(e.leaf_targets));
  t.Attr("leaf_weights", Attribute::TensorValue(Tensor::FromVector<double>(
                             e.leaf_weights, {static_cast<int64_t>(e.leaf_weights.size())})));
}

TEST(MlTreeEnsemble, EveryModeAggregateAndPostTransform) {
  const int64_t rows = 40, f = 3;
  Tensor xr = RandomTensor<float>({rows, f}, -1, 1, 10, 0.0);
  std::vector<float> xs;
  const std::vector<double> raw = ToDoubles(xr);
  for (int64_t i = 0; i < rows * f; ++i) {
    // Feature 2 takes the small integers the MEMBER / EQ / NEQ nodes test; feature 0 has NaNs.
    if (i % f == 2) xs.push_back(std::floor((raw[i] + 1) * 2));
    else if (i % f == 0 && i % 7 == 0) xs.push_back(std::numeric_limits<float>::quiet_NaN());
    else xs.push_back(static_cast<float>(raw[i]));
  }
  const std::vector<double> xd(xs.begin(), xs.end());
  const Ensemble e = MakeEnsemble();
  for (int aggregate : {0, 1, 2, 3})
    for (int post : {0, 1, 2, 3, 4}) {
      if (post == 4 && aggregate != 0) continue;  // PROBIT wants values in (0, 1): the average of the weights
      std::vector<double> ref = ReferenceEnsemble(e, xd, rows, f, aggregate, post);
      if (post == 4)
        for (double& v : ref) v = std::isfinite(v) ? v : 0;
      OpTester t("TreeEnsemble", 5, kMl);
      AddEnsembleAttrs(t, e, aggregate, post);
      t.Input("x", Tensor::FromVector<float>(xs, {rows, f}));
      t.Output("y", {rows, 3}, post != 4 ? ref : std::vector<double>{}, 1e-6, 1e-6);
      SCOPED_TRACE("aggregate " + std::to_string(aggregate) + " post " + std::to_string(post));
      if (post != 4) {
        t.Run();
        continue;
      }
      auto out = t.Compute();
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      // Averages outside (0, 1) have no probit; compare where they do.
      const std::vector<double> base = ReferenceEnsemble(e, xd, rows, f, aggregate, 0);
      for (size_t i = 0; i < base.size(); ++i) {
        if (base[i] > 0 && base[i] < 1) EXPECT_NEAR(out.value()[0].ElementAsDouble(i), ref[i], 1e-5) << i;
      }
    }
}

TEST(MlTreeEnsemble, MalformedTreesAreNamedErrors) {
  Ensemble e = MakeEnsemble();
  e.nodes[3].true_id = 42;  // a leaf that does not exist
  OpTester t("TreeEnsemble", 5, kMl);
  AddEnsembleAttrs(t, e, 1, 0);
  t.Input("x", RandomTensor<float>({2, 3}, -1, 1, 11)).Output("y", {2, 3}, {});
  ExpectError(t, "node 3 points to leaf 42, outside the 9 leaves");
  Ensemble c = MakeEnsemble();
  c.nodes[1].true_leaf = false;  // node 1 -> node 1: a cycle
  c.nodes[1].true_id = 1;
  c.nodes[1].members = {};  // so that every row loops
  c.nodes[1].mode = 5;      // NEQ against NaN split: always true
  c.nodes[1].split = std::numeric_limits<double>::quiet_NaN();
  OpTester cyc("TreeEnsemble", 5, kMl);
  AddEnsembleAttrs(cyc, c, 1, 0);
  cyc.Input("x", Tensor::FromVector<float>({-1.0f, 0.5f, 1.0f}, {1, 3})).Output("y", {1, 3}, {});
  ExpectError(cyc, "has a cycle");
  OpTester feat("TreeEnsemble", 5, kMl);
  AddEnsembleAttrs(feat, MakeEnsemble(), 1, 0);
  feat.Input("x", RandomTensor<float>({2, 2}, -1, 1, 12)).Output("y", {2, 3}, {});
  ExpectError(feat, "reads feature 2 of X with 2 features");
}

}  // namespace
}  // namespace tob::testing
