#include "providers/torch/torch_provider.h"

#include <mutex>

#include "framework/kernel_registry.h"
#include "ops/op_schema.h"
#include "partition/provider_registry.h"
#include "providers/cpu/cpu_execution_provider.h"
#include "providers/torch/aten_kernel.h"
#include "providers/torch/python_op_kernel.h"

namespace tob {

namespace {

// Torch runs on host memory here, so the provider shares the host allocator and the CPU copies;
// the partitioner inserts no copy between it and the CPU provider.
class TorchExecutionProvider final : public ExecutionProvider {
 public:
  std::string name() const override { return kTorchProvider; }
  Device device() const override { return Device{}; }
  std::shared_ptr<Allocator> allocator() const override { return CpuAllocator::Default(); }
  Status CopyTensor(const Tensor& src, Tensor& dst) const override { return cpu_.CopyTensor(src, dst); }
  // ATen nodes call only allow-listed operators unless the session allows any (docs/security.md).
  StatusOr<std::unique_ptr<OpKernel>> CreateKernel(const KernelDef& def, const Node& node,
                                                   const KernelPermissions& permissions) const override {
    if (node.op_type() == "ATen") return CreateAtenKernel(node, permissions.unsafe_aten_ops);
    return def.factory(node);
  }

 private:
  CpuExecutionProvider cpu_;
};

}  // namespace

void RegisterTorchProvider() {
  static std::once_flag once;
  std::call_once(once, [] {
    ProviderRegistry::Global().Register(
        kTorchProvider,
        []() -> StatusOr<std::unique_ptr<ExecutionProvider>> {
          return std::unique_ptr<ExecutionProvider>(new TorchExecutionProvider());
        },
        /*fallback=*/true);
    KernelDef def;
    def.family = "aten";
    def.Domain(kMicrosoftDomain)
        .Versions(1)
        .Provider(kTorchProvider)
        .KernelAllocatesOutputs()
        .Factory([](const Node& node) { return CreateAtenKernel(node, /*unsafe_ops_allowed=*/false); });
    def.op_type = "ATen";
    KernelRegistry::Global().Register(std::move(def));
    // PythonOp / PythonOpGrad: torch.autograd.Functions, run only by this provider.
    for (const char* op_type : {"PythonOp", "PythonOpGrad"}) {
      KernelDef python_def;
      python_def.family = "python";
      python_def.Domain(kMicrosoftDomain)
          .Versions(1)
          .Provider(kTorchProvider)
          .KernelAllocatesOutputs()
          .Factory(CreatePythonOpKernel);
      python_def.op_type = op_type;
      KernelRegistry::Global().Register(std::move(python_def));
    }
  });
}

}  // namespace tob
