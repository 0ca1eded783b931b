// ScatterElements (and its opset 9-10 name Scatter) and ScatterND, with the none/add/mul/max/min
// reductions. The output starts as a copy of data; updates are then applied in index order, so
// duplicate indices reduce deterministically. Plain assignment only moves bytes and dispatches on
// the element size; the reductions dispatch on the dtype.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/index_utils.h"

namespace tob {

using tensor_ops::CheckIndices;
using tensor_ops::NormalizeIndex;

namespace {

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

StatusOr<Reduction> ReadReduction(const Node& node) {
  std::string r;
  TOB_RETURN_IF_ERROR(node.GetAttr("reduction", &r, std::string("none")));
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  return InvalidModel(node.Describe(), ": reduction must be none, add, mul, max or min, got '", r, "'");
}

// a (the current output) combined with b (the update) as numpy does it: integers wrap, bool add
// and max are `or`, mul and min are `and`, max/min propagate NaN.
template <typename T, Reduction R>
inline T Combine(T a, T b) {
  if constexpr (R == Reduction::kNone) {
    return b;
  } else if constexpr (std::is_same_v<T, bool>) {
    return (R == Reduction::kAdd || R == Reduction::kMax) ? (a || b) : (a && b);
  } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(Combine<float, R>(static_cast<float>(a), static_cast<float>(b)));
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (R == Reduction::kAdd) return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    if constexpr (R == Reduction::kMul) return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    if constexpr (R == Reduction::kMax) return std::max(a, b);
    return std::min(a, b);
  } else {
    if constexpr (R == Reduction::kAdd) return a + b;
    if constexpr (R == Reduction::kMul) return a * b;
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) ? a : b;
    if constexpr (R == Reduction::kMax) return std::max(a, b);
    return std::min(a, b);
  }
}

// Runs fn.template operator()<T, R>() with T the value type: for kNone an unsigned type of the
// element's size, otherwise the dtype's own C++ type.
template <typename Fn>
bool DispatchScatter(DType dtype, Reduction reduction, Fn&& fn) {
  if (reduction == Reduction::kNone)
    return tensor_ops::DispatchElementSize(DTypeSize(dtype),
                                           [&]<typename E>() { fn.template operator()<E, Reduction::kNone>(); });
  return DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                       uint64_t, bool>(dtype, [&]<typename T>() {
    switch (reduction) {
      case Reduction::kAdd: fn.template operator()<T, Reduction::kAdd>(); break;
      case Reduction::kMul: fn.template operator()<T, Reduction::kMul>(); break;
      case Reduction::kMax: fn.template operator()<T, Reduction::kMax>(); break;
      case Reduction::kMin: fn.template operator()<T, Reduction::kMin>(); break;
      case Reduction::kNone: break;
    }
  });
}

class ScatterElementsKernel final : public OpKernel {
 public:
  ScatterElementsKernel(const Node& node, int64_t axis, Reduction reduction)
      : OpKernel(node), axis_(axis), reduction_(reduction) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, 0));
    TOB_ASSIGN_OR_RETURN(Reduction reduction, ReadReduction(node));
    return MakeKernel<ScatterElementsKernel>(node, axis, reduction);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& data = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    const Tensor& updates = *ctx.input(2);
    Tensor* out = ctx.output(0);
    const int64_t rank = data.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", rank);
    if (indices.rank() != rank || updates.shape() != indices.shape() || updates.dtype() != data.dtype())
      return ctx.Fail("indices ", ShapeToString(indices.shape()), " and updates ", ShapeToString(updates.shape()),
                      " must have one shape, of the rank of data ", ShapeToString(data.shape()));
    for (int64_t k = 0; k < rank; ++k)
      if (k != axis && indices.dim(k) > data.dim(k))
        return ctx.Fail("indices ", ShapeToString(indices.shape()), " exceed data ", ShapeToString(data.shape()),
                        " on axis ", k);
    if (out->shape() != data.shape() || out->dtype() != data.dtype())
      return ctx.Fail("output ", ShapeToString(out->shape()), " must have the data's shape");
    const int64_t dim = data.dim(axis);
    Status status;
    tensor_ops::DispatchIndexType(indices.dtype(), [&]<typename I>() {
      status = CheckIndices(ctx, indices.data<I>(), indices.numel(), dim, "scatter_elements");
    });
    if (!status.ok()) return status;
    tensor_ops::CopyUnlessAliased(ctx.thread_pool(), data, out);
    if (indices.numel() == 0) return Status::OK();
    // Updates are [pre, A, post] over the indices' shape; each (pre, post) column writes output
    // positions no other column writes, so columns run in parallel and each walks A in order.
    int64_t pre = 1, post = 1;
    for (int64_t k = 0; k < axis; ++k) pre *= indices.dim(k);
    for (int64_t k = axis + 1; k < rank; ++k) post *= indices.dim(k);
    const int64_t along = indices.dim(axis);
    const std::vector<int64_t> ds = ContiguousStrides(data.shape());
    bool ok = DispatchScatter(data.dtype(), reduction_, [&]<typename T, Reduction R>() {
      tensor_ops::DispatchIndexType(indices.dtype(), [&]<typename I>() {
        const I* idx = indices.data<I>();
        const T* upd = updates.data<T>();
        T* dst = out->data<T>();
        const int64_t grain = tensor_ops::CopyGrain(along * sizeof(T) * 4);
        ParallelFor(ctx.thread_pool(), pre * post, grain, [&](int64_t begin, int64_t end) {
          for (int64_t c = begin; c < end; ++c) {
            int64_t base = 0;  // output offset of the column, without the axis coordinate
            for (int64_t k = rank - 1, flat_post = c % post, flat_pre = c / post; k >= 0; --k) {
              if (k > axis) {
                base += (flat_post % indices.dim(k)) * ds[k];
                flat_post /= indices.dim(k);
              } else if (k < axis) {
                base += (flat_pre % indices.dim(k)) * ds[k];
                flat_pre /= indices.dim(k);
              }
            }
            const int64_t first = (c / post) * along * post + c % post;
            for (int64_t a = 0; a < along; ++a) {
              const int64_t u = first + a * post;
              T& o = dst[base + NormalizeIndex(idx[u], dim) * ds[axis]];
              o = Combine<T, R>(o, upd[u]);
            }
          }
        });
      });
    });
    if (!ok) return ctx.Fail("reduction is not supported for dtype ", DTypeName(data.dtype()));
    return Status::OK();
  }

 private:
  int64_t axis_;
  Reduction reduction_;
};

class ScatterNDKernel final : public OpKernel {
 public:
  ScatterNDKernel(const Node& node, Reduction reduction) : OpKernel(node), reduction_(reduction) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    TOB_ASSIGN_OR_RETURN(Reduction reduction, ReadReduction(node));
    return MakeKernel<ScatterNDKernel>(node, reduction);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& data = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    const Tensor& updates = *ctx.input(2);
    Tensor* out = ctx.output(0);
    const int64_t r = data.rank(), q = indices.rank();
    if (q < 1) return ctx.Fail("indices must have rank >= 1");
    const int64_t k = indices.dim(q - 1);
    if (k < 1 || k > r) return ctx.Fail("the last dim of indices (", k, ") must be in [1, ", r, "]");
    Shape expected(indices.shape().begin(), indices.shape().end() - 1);
    expected.insert(expected.end(), data.shape().begin() + k, data.shape().end());
    if (updates.shape() != expected || updates.dtype() != data.dtype())
      return ctx.Fail("updates ", ShapeToString(updates.shape()), " must have shape ", ShapeToString(expected));
    if (out->shape() != data.shape() || out->dtype() != data.dtype())
      return ctx.Fail("output ", ShapeToString(out->shape()), " must have the data's shape");
    const int64_t tuples = indices.numel() / k;
    int64_t slice = 1;
    for (int64_t i = k; i < r; ++i) slice *= data.dim(i);
    const int64_t* idx = indices.data<int64_t>();
    for (int64_t t = 0; t < tuples; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t v = idx[t * k + j], dim = data.dim(j);
        if (v < -dim || v >= dim)
          return ctx.Fail("scatter_nd index ", v, " (tuple ", t, ", component ", j,
                          ") is out of range for a dim of size ", dim);
      }
    tensor_ops::CopyUnlessAliased(ctx.thread_pool(), data, out);
    if (tuples == 0 || slice == 0) return Status::OK();
    const std::vector<int64_t> ds = ContiguousStrides(data.shape());
    std::vector<int64_t> offsets(static_cast<size_t>(tuples));
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (int64_t j = 0; j < k; ++j) off += NormalizeIndex(idx[t * k + j], data.dim(j)) * ds[j];
      offsets[t] = off;
    }
    // Tuples are applied in order (duplicates reduce deterministically); the slice is split
    // across threads instead, every task walking all tuples over its part of the slice.
    bool ok = DispatchScatter(data.dtype(), reduction_, [&]<typename T, Reduction R>() {
      const T* upd = updates.data<T>();
      T* dst = out->data<T>();
      ParallelFor(ctx.thread_pool(), slice, tensor_ops::CopyGrain(tuples * sizeof(T)), [&](int64_t begin, int64_t end) {
        for (int64_t t = 0; t < tuples; ++t) {
          T* o = dst + offsets[t];
          const T* u = upd + t * slice;
          if constexpr (R == Reduction::kNone) {
            std::memcpy(o + begin, u + begin, static_cast<size_t>(end - begin) * sizeof(T));
          } else {
            for (int64_t i = begin; i < end; ++i) o[i] = Combine<T, R>(o[i], u[i]);
          }
        }
      });
    });
    if (!ok) return ctx.Fail("reduction is not supported for dtype ", DTypeName(data.dtype()));
    return Status::OK();
  }

 private:
  Reduction reduction_;
};

}  // namespace

void RegisterCpuScatterKernels(KernelRegistry& registry) {
  const std::vector<DType> index_types{DType::kInt32, DType::kInt64};
  // Scatter (9-10) is ScatterElements without reduction under its old name.
  registry.Register(Def("Scatter")
                        .Versions(9, 10)
                        .Constraint("T", {0, 2}, AllTypes())
                        .Constraint("Tind", {1}, index_types)
                        .Kernel<ScatterElementsKernel>());
  // The reduction attribute: add/mul from 16, max/min from 18.
  for (auto [since, end] : {std::pair{11, 15}, std::pair{16, 17}, std::pair{18, kMaxOpset}}) {
    registry.Register(Def("ScatterElements")
                          .Versions(since, end)
                          .Constraint("T", {0, 2}, AllTypes())
                          .Constraint("Tind", {1}, index_types)
                          .Kernel<ScatterElementsKernel>());
    registry.Register(Def("ScatterND")
                          .Versions(since, end)
                          .Constraint("T", {0, 2}, AllTypes())
                          .Constraint("tensor(int64)", {1}, {DType::kInt64})
                          .Kernel<ScatterNDKernel>());
  }
}

}  // namespace tob
