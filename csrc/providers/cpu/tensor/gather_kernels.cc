// Gather (whole rows along an axis: an embedding lookup is one memcpy per index), GatherElements
// (one element per index) and GatherND (index tuples address slices).
#include <type_traits>

#include "framework/kernel_registry.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/index_utils.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob {

using tensor_ops::CheckedIndex;
using tensor_ops::CheckIndices;
using tensor_ops::NormalizeIndex;

namespace {

struct AnyRow {};  // marks the memcpy path of GatherRows (rows of any size)

// dst row u = src row (u / n) * dim + idx[u % n], rows of row_bytes; E is the row itself when
// rows are 1, 2, 4 or 8 bytes, so those copies are single moves. False when an index is out of
// range (nothing is read through it).
template <typename E, typename I>
bool GatherRows(ThreadPool* pool, const char* src, char* dst, const I* idx, int64_t outer, int64_t dim, int64_t n,
                size_t row_bytes) {
  std::atomic<bool> bad{false};
  ParallelFor(pool, outer * n, tensor_ops::CopyGrain(row_bytes), [&](int64_t begin, int64_t end) {
    int64_t o = begin / n, k = begin % n;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t i = CheckedIndex(idx[k], dim);
      if (i < 0) {
        bad.store(true, std::memory_order_relaxed);
        return;
      }
      const int64_t row = o * dim + i;
      if constexpr (std::is_same_v<E, AnyRow>) {
        std::memcpy(dst + u * row_bytes, src + row * row_bytes, row_bytes);
      } else {
        reinterpret_cast<E*>(dst)[u] = reinterpret_cast<const E*>(src)[row];
      }
      if (++k == n) {
        k = 0;
        ++o;
      }
    }
  });
  return !bad.load();
}

class GatherKernel final : public OpKernel {
 public:
  GatherKernel(const Node& node, int64_t axis) : OpKernel(node), axis_(axis) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, 0));
    return MakeKernel<GatherKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& data = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    Tensor* out = ctx.output(0);
    const int64_t rank = data.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", rank);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= data.dim(i);
    for (int64_t i = axis + 1; i < rank; ++i) inner *= data.dim(i);
    const int64_t dim = data.dim(axis), n = indices.numel();
    if (out->numel() != outer * n * inner || out->dtype() != data.dtype())
      return ctx.Fail("output ", ShapeToString(out->shape()), " does not match data ", ShapeToString(data.shape()),
                      " and indices ", ShapeToString(indices.shape()));
    const size_t row_bytes = static_cast<size_t>(inner) * DTypeSize(data.dtype());
    Status status;
    bool ok = tensor_ops::DispatchIndexType(indices.dtype(), [&]<typename I>() {
      const I* idx = indices.data<I>();
      const char* src = static_cast<const char*>(data.raw_data());
      char* dst = static_cast<char*>(out->raw_data());
      bool in_range = true;
      if (out->numel() == 0) {
        in_range = CheckIndices(ctx, idx, n, dim, "gather").ok();
      } else if (!tensor_ops::DispatchElementSize(row_bytes, [&]<typename E>() {
                   in_range = GatherRows<E>(ctx.thread_pool(), src, dst, idx, outer, dim, n, row_bytes);
                 })) {
        in_range = GatherRows<AnyRow>(ctx.thread_pool(), src, dst, idx, outer, dim, n, row_bytes);
      }
      if (!in_range) status = CheckIndices(ctx, idx, n, dim, "gather");
    });
    if (!ok) return ctx.Fail("indices must be int32 or int64, got ", DTypeName(indices.dtype()));
    return status;
  }

 private:
  int64_t axis_;
};

class GatherElementsKernel final : public OpKernel {
 public:
  GatherElementsKernel(const Node& node, int64_t axis) : OpKernel(node), axis_(axis) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t axis;
    TOB_RETURN_IF_ERROR(node.GetAttr("axis", &axis, 0));
    return MakeKernel<GatherElementsKernel>(node, axis);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& data = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    Tensor* out = ctx.output(0);
    const int64_t rank = data.rank();
    const int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
    if (axis < 0 || axis >= rank) return ctx.Fail("axis ", axis_, " is out of range for rank ", rank);
    if (indices.rank() != rank || out->shape() != indices.shape())
      return ctx.Fail("indices ", ShapeToString(indices.shape()), " must have the rank of data ",
                      ShapeToString(data.shape()));
    for (int64_t k = 0; k < rank; ++k)
      if (k != axis && indices.dim(k) > data.dim(k))
        return ctx.Fail("indices ", ShapeToString(indices.shape()), " exceed data ", ShapeToString(data.shape()),
                        " on axis ", k);
    if (out->numel() == 0) return Status::OK();
    const std::vector<int64_t> ds = ContiguousStrides(data.shape());
    const int64_t inner = indices.dim(rank - 1), rows = indices.numel() / inner, dim = data.dim(axis);
    Status status;
    bool ok = tensor_ops::DispatchIndexType(indices.dtype(), [&]<typename I>() {
      const I* idx = indices.data<I>();
      std::atomic<bool> bad{false};
      tensor_ops::DispatchElementSize(DTypeSize(data.dtype()), [&]<typename E>() {
        const E* src = data.data<E>();
        E* dst = out->data<E>();
        const int64_t grain = tensor_ops::CopyGrain(inner * sizeof(E) * 4);
        ParallelFor(ctx.thread_pool(), rows, grain, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            int64_t base = 0;  // data offset of the row, without the axis coordinate
            for (int64_t k = rank - 2, flat = r; k >= 0; --k) {
              if (k != axis) base += (flat % indices.dim(k)) * ds[k];
              flat /= indices.dim(k);
            }
            const I* row_idx = idx + r * inner;
            E* row_out = dst + r * inner;
            // Along the last axis the row's own position is the index; otherwise it adds j.
            const int64_t s = ds[axis], j_step = axis == rank - 1 ? 0 : 1;
            for (int64_t j = 0; j < inner; ++j) {
              const int64_t i = CheckedIndex(row_idx[j], dim);
              if (i < 0) {
                bad.store(true, std::memory_order_relaxed);
                return;
              }
              row_out[j] = src[base + j * j_step + i * s];
            }
          }
        });
      });
      if (bad.load()) status = CheckIndices(ctx, idx, indices.numel(), dim, "gather_elements");
    });
    if (!ok) return ctx.Fail("indices must be int32 or int64, got ", DTypeName(indices.dtype()));
    return status;
  }

 private:
  int64_t axis_;
};

class GatherNDKernel final : public OpKernel {
 public:
  GatherNDKernel(const Node& node, int64_t batch_dims) : OpKernel(node), batch_dims_(batch_dims) {}
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t b;
    TOB_RETURN_IF_ERROR(node.GetAttr("batch_dims", &b, 0));
    if (b < 0) return InvalidModel(node.Describe(), ": batch_dims must be >= 0, got ", b);
    return MakeKernel<GatherNDKernel>(node, b);
  }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& data = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    Tensor* out = ctx.output(0);
    const int64_t b = batch_dims_, r = data.rank(), q = indices.rank();
    if (q < 1 || b >= std::min(r, q)) return ctx.Fail("batch_dims ", b, " must be < min(rank(data), rank(indices))");
    const int64_t k = indices.dim(q - 1);
    if (k < 1 || k > r - b) return ctx.Fail("the last dim of indices (", k, ") must be in [1, ", r - b, "]");
    int64_t batches = 1, per_batch = 1, slice = 1;
    for (int64_t i = 0; i < b; ++i) {
      if (data.dim(i) != indices.dim(i)) return ctx.Fail("batch dims of data and indices differ");
      batches *= data.dim(i);
    }
    for (int64_t i = b; i < q - 1; ++i) per_batch *= indices.dim(i);
    for (int64_t i = b + k; i < r; ++i) slice *= data.dim(i);
    if (out->numel() != batches * per_batch * slice)
      return ctx.Fail("output ", ShapeToString(out->shape()), " does not match data and indices");
    const std::vector<int64_t> ds = ContiguousStrides(data.shape());
    const int64_t batch_stride = b > 0 ? ds[b - 1] : data.numel();
    const int64_t* idx = indices.data<int64_t>();
    const int64_t tuples = batches * per_batch;
    for (int64_t t = 0; t < tuples; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t v = idx[t * k + j], dim = data.dim(b + j);
        if (v < -dim || v >= dim)
          return ctx.Fail("gather_nd index ", v, " (tuple ", t, ", component ", j,
                          ") is out of range for a dim of size ", dim);
      }
    if (out->numel() == 0) return Status::OK();
    const size_t es = DTypeSize(data.dtype()), slice_bytes = static_cast<size_t>(slice) * es;
    const char* src = static_cast<const char*>(data.raw_data());
    char* dst = static_cast<char*>(out->raw_data());
    ParallelFor(ctx.thread_pool(), tuples, tensor_ops::CopyGrain(slice_bytes), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        int64_t off = (t / per_batch) * batch_stride;
        for (int64_t j = 0; j < k; ++j) off += NormalizeIndex(idx[t * k + j], data.dim(b + j)) * ds[b + j];
        std::memcpy(dst + t * slice_bytes, src + off * es, slice_bytes);
      }
    });
    return Status::OK();
  }

 private:
  int64_t batch_dims_;
};

}  // namespace

void RegisterCpuGatherKernels(KernelRegistry& registry) {
  const std::vector<DType> index_types{DType::kInt32, DType::kInt64};
  // Gather accepts negative indices from 11.
  registry.Register(Def("Gather")
                        .Versions(1, 10)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("Tind", {1}, index_types)
                        .Factory(tensor_ops::MovesStrings(&GatherKernel::Create, {0})));
  registry.Register(Def("Gather")
                        .Versions(11)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("Tind", {1}, index_types)
                        .Factory(tensor_ops::MovesStrings(&GatherKernel::Create, {0})));
  registry.Register(Def("GatherElements")
                        .Versions(11)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("Tind", {1}, index_types)
                        .Factory(tensor_ops::MovesStrings(&GatherElementsKernel::Create, {0})));
  // GatherND gains batch_dims at 12.
  registry.Register(Def("GatherND")
                        .Versions(11, 11)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&GatherNDKernel::Create, {0})));
  registry.Register(Def("GatherND")
                        .Versions(12)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&GatherNDKernel::Create, {0})));
}

}  // namespace tob
