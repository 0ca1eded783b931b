// EyeLike (ones on the k-th diagonal) and Trilu (keep the upper or lower triangle of the last two
// dims). Both work on element bytes, so every dtype shares one code path.
#include <algorithm>
#include <cstring>
#include <memory>

#include "framework/kernel_registry.h"
#include "providers/cpu/generator/fill.h"

namespace tob::cpu {
namespace {

class EyeLikeKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t k = 0;
    TOB_RETURN_IF_ERROR(node.GetAttr("k", &k, 0));
    return MakeKernel<EyeLikeKernel>(node, k);
  }

  EyeLikeKernel(const Node& node, int64_t k) : OpKernel(node), k_(k) {}

  Status Compute(KernelContext& ctx) const override {
    Tensor& out = *ctx.output(0);
    if (out.rank() != 2) return ctx.Fail("input must be 2-D, got rank ", out.rank());
    uint64_t one = 0;
    if (!ElementBytes(out.dtype(), 1.0, &one))
      return ctx.Fail("output dtype ", DTypeName(out.dtype()), " is not supported");
    const int64_t rows = out.dim(0), cols = out.dim(1);
    const int64_t k = std::clamp<int64_t>(k_, -rows, cols);  // beyond: no diagonal, no overflow
    const size_t elem = DTypeSize(out.dtype());
    char* data = static_cast<char*>(out.raw_data());
    std::memset(data, 0, out.nbytes());
    for (int64_t i = std::max<int64_t>(0, -k); i < rows && i + k < cols; ++i)
      std::memcpy(data + (i * cols + i + k) * elem, &one, elem);
    return Status::OK();
  }

 private:
  int64_t k_;
};

class TriluKernel final : public OpKernel {
 public:
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) {
    int64_t upper = 1;
    TOB_RETURN_IF_ERROR(node.GetAttr("upper", &upper, 1));
    return MakeKernel<TriluKernel>(node, upper != 0);
  }

  TriluKernel(const Node& node, bool upper) : OpKernel(node), upper_(upper) {}

  Status Compute(KernelContext& ctx) const override {
    const Tensor& x = *ctx.input(0);
    Tensor& out = *ctx.output(0);
    if (x.rank() < 2) return ctx.Fail("input must have rank >= 2, got ", x.rank());
    int64_t k = 0;
    if (const Tensor* kt = ctx.input(1); kt != nullptr) {
      if (kt->numel() != 1) return ctx.Fail("k must hold one value, got ", kt->numel());
      k = kt->ElementAsInt64(0);
    }
    const int64_t rows = x.dim(-2), cols = x.dim(-1);
    k = std::clamp<int64_t>(k, -rows - 1, cols + 1);  // beyond: all or nothing kept, no overflow
    const int64_t all_rows = cols == 0 ? 0 : x.numel() / cols;
    const size_t elem = DTypeSize(x.dtype());
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    // Row i keeps columns [begin, end): j - i >= k (upper) or j - i <= k (lower).
    ParallelFor(ctx.thread_pool(), all_rows, std::max<int64_t>(1, kFillGrain / std::max<int64_t>(1, cols)),
                [&](int64_t r0, int64_t r1) {
                  for (int64_t r = r0; r < r1; ++r) {
                    int64_t i = r % rows;
                    int64_t begin = upper_ ? std::clamp<int64_t>(i + k, 0, cols) : 0;
                    int64_t end = upper_ ? cols : std::clamp<int64_t>(i + k + 1, 0, cols);
                    size_t row = static_cast<size_t>(r * cols) * elem;
                    std::memset(dst + row, 0, static_cast<size_t>(begin) * elem);
                    std::memcpy(dst + row + begin * elem, src + row + begin * elem,
                                static_cast<size_t>(end - begin) * elem);
                    std::memset(dst + row + end * elem, 0, static_cast<size_t>(cols - end) * elem);
                  }
                });
    return Status::OK();
  }

 private:
  bool upper_;
};

}  // namespace
}  // namespace tob::cpu

namespace tob {

void RegisterCpuMatrixKernels(KernelRegistry& registry) {
  using namespace cpu;  // the kernels above
  std::vector<DType> types = AllTypes();
  registry.Register(Def("EyeLike").Versions(9).Constraint("T1", {0}, types).Kernel<EyeLikeKernel>());
  registry.Register(Def("Trilu")
                        .Versions(14)
                        .Constraint("T", {0}, types)
                        .Constraint("tensor(int64)", {1}, {DType::kInt64})
                        .Kernel<TriluKernel>());
}

}  // namespace tob
