// Expand (broadcast to a shape: a strided copy with stride 0 on broadcast dims) and Tile
// (repetition: the input is placed once, then each axis's block is duplicated by memcpy, from the
// innermost axis out, so every output byte is written exactly once).
#include "framework/kernel_registry.h"
#include "providers/cpu/tensor/copy_utils.h"
#include "providers/cpu/tensor/string_moves.h"

namespace tob {

namespace {

class ExpandKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<ExpandKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    const int64_t out_rank = out->rank(), lead = out_rank - in.rank();
    if (lead < 0) return ctx.Fail("output ", ShapeToString(out->shape()), " has a lower rank than the input");
    const std::vector<int64_t> in_strides = ContiguousStrides(in.shape());
    std::vector<int64_t> strides(static_cast<size_t>(out_rank), 0);
    for (int64_t j = lead; j < out_rank; ++j) {
      int64_t d = in.dim(j - lead);
      if (d == out->dim(j)) strides[j] = in_strides[j - lead];
      else if (d != 1)
        return ctx.Fail("input ", ShapeToString(in.shape()), " cannot be expanded to ", ShapeToString(out->shape()));
    }
    tensor_ops::StridedCopy(ctx.thread_pool(), in.raw_data(), out->raw_data(), DTypeSize(in.dtype()), out->shape(),
                            strides);
    return Status::OK();
  }
};

class TileKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<TileKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor* out = ctx.output(0);
    const int64_t rank = in.rank();
    if (out->rank() != rank) return ctx.Fail("output rank ", out->rank(), " differs from input rank ", rank);
    if (out->numel() == 0) return Status::OK();
    std::vector<int64_t> reps(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) {
      if (in.dim(i) == 0 || out->dim(i) % in.dim(i) != 0)
        return ctx.Fail("output ", ShapeToString(out->shape()), " is not a tiling of ", ShapeToString(in.shape()));
      reps[i] = out->dim(i) / in.dim(i);
    }
    const size_t es = DTypeSize(in.dtype());
    const char* src = static_cast<const char*>(in.raw_data());
    char* dst = static_cast<char*>(out->raw_data());
    if (rank == 0) {
      std::memcpy(dst, src, es);
      return Status::OK();
    }
    const std::vector<int64_t> out_strides = ContiguousStrides(out->shape());
    // Byte offset in dst of the input position whose outer index (over dims [0, upto)) is `flat`.
    auto dst_offset = [&](int64_t flat, int64_t upto) {
      int64_t off = 0;
      for (int64_t k = upto - 1; k >= 0; --k) {
        off += (flat % in.dim(k)) * out_strides[k];
        flat /= in.dim(k);
      }
      return static_cast<size_t>(off) * es;
    };
    // 1. Each input row, repeated along the last axis.
    const int64_t inner = in.dim(rank - 1), last_reps = reps[rank - 1];
    const size_t row_bytes = static_cast<size_t>(inner) * es;
    const int64_t rows = in.numel() / inner;
    ParallelFor(ctx.thread_pool(), rows, tensor_ops::CopyGrain(row_bytes * last_reps), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        char* d = dst + dst_offset(r, rank - 1);
        for (int64_t t = 0; t < last_reps; ++t) std::memcpy(d + t * row_bytes, src + r * row_bytes, row_bytes);
      }
    });
    // 2. Axis by axis outwards: the block of input-sized positions along axis i is complete;
    //    copy it reps[i] - 1 times after itself.
    for (int64_t i = rank - 2; i >= 0; --i) {
      if (reps[i] == 1) continue;
      const size_t block = static_cast<size_t>(in.dim(i) * out_strides[i]) * es;
      int64_t positions = 1;
      for (int64_t k = 0; k < i; ++k) positions *= in.dim(k);
      const int64_t copies = reps[i] - 1;
      ParallelFor(ctx.thread_pool(), positions * copies, tensor_ops::CopyGrain(block), [&](int64_t begin, int64_t end) {
        for (int64_t u = begin; u < end; ++u) {
          char* base = dst + dst_offset(u / copies, i);
          std::memcpy(base + (u % copies + 1) * block, base, block);
        }
      });
    }
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuExpandTileKernels(KernelRegistry& registry) {
  registry.Register(Def("Expand")
                        .Versions(8)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&ExpandKernel::Create, {0})));
  registry.Register(Def("Tile")
                        .Versions(6)
                        .Constraint("T", {0}, tensor_ops::DataMovementTypes())
                        .Constraint("T1", {1}, {DType::kInt64})
                        .Factory(tensor_ops::MovesStrings(&TileKernel::Create, {0})));
}

}  // namespace tob
