// com.microsoft::MaxPoolGrad (dY, Indices, X) -> dX. Indices is the second output of the standard
// MaxPool with storage_order 0: flat offsets into the whole [N, C, D1, ...] input. X is read for
// its shape only (torch's max_pool*_with_indices_backward takes the forward input too). Windows
// may overlap, so one input element can receive several gradients: they are added.
// Planes (n, c) are independent: a MaxPool index of plane p lies in plane p, which lets each task
// own whole planes of dX without atomics; an index outside its plane is a runtime error.
#include <algorithm>
#include <atomic>

#include "framework/kernel_registry.h"
#include "providers/cpu/float_compute.h"

namespace tob {

namespace {

class MaxPoolGradKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<MaxPoolGradKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& dy = *ctx.input(0);
    const Tensor& indices = *ctx.input(1);
    const Tensor& x = *ctx.input(2);
    Tensor& dx = *ctx.output(0);
    if (indices.shape() != dy.shape() || indices.dtype() != DType::kInt64)
      return ctx.Fail("Indices ", ShapeToString(indices.shape()), " must be int64 of dY's shape ",
                      ShapeToString(dy.shape()));
    if (x.rank() < 3 || dy.rank() != x.rank() || dy.dim(0) != x.dim(0) || dy.dim(1) != x.dim(1))
      return ctx.Fail("dY ", ShapeToString(dy.shape()), " and X ", ShapeToString(x.shape()),
                      " must be [N, C, D1, ...] with one N and C");
    const int64_t planes = x.dim(0) * x.dim(1);
    const int64_t in_size = planes == 0 ? 0 : x.numel() / planes;
    const int64_t out_size = planes == 0 ? 0 : dy.numel() / planes;
    if (dx.numel() == 0) return Status::OK();
    return DispatchFloat(ctx, dy.dtype(), [&]<typename T>() -> Status {
      if constexpr (kIs16BitFloat<T>) {
        TOB_ASSIGN_OR_RETURN(Tensor dyf, ToFloatScratch(ctx, dy));
        TOB_ASSIGN_OR_RETURN(Tensor dxf, ctx.AllocateScratch(DType::kFloat32, dx.shape()));
        TOB_RETURN_IF_ERROR(
            Scatter(ctx, dyf.data<float>(), indices.data<int64_t>(), dxf.data<float>(), planes, in_size, out_size));
        return FromFloatScratch(ctx, dxf, &dx);
      } else {
        return Scatter(ctx, dy.data<T>(), indices.data<int64_t>(), dx.data<T>(), planes, in_size, out_size);
      }
    });
  }

 private:
  template <typename C>
  Status Scatter(const KernelContext& ctx, const C* dy, const int64_t* idx, C* dx, int64_t planes, int64_t in_size,
                 int64_t out_size) const {
    std::atomic<int64_t> bad{-1};
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, in_size + out_size));
    ParallelFor(ctx.thread_pool(), planes, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        C* plane = dx + p * in_size;
        std::fill(plane, plane + in_size, C(0));
        const int64_t base = p * in_size;
        for (int64_t k = p * out_size; k < (p + 1) * out_size; ++k) {
          const int64_t local = idx[k] - base;
          if (local < 0 || local >= in_size) {
            int64_t none = -1;
            bad.compare_exchange_strong(none, k);
            return;
          }
          plane[local] += dy[k];
        }
      }
    });
    if (const int64_t k = bad.load(); k >= 0) {
      const int64_t p = k / std::max<int64_t>(1, out_size);
      return ctx.Fail("Indices[", k, "] = ", idx[k], " is outside its (n, c) plane [", p * in_size, ", ",
                      (p + 1) * in_size, ") (MaxPool indices with storage_order 0 are expected)");
    }
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuMaxPoolGradKernels(KernelRegistry& registry) {
  registry.Register(Def("MaxPoolGrad")
                        .Domain(kMicrosoftDomain)
                        .Versions(1)
                        .Constraint("T", {0}, FloatTypes())
                        .Constraint("I", {1}, {DType::kInt64})
                        .Kernel<MaxPoolGradKernel>());
}

}  // namespace tob
