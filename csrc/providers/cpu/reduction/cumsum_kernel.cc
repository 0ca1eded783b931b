// CumSum and CumProd along the axis given by the second input, with the exclusive and reverse
// attributes. float16/bfloat16 accumulate in float32; integer sums and products wrap.
#include <memory>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/reduction/reduce_driver.h"

namespace tob::cpu {
namespace {

template <typename T, typename A>
inline T Narrow(A a) {
  if constexpr (kIs16BitFloat<T>) return T(static_cast<float>(a));
  else return static_cast<T>(a);
}

// The running value before the first element: 0 for a sum, 1 for a product.
template <Combine C, typename A>
constexpr A Identity() {
  return C == Combine::kSum ? A(0) : A(1);
}

template <Combine C, bool kExclusive, bool kReverse, typename T>
void CumRows(KernelContext& ctx, const T* x, ReduceExtent e, T* y) {
  using A = AccOf<T>;
  const int64_t len = e.reduce;
  int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, len));
  ParallelFor(ctx.thread_pool(), e.outer, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const T* in = x + o * len;
      T* out = y + o * len;
      A acc = Identity<C, A>();
      for (int64_t k = 0; k < len; ++k) {
        int64_t j = kReverse ? len - 1 - k : k;
        A v = static_cast<A>(in[j]);
        if constexpr (kExclusive) {
          out[j] = Narrow<T>(acc);
          acc = CombineOf<C, A>(acc, v);
        } else {
          acc = CombineOf<C, A>(acc, v);
          out[j] = Narrow<T>(acc);
        }
      }
    }
  });
}

// inner > 1: a running row of partial sums, updated one input row at a time (vectorises).
template <Combine C, bool kExclusive, bool kReverse, typename T>
void CumColumns(KernelContext& ctx, const T* x, ReduceExtent e, T* y) {
  using A = AccOf<T>;
  const int64_t tiles = CeilDiv(e.inner, kColumnTile);
  const int64_t tile_width = std::min(e.inner, kColumnTile);
  int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, e.reduce * tile_width));
  ParallelFor(ctx.thread_pool(), e.outer * tiles, grain, [&](int64_t begin, int64_t end) {
    A acc[kColumnTile];
    A wide[kColumnTile];
    for (int64_t unit = begin; unit < end; ++unit) {
      int64_t o = unit / tiles, i0 = (unit % tiles) * kColumnTile;
      int64_t width = std::min(kColumnTile, e.inner - i0);
      for (int64_t i = 0; i < width; ++i) acc[i] = Identity<C, A>();
      for (int64_t k = 0; k < e.reduce; ++k) {
        int64_t j = kReverse ? e.reduce - 1 - k : k;
        int64_t offset = (o * e.reduce + j) * e.inner + i0;
        const T* in = x + offset;
        T* out = y + offset;
        const A* v = nullptr;
        if constexpr (kIs16BitFloat<T>) {
          ToFloat(in, wide, width);
          v = wide;
        } else {
          v = in;
        }
        for (int64_t i = 0; i < width; ++i) {
          if constexpr (kExclusive) {
            out[i] = Narrow<T>(acc[i]);
            acc[i] = CombineOf<C, A>(acc[i], v[i]);
          } else {
            acc[i] = CombineOf<C, A>(acc[i], v[i]);
            out[i] = Narrow<T>(acc[i]);
          }
        }
      }
    }
  });
}

// C is kSum (CumSum) or kProd (CumProd).
template <Combine C>
class CumulativeKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t exclusive = 0, reverse = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("exclusive", &exclusive, 0));
    TOB_RETURN_IF_ERROR(node.GetAttr("reverse", &reverse, 0));
    if (exclusive != 0 && exclusive != 1)
      return InvalidModel(node.Describe(), ": attribute 'exclusive' must be 0 or 1, got ", exclusive);
    if (reverse != 0 && reverse != 1)
      return InvalidModel(node.Describe(), ": attribute 'reverse' must be 0 or 1, got ", reverse);
    return MakeKernel<CumulativeKernel>(node, exclusive != 0, reverse != 0);
  }

  CumulativeKernel(const Node& node, bool exclusive, bool reverse)
      : OpKernel(node), exclusive_(exclusive), reverse_(reverse) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    const Tensor& axis_tensor = *ctx.input(1);
    if (axis_tensor.numel() != 1 || axis_tensor.rank() > 1)
      return ctx.Fail("axis must be a scalar, got shape ", ShapeToString(axis_tensor.shape()));
    int64_t rank = x.rank();
    int64_t axis = axis_tensor.ElementAsInt64(0);
    if (axis < -rank || axis >= rank) return ctx.Fail("axis ", axis, " is out of range for an input of rank ", rank);
    int64_t a = axis < 0 ? axis + rank : axis;
    ReduceExtent e;
    for (int64_t d = 0; d < a; ++d) e.outer *= x.dim(d);
    e.reduce = x.dim(a);
    for (int64_t d = a + 1; d < rank; ++d) e.inner *= x.dim(d);
    if (x.numel() == 0) return Status::OK();
    bool known = DispatchDType<float, double, Float16, BFloat16, int32_t, int64_t, uint32_t, uint64_t>(
        x.dtype(), [&]<typename T>() {
          const T* src = x.data<T>();
          T* dst = ctx.output(0)->data<T>();
          if (exclusive_) Run<true, T>(ctx, src, e, dst);
          else Run<false, T>(ctx, src, e, dst);
        });
    if (!known) return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  template <bool kExclusive, typename T>
  void Run(KernelContext& ctx, const T* x, ReduceExtent e, T* y) const {
    if (e.inner == 1) {
      if (reverse_) CumRows<C, kExclusive, true>(ctx, x, e, y);
      else CumRows<C, kExclusive, false>(ctx, x, e, y);
    } else {
      if (reverse_) CumColumns<C, kExclusive, true>(ctx, x, e, y);
      else CumColumns<C, kExclusive, false>(ctx, x, e, y);
    }
  }

  bool exclusive_;
  bool reverse_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuCumSumKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  using enum DType;
  registry.Register(
      Def("CumSum")
          .Versions(11)
          .Constraint("T", {0}, {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt32, kUInt64})
          .Constraint("T2", {1}, {kInt32, kInt64})
          .Kernel<CumulativeKernel<Combine::kSum>>());
  registry.Register(
      Def("CumProd")
          .Versions(26)
          .Constraint("T", {0}, {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUInt32, kUInt64})
          .Constraint("T2", {1}, {kInt32, kInt64})
          .Kernel<CumulativeKernel<Combine::kProd>>());
}

}  // namespace tob
