// CPU kernels of the runtime's own ops. MemcpyFromHost / MemcpyToHost are inserted by the
// partitioner and run by device providers; on the CPU provider (a model that carries them, or a
// graph partitioned for a device and then run on the host) the host is both ends, so the output
// may alias the input and a copy happens only when the executor gave it a separate buffer.
#include <cstring>

#include "framework/kernel_registry.h"

namespace tob {

namespace {

class HostCopyKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& node) { return MakeKernel<HostCopyKernel>(node); }

  Status Compute(KernelContext& ctx) const override {
    const Tensor& in = *ctx.input(0);
    Tensor& out = *ctx.output(0);
    if (out.dtype() != in.dtype() || out.nbytes() != in.nbytes())
      return ctx.Fail("output ", DTypeName(out.dtype()), ShapeToString(out.shape()), " does not match input ",
                      DTypeName(in.dtype()), ShapeToString(in.shape()));
    if (!out.SharesDataWith(in) && in.nbytes() > 0) std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
    return Status::OK();
  }
};

}  // namespace

void RegisterCpuRuntimeKernels(KernelRegistry& registry) {
  for (const char* op : {"MemcpyFromHost", "MemcpyToHost"})
    registry.Register(Def(op)
                          .Domain(kMicrosoftDomain)
                          .Versions(1)
                          .Constraint("T", {0}, AllTypes())
                          .Alias(0, 0)
                          .Kernel<HostCopyKernel>());
}

}  // namespace tob
