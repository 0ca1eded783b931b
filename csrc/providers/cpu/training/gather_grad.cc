// com.microsoft::GatherGrad (shape, indices, dY; axis) -> dX: zeros(shape) with the slices of dY
// added at `indices` along `axis` (the backward of Gather and of embedding lookups).
// With dX viewed as [outer, A, inner] and dY as [outer, Q, inner] (Q = number of indices), every
// output element is owned by exactly one task, so no atomics are needed, and every sum runs in
// index order, so the result is deterministic:
//   - column tasks (enough outer blocks x column strips to feed the pool): a task owns a column
//     strip of one outer block and walks all indices, adding contiguous dY strips into its dX strip;
//   - row tasks (otherwise, e.g. one embedding table): the indices are bucketed by destination row
//     (a stable counting sort) and a task owns whole destination rows.
// float16/bfloat16 accumulate in float32 scratch and round once.
#include <algorithm>
#include <atomic>
#include <cstring>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"

namespace tob {

namespace {

constexpr int64_t kColumnStrip = 256;

struct GatherGradLayout {
  int64_t outer = 1, A = 0, inner = 1, Q = 0;
};

// Adds dY slices into dX; `idx` holds Q validated indices in [0, A).
template <typename C>
Status ScatterAdd(const KernelContext& ctx, const GatherGradLayout& l, const int64_t* idx, const C* dy, C* dx) {
  ThreadPool* pool = ctx.thread_pool();
  const int64_t threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t strip = std::min(l.inner, kColumnStrip);
  const int64_t strips = (l.inner + strip - 1) / strip;
  if (l.outer * strips >= threads || l.A <= 1) {
    const int64_t work = std::max<int64_t>(1, (l.Q + l.A) * strip);
    ParallelFor(pool, l.outer * strips, std::max<int64_t>(1, 32768 / work), [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const int64_t o = u / strips, c0 = (u % strips) * strip, w = std::min(strip, l.inner - c0);
        C* dxo = dx + o * l.A * l.inner + c0;
        const C* dyo = dy + o * l.Q * l.inner + c0;
        for (int64_t a = 0; a < l.A; ++a) std::fill(dxo + a * l.inner, dxo + a * l.inner + w, C(0));
        for (int64_t j = 0; j < l.Q; ++j) {
          C* dst = dxo + idx[j] * l.inner;
          const C* src = dyo + j * l.inner;
          for (int64_t k = 0; k < w; ++k) dst[k] += src[k];
        }
      }
    });
    return Status::OK();
  }
  // Row tasks: bucket j by idx[j]; order lists the j of row a at [start[a], start[a + 1]).
  TOB_ASSIGN_OR_RETURN(Tensor buckets, ctx.AllocateScratch(DType::kInt64, {l.A + 1 + l.Q}));
  int64_t* start = buckets.data<int64_t>();
  int64_t* order = start + l.A + 1;
  std::fill(start, start + l.A + 1, 0);
  for (int64_t j = 0; j < l.Q; ++j) ++start[idx[j] + 1];
  for (int64_t a = 0; a < l.A; ++a) start[a + 1] += start[a];
  {
    TOB_ASSIGN_OR_RETURN(Tensor cursor_t, ctx.AllocateScratch(DType::kInt64, {l.A}));
    int64_t* cursor = cursor_t.data<int64_t>();
    std::copy(start, start + l.A, cursor);
    for (int64_t j = 0; j < l.Q; ++j) order[cursor[idx[j]]++] = j;
  }
  const int64_t avg_work = std::max<int64_t>(1, (l.Q / std::max<int64_t>(1, l.A) + 1) * l.inner);
  ParallelFor(pool, l.outer * l.A, std::max<int64_t>(1, 16384 / avg_work), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / l.A, a = u % l.A;
      C* dst = dx + u * l.inner;
      std::fill(dst, dst + l.inner, C(0));
      const C* dyo = dy + o * l.Q * l.inner;
      for (int64_t p = start[a]; p < start[a + 1]; ++p) {
        const C* src = dyo + order[p] * l.inner;
        for (int64_t k = 0; k < l.inner; ++k) dst[k] += src[k];
      }
    }
  });
  return Status::OK();
}

class GatherGradKernel final : public OpKernel {
 public:
  GatherGradKernel(const Node& node, int64_t axis) : OpKernel(node), axis_(axis) {}

  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, int64_t{0}));
    return MakeKernel<GatherGradKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& shape_t = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    const Tensor& dy = *ctx.input(2);
    Tensor& dx = *ctx.output(0);
    const Shape shape = shape_t.ToInt64Vector();
    const int64_t r = static_cast<int64_t>(shape.size());
    const int64_t axis = axis_ < 0 ? axis_ + r : axis_;
    if (axis < 0 || axis >= r) return ctx.Fail("axis ", axis_, " is out of range for rank ", r);
    if (dx.shape() != shape)
      return ctx.Fail("output shape ", ShapeToString(dx.shape()), " differs from ", ShapeToString(shape));
    GatherGradLayout l;
    for (int64_t i = 0; i < r; ++i) {
      if (i < axis) l.outer *= shape[i];
      else if (i == axis) l.A = shape[i];
      else l.inner *= shape[i];
    }
    l.Q = indices.numel();
    Shape expected(shape.begin(), shape.begin() + axis);
    expected.insert(expected.end(), indices.shape().begin(), indices.shape().end());
    expected.insert(expected.end(), shape.begin() + axis + 1, shape.end());
    if (dy.shape() != expected)
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " must be the Gather output shape ", ShapeToString(expected));
    TOB_ASSIGN_OR_RETURN(Tensor idx_t, NormalizedIndices(ctx, indices, l.A));
    if (dx.numel() == 0) return Status::OK();
    const int64_t* idx = idx_t.data<int64_t>();
    return DispatchFloat(ctx, dy.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor dyf, ToFloatScratch(ctx, dy));
        TOB_ASSIGN_OR_RETURN(Tensor dxf, ctx.AllocateScratch(DType::kFloat32, dx.shape()));
        TOB_RETURN_IF_ERROR(ScatterAdd<float>(ctx, l, idx, dyf.data<float>(), dxf.data<float>()));
        return FromFloatScratch(ctx, dxf, &dx);
      } else {
        return ScatterAdd<T>(ctx, l, idx, dy.data<T>(), dx.data<T>());
      }
    });
  }

 private:
  // Indices as int64 in [0, A) (negative ones wrapped); an error naming a bad one.
  StatusOr<Tensor> NormalizedIndices(const KernelContext& ctx, const Tensor& indices, int64_t A) const {
    TOB_ASSIGN_OR_RETURN(Tensor out, ctx.AllocateScratch(DType::kInt64, {indices.numel()}));
    int64_t* dst = out.data<int64_t>();
    std::atomic<int64_t> bad{-1};
    auto run = [&]<typename I>(const I* src) {
      ParallelFor(ctx.thread_pool(), indices.numel(), 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) {
          const int64_t v = static_cast<int64_t>(src[j]);
          if (v < -A || v >= A) {
            int64_t none = -1;
            bad.compare_exchange_strong(none, j);
            return;
          }
          dst[j] = v < 0 ? v + A : v;
        }
      });
    };
    if (indices.dtype() == DType::kInt32) run(indices.data<int32_t>());
    else if (indices.dtype() == DType::kInt64) run(indices.data<int64_t>());
    else return ctx.Fail("indices must be int32 or int64, got ", DTypeName(indices.dtype()));
    if (bad.load() >= 0)
      return ctx.Fail("indices[", bad.load(), "] = ", indices.ElementAsInt64(bad.load()), " is out of range [", -A,
                      ", ", A, ") for axis ", axis_);
    return out;
  }

  int64_t axis_;
};

}  // namespace

void RegisterCpuGatherGradKernels(KernelRegistry& registry) {
  registry.Register(Def("GatherGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("I", {0}, {DType::kInt64})
                        .Constraint("Tind", {1}, {DType::kInt32, DType::kInt64})
                        .Constraint("T", {2}, FloatTypes())
                        .Kernel<GatherGradKernel>());
}

}  // namespace tob
