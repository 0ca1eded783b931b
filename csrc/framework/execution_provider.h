// The execution-provider contract (after onnxruntime's IExecutionProvider and ggml's backend
// vtable): a name, a device with its allocator, which nodes it can run, and copies to/from host.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "framework/kernel_registry.h"
#include "ir/graph.h"

namespace tob {

// What a session lets kernels do beyond computing on their inputs. Set from SessionOptions by the
// session, never from the model (docs/security.md).
struct KernelPermissions {
  // ATen nodes may call any torch operator, not only the allow-list of pure tensor operators.
  bool unsafe_aten_ops = false;
};

class ExecutionProvider {
 public:
  virtual ~ExecutionProvider() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual std::shared_ptr<Allocator> allocator() const = 0;
  // Copies between this provider's device and the host (either direction, same dtype/size).
  virtual Status CopyTensor(const Tensor& src, Tensor& dst) const = 0;

  // Can this provider run `node` (given its inputs' dtypes and the model's opset)? The default
  // asks the kernel registry for a kernel registered under name(); why_not says why not.
  virtual bool CanRun(const Node& node, int opset, const KernelRegistry& registry, std::string* why_not) const;

  // The kernel for `node` from `def` (a def registered under name()). The default calls
  // def.factory; a provider whose kernels depend on the session's permissions overrides it.
  virtual StatusOr<std::unique_ptr<OpKernel>> CreateKernel(const KernelDef& def, const Node& node,
                                                           const KernelPermissions& permissions) const;
};

// The dtypes of a node's inputs (kUndefined for omitted inputs or unknown types); a sequence's or
// an optional's is its element type.
std::vector<DType> InputDTypes(const Node& node);
// Whether an input or output of `node` is a sequence or an optional (only value kernels run it).
bool TakesOrMakesNonTensors(const Node& node);

}  // namespace tob
