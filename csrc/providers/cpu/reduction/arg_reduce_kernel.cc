// ArgMax / ArgMin along one axis, with keepdims and select_last_index. NaN counts as the extreme
// value (the first NaN wins, or the last one with select_last_index), like numpy's argmax.
#include <memory>
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/reduction/reduce_driver.h"

namespace tob::cpu {
namespace {

template <typename A>
inline bool IsNan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// Whether candidate v (at a later index) replaces the current best.
template <bool kMax, bool kLast, typename A>
inline bool Replaces(A v, A best) {
  bool better = kMax ? v > best : v < best;
  if constexpr (kLast) return IsNan(v) || (!IsNan(best) && (better || v == best));
  else return !IsNan(best) && (better || IsNan(v));
}

template <bool kMax, bool kLast, typename T>
void ArgReduceRows(KernelContext& ctx, const T* x, ReduceExtent e, int64_t* out) {
  using A = AccOf<T>;
  constexpr Combine kCombine = kMax ? Combine::kMax : Combine::kMin;
  int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, e.reduce));
  ParallelFor(ctx.thread_pool(), e.outer, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const T* row = x + o * e.reduce;
      // A vectorised pass finds the extreme value, a scan finds where it is.
      A best = ReduceContiguous<kCombine, Map::kIdentity, T, A>(row, e.reduce, A(0));
      auto matches = [&](int64_t j) {
        A v = static_cast<A>(row[j]);
        return v == best || (IsNan(best) && IsNan(v));
      };
      int64_t found = 0;
      if constexpr (kLast) {
        for (int64_t j = e.reduce - 1; j >= 0; --j)
          if (matches(j)) {
            found = j;
            break;
          }
      } else {
        for (int64_t j = 0; j < e.reduce; ++j)
          if (matches(j)) {
            found = j;
            break;
          }
      }
      out[o] = found;
    }
  });
}

template <bool kMax, bool kLast, typename T>
void ArgReduceColumns(KernelContext& ctx, const T* x, ReduceExtent e, int64_t* out) {
  using A = AccOf<T>;
  const int64_t tiles = CeilDiv(e.inner, kColumnTile);
  const int64_t tile_width = std::min(e.inner, kColumnTile);
  int64_t grain = std::max<int64_t>(1, kReduceGrain / std::max<int64_t>(1, e.reduce * tile_width));
  ParallelFor(ctx.thread_pool(), e.outer * tiles, grain, [&](int64_t begin, int64_t end) {
    A best[kColumnTile];
    A row_values[kColumnTile];
    for (int64_t unit = begin; unit < end; ++unit) {
      int64_t o = unit / tiles, i0 = (unit % tiles) * kColumnTile;
      int64_t width = std::min(kColumnTile, e.inner - i0);
      const T* base = x + o * e.reduce * e.inner + i0;
      int64_t* index = out + o * e.inner + i0;
      auto load = [&](int64_t r) -> const A* {
        if constexpr (kIs16BitFloat<T>) {
          ToFloat(base + r * e.inner, row_values, width);
          return row_values;
        } else {
          return base + r * e.inner;
        }
      };
      const A* first = load(0);
      for (int64_t i = 0; i < width; ++i) {
        best[i] = first[i];
        index[i] = 0;
      }
      for (int64_t r = 1; r < e.reduce; ++r) {
        const A* v = load(r);
        for (int64_t i = 0; i < width; ++i) {
          bool take = Replaces<kMax, kLast, A>(v[i], best[i]);
          best[i] = take ? v[i] : best[i];
          index[i] = take ? r : index[i];
        }
      }
    }
  });
}

class ArgReduceKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node, bool is_max) {
    int64_t axis = 0, select_last = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, 0));
    TOB_RETURN_IF_ERROR(node.GetAttr("select_last_index", &select_last, 0));
    return MakeKernel<ArgReduceKernel>(node, is_max, axis, select_last != 0);
  }

  ArgReduceKernel(const Node& node, bool is_max, int64_t axis, bool select_last)
      : OpKernel(node), is_max_(is_max), axis_(axis), select_last_(select_last) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    int64_t rank = x.rank();
    if (axis_ < -rank || axis_ >= rank) return ctx.Fail("axis ", axis_, " is out of range for an input of rank ", rank);
    int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    ReduceExtent e;
    for (int64_t d = 0; d < axis; ++d) e.outer *= x.dim(d);
    e.reduce = x.dim(axis);
    for (int64_t d = axis + 1; d < rank; ++d) e.inner *= x.dim(d);
    int64_t* out = ctx.output(0)->data<int64_t>();
    if (e.outputs() == 0) return Status::OK();
    if (e.reduce == 0)
      return ctx.Fail("cannot take the arg", is_max_ ? "max" : "min", " over axis ", axis_, " of size 0");
    bool known = DispatchDType<float, double, Float16, BFloat16, int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t,
                               int64_t, uint64_t>(x.dtype(), [&]<typename T>() {
      const T* src = x.data<T>();
      if (is_max_) Run<true, T>(ctx, src, e, out);
      else Run<false, T>(ctx, src, e, out);
    });
    if (!known) return ctx.Fail("input dtype ", DTypeName(x.dtype()), " is not supported");
    return Status::OK();
  }

 private:
  template <bool kMax, typename T>
  void Run(KernelContext& ctx, const T* x, ReduceExtent e, int64_t* out) const {
    if (e.inner == 1) {
      if (select_last_) ArgReduceRows<kMax, true>(ctx, x, e, out);
      else ArgReduceRows<kMax, false>(ctx, x, e, out);
    } else {
      if (select_last_) ArgReduceColumns<kMax, true>(ctx, x, e, out);
      else ArgReduceColumns<kMax, false>(ctx, x, e, out);
    }
  }

  bool is_max_;
  int64_t axis_;
  bool select_last_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuArgReduceKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  using enum DType;
  const std::vector<DType> types = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8,  kUInt8,
                                    kInt16,   kUInt16,  kInt32,   kUInt32,   kInt64, kUInt64};
  registry.Register(Def("ArgMax").Versions(1).Constraint("T", {0}, types).Factory([](const Node& n) {
    return ArgReduceKernel::Create(n, /*is_max=*/true);
  }));
  registry.Register(Def("ArgMin").Versions(1).Constraint("T", {0}, types).Factory([](const Node& n) {
    return ArgReduceKernel::Create(n, /*is_max=*/false);
  }));
}

}  // namespace tob
