// Unique (opset 11): the distinct elements of X (flattened), or its distinct slices along `axis`,
// with indices (each one's first occurrence), inverse_indices (which unique each element or slice
// of X is) and counts. sorted = 1 orders them ascending (slices lexicographically, as numpy's
// unique does); sorted = 0 in order of first occurrence. NaNs are equal to each other and sort
// last; -0.0 equals 0.0. The output sizes depend on the values, so the kernel allocates them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "core/allocator.h"
#include "framework/kernel_registry.h"
#include "providers/cpu/elementwise/elementwise_loops.h"

namespace tob::cpu {
namespace {

// The value a comparison sees: 16-bit floats as float, everything else as itself.
template <typename T>
auto Key(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
  else return v;
}

template <typename K>
bool IsNan(K v) {
  if constexpr (std::is_floating_point_v<K>) return std::isnan(v);
  else return false;
}

// -1, 0, 1: a before, equal to, after b (NaN after every number, equal to NaN).
template <typename K>
int Compare(K a, K b) {
  const bool na = IsNan(a), nb = IsNan(b);
  if (na || nb) return na == nb ? 0 : (na ? 1 : -1);
  return a < b ? -1 : (b < a ? 1 : 0);
}

class UniqueKernel final : public OpKernel {
 public:
  UniqueKernel(const Node& node, bool sorted, std::optional<int64_t> axis)
      : OpKernel(node), sorted_(sorted), axis_(axis) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t sorted = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("sorted", &sorted, int64_t{1}));
    std::optional<int64_t> axis;
    if (node.FindAttribute("axis") != nullptr) {
      int64_t a = 0;
      TOB_RETURN_IF_ERROR(node.GetAttr("axis", &a));
      axis = a;
    }
    return MakeKernel<UniqueKernel>(node, sorted != 0, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    // X as [outer, slices, inner]: slice k is every (o, k, i), compared in (o, i) order.
    int64_t outer = 1, slices = x.numel(), inner = 1, axis = 0;
    if (axis_) {
      axis = *axis_ < 0 ? *axis_ + x.rank() : *axis_;
      if (axis < 0 || axis >= x.rank()) return ctx.Fail("axis ", *axis_, " is out of range for rank ", x.rank());
      for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
      slices = x.dim(axis);
      for (int64_t d = axis + 1; d < x.rank(); ++d) inner *= x.dim(d);
    }
    std::vector<int64_t> order(static_cast<size_t>(slices)), first, group_of(static_cast<size_t>(slices));
    std::vector<int64_t> counts;
    bool known = ew::Dispatch(ew::AllList{}, x.dtype(), [&]<typename T>() {
      const T* v = x.data<T>();
      auto cmp = [&](int64_t a, int64_t b) {
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const int c = Compare(Key(v[(o * slices + a) * inner + i]), Key(v[(o * slices + b) * inner + i]));
            if (c != 0) return c;
          }
        return 0;
      };
      std::iota(order.begin(), order.end(), int64_t{0});
      // Stable: within a run of equal slices the first occurrence comes first.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return cmp(a, b) < 0; });
      for (size_t k = 0; k < order.size(); ++k) {
        if (k == 0 || cmp(order[k - 1], order[k]) != 0) {
          first.push_back(order[k]);
          counts.push_back(0);
        }
        group_of[order[k]] = static_cast<int64_t>(first.size()) - 1;
        ++counts.back();
      }
    });
    if (!known) return ctx.Fail("dtype ", DTypeName(x.dtype()), " is not supported");
    const int64_t unique = static_cast<int64_t>(first.size());
    // rank[g]: the output position of sorted group g.
    std::vector<int64_t> rank(static_cast<size_t>(unique));
    std::iota(rank.begin(), rank.end(), int64_t{0});
    if (!sorted_) {
      std::vector<int64_t> by_first(static_cast<size_t>(unique));
      std::iota(by_first.begin(), by_first.end(), int64_t{0});
      std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return first[a] < first[b]; });
      for (int64_t pos = 0; pos < unique; ++pos) rank[by_first[pos]] = pos;
    }
    Shape y_shape = axis_ ? x.shape() : Shape{unique};
    if (axis_) y_shape[axis] = unique;
    TOB_ASSIGN_OR_RETURN(Tensor y, Tensor::Allocate(x.dtype(), y_shape, CpuAllocator::Default()));
    const size_t elem = DTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(y.raw_data());
    for (int64_t g = 0; g < unique; ++g)
      for (int64_t o = 0; o < outer; ++o)
        std::memcpy(dst + ((o * unique + rank[g]) * inner) * elem, src + ((o * slices + first[g]) * inner) * elem,
                    static_cast<size_t>(inner) * elem);
    *ctx.output(0) = std::move(y);
    auto int64_output = [&](int o, int64_t n, auto&& value) -> Status {
      if (o >= ctx.num_outputs() || ctx.output(o) == nullptr) return Status::OK();
      TOB_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(DType::kInt64, {n}, CpuAllocator::Default()));
      for (int64_t k = 0; k < n; ++k) t.data<int64_t>()[k] = value(k);
      *ctx.output(o) = std::move(t);
      return Status::OK();
    };
    std::vector<int64_t> group_at(static_cast<size_t>(unique));  // output position -> sorted group
    for (int64_t g = 0; g < unique; ++g) group_at[rank[g]] = g;
    TOB_RETURN_IF_ERROR(int64_output(1, unique, [&](int64_t k) { return first[group_at[k]]; }));
    TOB_RETURN_IF_ERROR(int64_output(2, slices, [&](int64_t k) { return rank[group_of[k]]; }));
    return int64_output(3, unique, [&](int64_t k) { return counts[group_at[k]]; });
  }

 private:
  bool sorted_;
  std::optional<int64_t> axis_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuUniqueKernels(KernelRegistry& registry) {
  registry.Register(
      Def("Unique").Versions(11).Constraint("T", {0}, AllTypes()).KernelAllocatesOutputs().Kernel<cpu::UniqueKernel>());
}

}  // namespace tob
