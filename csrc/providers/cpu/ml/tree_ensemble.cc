// TreeEnsemble (ai.onnx.ml, opset 5): every tree routes each row of X [N, F] from its root to one
// leaf (weight, target); the leaves' weights are aggregated per target (SUM, AVERAGE over the
// trees, MIN, MAX; a target no tree reaches keeps 0 for SUM/AVERAGE and the type's largest /
// lowest value for MIN / MAX, as onnx's reference leaves it), then post-transformed per row (NONE,
// SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT, with onnxruntime's definitions: onnx's reference skips
// this step).
//
// Interior node i compares X[row, nodes_featureids[i]] with nodes_splits[i] by nodes_modes[i]
// (BRANCH_LEQ, LT, GTE, GT, EQ, NEQ, MEMBER); NaN goes the true way where
// nodes_missing_value_tracks_true[i] is set. A MEMBER node tests membership of its set, the
// sets being membership_values split at NaNs, in the order the MEMBER nodes appear in
// nodes_modes. The true (false) branch is the leaf nodes_truenodeids[i] when nodes_trueleafs[i],
// else that interior node. A root whose both branches are the same leaf is a single-leaf tree
// whose leaf is the root's index. The attributes are checked once, when the kernel is built
// (indices in range, equal lengths), and a walk longer than the node count (a cycle) is an error.
// Comparisons and sums run in float64; each output is rounded to the type once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

enum class Aggregate : int64_t { kAverage = 0, kSum = 1, kMin = 2, kMax = 3 };
enum class PostTransform : int64_t { kNone = 0, kSoftmax = 1, kLogistic = 2, kSoftmaxZero = 3, kProbit = 4 };
enum class Mode : uint8_t { kLeq = 0, kLt = 1, kGte = 2, kGt = 3, kEq = 4, kNeq = 5, kMember = 6 };

// The inverse error function: a rational first guess refined by Newton steps on std::erf.
double ErfInv(double y) {
  if (y <= -1.0) return -std::numeric_limits<double>::infinity();
  if (y >= 1.0) return std::numeric_limits<double>::infinity();
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    const double v = w - 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164,
                     0.246640727, 1.50140941})
      p = c + p * v;
    x = p * y;
  } else {
    const double v = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
                     1.00167406, 2.83297682})
      p = c + p * v;
    x = p * y;
  }
  const double two_over_sqrt_pi = 1.1283791670955126;
  for (int i = 0; i < 3; ++i) x -= (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}

// Row-wise post transform of `v` (n_targets values), in place.
void ApplyPostTransform(PostTransform p, double* v, int64_t n) {
  switch (p) {
    case PostTransform::kNone: return;
    case PostTransform::kLogistic:
      for (int64_t i = 0; i < n; ++i) v[i] = 1.0 / (1.0 + std::exp(-v[i]));
      return;
    case PostTransform::kProbit:
      for (int64_t i = 0; i < n; ++i) v[i] = std::sqrt(2.0) * ErfInv(2.0 * v[i] - 1.0);
      return;
    case PostTransform::kSoftmax:
    case PostTransform::kSoftmaxZero: {
      const bool zero = p == PostTransform::kSoftmaxZero;  // zeros stay zero and take no share
      double max = -std::numeric_limits<double>::infinity(), sum = 0.0;
      for (int64_t i = 0; i < n; ++i)
        if (!zero || v[i] != 0.0) max = std::max(max, v[i]);
      for (int64_t i = 0; i < n; ++i) {
        v[i] = zero && v[i] == 0.0 ? 0.0 : std::exp(v[i] - max);
        sum += v[i];
      }
      for (int64_t i = 0; i < n; ++i) v[i] = sum > 0.0 ? v[i] / sum : 0.0;
      return;
    }
  }
}

struct Forest {
  std::vector<double> splits;
  std::vector<int64_t> features, true_ids, false_ids;
  std::vector<bool> true_leaf, false_leaf, nan_true;
  std::vector<Mode> modes;
  std::vector<std::vector<double>> members;  // per node (MEMBER nodes only)
  std::vector<int64_t> leaf_targets;
  std::vector<double> leaf_weights;
  // Per tree: the root node, or the root's leaf (single-leaf trees).
  std::vector<int64_t> roots;
  std::vector<bool> root_is_leaf;
  int64_t targets = 0;
  Aggregate aggregate = Aggregate::kSum;
  PostTransform post = PostTransform::kNone;
};

std::vector<double> TensorAsDoubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.ElementAsDouble(i);
  return v;
}

StatusOr<Forest> ReadForest(const Node& node) {
  Forest f;
  auto fail = [&](auto&&... args) { return InvalidModel(node.Describe(), ": ", args...); };
  Tensor splits, modes, weights;
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_splits", &splits));
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_modes", &modes));
  TOB_RETURN_IF_ERROR(node.GetAttr("leaf_weights", &weights));
  std::vector<int64_t> true_leafs, false_leafs, nan_true;
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_featureids", &f.features));
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_truenodeids", &f.true_ids));
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_falsenodeids", &f.false_ids));
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_trueleafs", &true_leafs));
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_falseleafs", &false_leafs));
  TOB_RETURN_IF_ERROR(node.GetAttr("nodes_missing_value_tracks_true", &nan_true, std::vector<int64_t>{}));
  TOB_RETURN_IF_ERROR(node.GetAttr("leaf_targetids", &f.leaf_targets));
  TOB_RETURN_IF_ERROR(node.GetAttr("tree_roots", &f.roots));
  TOB_RETURN_IF_ERROR(node.GetAttr("n_targets", &f.targets));
  int64_t aggregate = 1, post = 0;
  TOB_RETURN_IF_ERROR(node.GetAttr("aggregate_function", &aggregate, int64_t{1}));
  TOB_RETURN_IF_ERROR(node.GetAttr("post_transform", &post, int64_t{0}));
  if (aggregate < 0 || aggregate > 3)
    return fail("aggregate_function must be 0..3 (AVERAGE, SUM, MIN, MAX), got ", aggregate);
  if (post < 0 || post > 4)
    return fail("post_transform must be 0..4 (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT), got ", post);
  f.aggregate = static_cast<Aggregate>(aggregate);
  f.post = static_cast<PostTransform>(post);
  if (f.targets <= 0) return fail("n_targets must be positive, got ", f.targets);
  if (modes.dtype() != DType::kUInt8) return fail("nodes_modes must be a uint8 tensor");
  f.splits = TensorAsDoubles(splits);
  f.leaf_weights = TensorAsDoubles(weights);
  const size_t n = f.features.size();
  for (size_t len : {f.splits.size(), static_cast<size_t>(modes.numel()), f.true_ids.size(), f.false_ids.size(),
                     true_leafs.size(), false_leafs.size()})
    if (len != n) return fail("the nodes_* attributes must have one length (", n, " nodes_featureids)");
  if (!nan_true.empty() && nan_true.size() != n)
    return fail("nodes_missing_value_tracks_true has ", nan_true.size(), " entries for ", n, " nodes");
  const size_t leaves = f.leaf_weights.size();
  if (f.leaf_targets.size() != leaves)
    return fail("leaf_targetids has ", f.leaf_targets.size(), " entries for ", leaves, " leaf_weights");
  for (int64_t t : f.leaf_targets)
    if (t < 0 || t >= f.targets) return fail("leaf target ", t, " is outside [0, n_targets = ", f.targets, ")");
  std::vector<double> membership;
  if (node.FindAttribute("membership_values") != nullptr) {
    Tensor m;
    TOB_RETURN_IF_ERROR(node.GetAttr("membership_values", &m));
    membership = TensorAsDoubles(m);
  }
  size_t next_member = 0;
  f.members.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t mode = modes.data<uint8_t>()[i];
    if (mode > 6) return fail("nodes_modes[", i, "] = ", static_cast<int>(mode), " is not a mode (0..6)");
    f.modes.push_back(static_cast<Mode>(mode));
    f.true_leaf.push_back(true_leafs[i] != 0);
    f.false_leaf.push_back(false_leafs[i] != 0);
    f.nan_true.push_back(!nan_true.empty() && nan_true[i] != 0);
    for (const auto& [id, leaf] :
         {std::pair{f.true_ids[i], true_leafs[i] != 0}, std::pair{f.false_ids[i], false_leafs[i] != 0}})
      if (id < 0 || static_cast<size_t>(id) >= (leaf ? leaves : n))
        return fail("node ", i, " points to ", leaf ? "leaf " : "node ", id, ", outside the ", leaf ? leaves : n,
                    leaf ? " leaves" : " nodes");
    if (f.modes[i] != Mode::kMember) continue;
    while (next_member < membership.size() && !std::isnan(membership[next_member]))
      f.members[i].push_back(membership[next_member++]);
    if (next_member >= membership.size()) return fail("membership_values has no NaN-terminated set for node ", i);
    ++next_member;  // the NaN
  }
  if (next_member != membership.size()) return fail("membership_values has more sets than BRANCH_MEMBER nodes");
  for (int64_t r : f.roots) {
    if (r < 0 || static_cast<size_t>(r) >= n) return fail("tree root ", r, " is outside the ", n, " nodes");
    const bool leaf = f.true_leaf[r] && f.false_leaf[r] && f.true_ids[r] == f.false_ids[r];
    if (leaf && static_cast<size_t>(r) >= leaves) return fail("single-leaf tree ", r, " has no leaf ", r);
    f.root_is_leaf.push_back(leaf);
  }
  return f;
}

bool Goes(const Forest& f, size_t i, double x) {
  if (std::isnan(x) && f.nan_true[i]) return true;
  const double s = f.splits[i];
  switch (f.modes[i]) {
    case Mode::kLeq: return x <= s;
    case Mode::kLt: return x < s;
    case Mode::kGte: return x >= s;
    case Mode::kGt: return x > s;
    case Mode::kEq: return x == s;
    case Mode::kNeq: return x != s;
    case Mode::kMember: return std::find(f.members[i].begin(), f.members[i].end(), x) != f.members[i].end();
  }
  return false;
}

class TreeEnsembleKernel final : public OpKernel {
 public:
  TreeEnsembleKernel(const Node& node, Forest forest) : OpKernel(node), f_(std::move(forest)) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(Forest f, ReadForest(node));
    return MakeKernel<TreeEnsembleKernel>(node, std::move(f));
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& y = *ctx.output(0);
    const int64_t rows = x.dim(0), features = x.dim(1);
    for (int64_t feature : f_.features)
      if (feature < 0 || feature >= features)
        return ctx.Fail("a node reads feature ", feature, " of X with ", features, " features");
    TOB_ASSIGN_OR_RETURN(Tensor values, ctx.AllocateScratch(DType::kFloat64, {std::max<int64_t>(rows * features, 1)}));
    TOB_ASSIGN_OR_RETURN(Tensor result,
                         ctx.AllocateScratch(DType::kFloat64, {std::max<int64_t>(rows * f_.targets, 1)}));
    double* xv = values.data<double>();
    double* out = result.data<double>();
    bool known = ew::Dispatch(ew::FloatList{}, x.dtype(), [&]<typename T>() {
      for (int64_t i = 0; i < rows * features; ++i) {
        if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>)
          xv[i] = static_cast<float>(x.data<T>()[i]);
        else xv[i] = static_cast<double>(x.data<T>()[i]);
      }
    });
    if (!known) return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    const double initial = f_.aggregate == Aggregate::kMin   ? TypeMax(x.dtype())
                           : f_.aggregate == Aggregate::kMax ? -TypeMax(x.dtype())
                                                             : 0.0;
    const size_t limit = f_.features.size() + 1;
    for (int64_t r = 0; r < rows; ++r) {
      double* v = out + r * f_.targets;
      std::fill(v, v + f_.targets, initial);
      for (size_t t = 0; t < f_.roots.size(); ++t) {
        int64_t at = f_.roots[t];
        bool leaf = f_.root_is_leaf[t];
        for (size_t steps = 0; !leaf; ++steps) {
          if (steps > limit) return ctx.Fail("tree ", t, " has a cycle (a walk longer than its nodes)");
          const bool goes_true = Goes(f_, static_cast<size_t>(at), xv[r * features + f_.features[at]]);
          leaf = goes_true ? f_.true_leaf[at] : f_.false_leaf[at];
          at = goes_true ? f_.true_ids[at] : f_.false_ids[at];
        }
        const double w = f_.leaf_weights[at];
        double& slot = v[f_.leaf_targets[at]];
        switch (f_.aggregate) {
          case Aggregate::kSum:
          case Aggregate::kAverage: slot += w; break;
          case Aggregate::kMin: slot = std::min(slot, w); break;
          case Aggregate::kMax: slot = std::max(slot, w); break;
        }
      }
      if (f_.aggregate == Aggregate::kAverage && !f_.roots.empty())
        for (int64_t k = 0; k < f_.targets; ++k) v[k] /= static_cast<double>(f_.roots.size());
      ApplyPostTransform(f_.post, v, f_.targets);
    }
    ew::Dispatch(ew::FloatList{}, y.dtype(), [&]<typename T>() {
      T* dst = y.data<T>();
      for (int64_t i = 0; i < rows * f_.targets; ++i) {
        if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) dst[i] = T(static_cast<float>(out[i]));
        else dst[i] = static_cast<T>(out[i]);
      }
    });
    return Status::OK();
  }

 private:
  static double TypeMax(DType t) {
    if (t == DType::kFloat64) return std::numeric_limits<double>::max();
    if (t == DType::kFloat16) return 65504.0;
    return std::numeric_limits<float>::max();
  }

  Forest f_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuTreeEnsembleKernels(KernelRegistry& registry) {
  registry.Register(Def("TreeEnsemble")
                        .Domain(kMlDomain)
                        .Versions(5)
                        .Constraint("T", {0}, {DType::kFloat32, DType::kFloat64, DType::kFloat16})
                        .Kernel<cpu::TreeEnsembleKernel>());
}

}  // namespace tob
