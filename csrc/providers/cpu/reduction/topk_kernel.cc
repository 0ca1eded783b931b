// TopK: the k largest (or smallest) elements along one axis and their int64 indices, in order.
// Equal values keep the lower index first and NaN counts as larger than every number, which is
// what onnx's reference and onnxruntime return. sorted=0 leaves the order unspecified, so sorted
// output serves it too.
#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/kernel_registry.h"
#include "providers/cpu/reduction/reduce_driver.h"

namespace tob::cpu {
namespace {

template <typename A>
inline bool NanAwareGreater(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) {
    if (a != a) return b == b;
    if (b != b) return false;
  }
  return a > b;
}

template <typename T>
void TopKRows(KernelContext& ctx, const T* x, ReduceExtent e, int64_t k, bool largest, T* values, int64_t* indices) {
  using A = AccOf<T>;
  const int64_t len = e.reduce, inner = e.inner;
  const int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, len));
  ParallelFor(ctx.thread_pool(), e.outer * inner, grain, [&](int64_t begin, int64_t end) {
    std::vector<A> row(static_cast<size_t>(len));
    std::vector<int64_t> order(static_cast<size_t>(len));
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t o = unit / inner, i = unit % inner;
      const T* in = x + o * len * inner + i;
      for (int64_t j = 0; j < len; ++j) row[j] = static_cast<A>(in[j * inner]);
      std::iota(order.begin(), order.end(), int64_t{0});
      auto before = [&](int64_t a, int64_t b) {
        const bool a_first = largest ? NanAwareGreater(row[a], row[b]) : NanAwareGreater(row[b], row[a]);
        const bool b_first = largest ? NanAwareGreater(row[b], row[a]) : NanAwareGreater(row[a], row[b]);
        return a_first || (!b_first && a < b);
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      T* out_v = values + o * k * inner + i;
      int64_t* out_i = indices + o * k * inner + i;
      for (int64_t j = 0; j < k; ++j) {
        out_v[j * inner] = in[order[j] * inner];
        out_i[j * inner] = order[j];
      }
    }
  });
}

class TopKKernel final : public OpKernel {
 public:
  // k_from_attribute: opset 1-9, where k is an attribute instead of the second input.
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool k_from_attribute) {
    int64_t axis = -1, largest = 1, k = -1;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, int64_t{-1}));
    TOB_RETURN_IF_ERROR(node.GetAttr("largest", &largest, int64_t{1}));
    if (largest != 0 && largest != 1)
      return InvalidModel(node.Describe(), ": attribute 'largest' must be 0 or 1, got ", largest);
    if (k_from_attribute) TOB_RETURN_IF_ERROR(node.GetAttr("k", &k));
    return MakeKernel<TopKKernel>(node, axis, largest == 1,
                                  k_from_attribute ? std::optional<int64_t>(k) : std::nullopt);
  }

  TopKKernel(const Node& node, int64_t axis, bool largest, std::optional<int64_t> k)
      : OpKernel(node), axis_(axis), largest_(largest), attribute_k_(k) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    int64_t k = 0;
    if (attribute_k_) {
      k = *attribute_k_;
    } else {
      const Tensor* k_tensor = ctx.input(1);
      if (k_tensor == nullptr || k_tensor->numel() != 1)
        return ctx.Fail("K must hold exactly one value, got ",
                        k_tensor == nullptr ? std::string("none") : ShapeToString(k_tensor->shape()));
      k = k_tensor->ElementAsInt64(0);
    }
    const int64_t rank = x.rank();
    if (axis_ < -rank || axis_ >= rank) return ctx.Fail("axis ", axis_, " is out of range for an input of rank ", rank);
    const int64_t a = axis_ < 0 ? axis_ + rank : axis_;
    if (k < 0 || k > x.dim(a)) return ctx.Fail("k = ", k, " must be in [0, ", x.dim(a), "], the size of axis ", axis_);
    ReduceExtent e;
    for (int64_t d = 0; d < a; ++d) e.outer *= x.dim(d);
    e.reduce = x.dim(a);
    for (int64_t d = a + 1; d < rank; ++d) e.inner *= x.dim(d);
    Tensor& values = *ctx.output(0);
    Tensor& indices = *ctx.output(1);
    if (values.numel() == 0) return Status::OK();
    bool known = DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                               uint32_t, uint64_t>(x.dtype(), [&]<typename T>() {
      TopKRows<T>(ctx, x.data<T>(), e, k, largest_, values.data<T>(), indices.data<int64_t>());
    });
    if (!known) return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  int64_t axis_;
  bool largest_;
  std::optional<int64_t> attribute_k_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuTopKKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernel above
  registry.Register(Def("TopK").Versions(1, 9).Constraint("T", {0}, FloatTypes()).Factory([](const Node& n) {
    return TopKKernel::Create(n, true);
  }));
  // 10 moved k to an input; 11 added largest/sorted and the integer types.
  registry.Register(Def("TopK")
                        .Versions(10, 10)
                        .Constraint("T", {0}, FloatTypes())
                        .Constraint("I", {1}, {DType::kInt64})
                        .Factory([](const Node& n) { return TopKKernel::Create(n, false); }));
  registry.Register(Def("TopK")
                        .Versions(11)
                        .Constraint("T", {0}, NumericTypes())
                        .Constraint("I", {1}, {DType::kInt64})
                        .Factory([](const Node& n) { return TopKKernel::Create(n, false); }));
}

}  // namespace tob
