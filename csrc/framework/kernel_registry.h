// THE kernel registry: the only list of what the engine runs. Keyed by (domain, op type, opset
// range, provider, type constraints). The partitioner, the conformance include list, the docs'
// op table and the op tests all read it.
#pragma once

#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/domain.h"
#include "core/dtype.h"
#include "core/status.h"
#include "framework/kernel.h"
#include "ir/graph.h"

namespace tob {

inline constexpr const char* kCpuProvider = "CPUExecutionProvider";
inline constexpr const char* kCudaProvider = "CUDAExecutionProvider";
inline constexpr int kMaxOpset = INT_MAX;

using KernelFactory = std::function<StatusOr<std::unique_ptr<OpKernel>>(const Node&)>;

// Inputs `input_indices` (negative = counted from the end, e.g. -1 for variadic "all inputs")
// must have one of `allowed` dtypes; `same_type` inputs must all share one dtype.
struct TypeConstraint {
  std::string name;                // "T", "T1", ... as in the ONNX schema
  std::vector<int> input_indices;  // which inputs it binds; {kAllInputs} for variadic ops
  std::vector<DType> allowed;
  static constexpr int kAllInputs = -1000;
};

struct KernelDef {
  std::string domain;  // "" = ai.onnx
  // The op family of the file that registered it ("elementwise", "nn", ...: the folder under
  // providers/<ep>/, and the family of the op's schema); set by KernelRegistry::BeginFamily.
  std::string family;
  std::string op_type;
  int since_version = 1;
  int end_version = kMaxOpset;  // inclusive
  std::string provider = kCpuProvider;
  std::vector<TypeConstraint> constraints;
  // (input, output) pairs where the output may share the input's buffer (Reshape, Identity).
  std::vector<std::pair<int, int>> aliases;
  // (input, output) pairs the kernel can compute in place: given an output tensor that shares
  // the input's buffer, it still computes the right values (elementwise updates of optimizer
  // state). The executor uses this only for session state (SessionOptions::state_updates): the
  // output of a state update is then written into the state's own memory.
  std::vector<std::pair<int, int>> inplace;
  // Outputs that live in host memory even when the provider's device is not the host
  // (MemcpyToHost, shape-like outputs), as onnxruntime's OrtMemTypeCPUOutput.
  std::vector<int> host_outputs;
  // The kernel creates its outputs itself (the torch bridge hands over tensors torch allocated):
  // the executor neither needs concrete output shapes from the shape function nor allocates, and
  // checks what the kernel produced against the declared types instead. Such outputs are not in
  // the memory plan.
  bool kernel_allocates_outputs = false;
  // The kernel skips outputs it is given as nullptr: the executor then passes nullptr for outputs
  // nobody reads (omitted in the model, or dead), so gradient kernels compute only what is used.
  bool skips_unused_outputs = false;
  // A value kernel reads inputs of any kind (sequences, optionals that may be none) through
  // KernelContext::input_value and sets every output itself through output_value (like
  // kernel_allocates_outputs, the executor allocates nothing and checks what it got). Only value
  // kernels run nodes that take or make sequences or optionals (ExecutionProvider::CanRun).
  bool value_kernel = false;
  KernelFactory factory;

  // Fluent construction, used by every registration.
  KernelDef& Domain(std::string d) {
    domain = std::move(d);
    return *this;
  }
  KernelDef& Versions(int since, int end = kMaxOpset) {
    since_version = since;
    end_version = end;
    return *this;
  }
  KernelDef& Provider(std::string p) {
    provider = std::move(p);
    return *this;
  }
  KernelDef& Constraint(std::string name, std::vector<int> inputs, std::vector<DType> allowed) {
    constraints.push_back(TypeConstraint{std::move(name), std::move(inputs), std::move(allowed)});
    return *this;
  }
  KernelDef& Alias(int input, int output) {
    aliases.emplace_back(input, output);
    return *this;
  }
  KernelDef& MayInplace(int input, int output) {
    inplace.emplace_back(input, output);
    return *this;
  }
  KernelDef& HostOutput(int output) {
    host_outputs.push_back(output);
    return *this;
  }
  KernelDef& KernelAllocatesOutputs() {
    kernel_allocates_outputs = true;
    return *this;
  }
  KernelDef& SkipsUnusedOutputs() {
    skips_unused_outputs = true;
    return *this;
  }
  KernelDef& ValueKernel() {
    value_kernel = true;
    return *this;
  }
  bool IsHostOutput(int output) const {
    for (int o : host_outputs)
      if (o == output) return true;
    return false;
  }
  template <typename K>
  KernelDef& Kernel() {
    factory = [](const Node& n) -> StatusOr<std::unique_ptr<OpKernel>> { return K::Create(n); };
    return *this;
  }
  KernelDef& Factory(KernelFactory f) {
    factory = std::move(f);
    return *this;
  }

  // Whether this def accepts these input dtypes (kUndefined entries = omitted inputs).
  bool Accepts(const std::vector<DType>& input_types, std::string* why_not) const;
  std::string Describe() const;
};

// Convenience: KernelDef for op `op_type` in ai.onnx.
inline KernelDef Def(std::string op_type) {
  KernelDef d;
  d.op_type = std::move(op_type);
  return d;
}

// A kernel class that has no attributes to validate can use this factory helper:
//   static StatusOr<std::unique_ptr<OpKernel>> Create(const Node& n) { return MakeKernel<Foo>(n); }
template <typename K, typename... Args>
StatusOr<std::unique_ptr<OpKernel>> MakeKernel(const Node& node, Args&&... args) {
  return std::unique_ptr<OpKernel>(new K(node, std::forward<Args>(args)...));
}

class KernelRegistry {
 public:
  // Built-in kernels of every compiled-in provider, registered on first use.
  static KernelRegistry& Global();

  void Register(KernelDef def);
  // The family stamped on the defs registered from now on (the provider's kernel list calls it
  // before each file's registration function).
  void BeginFamily(std::string family) { family_ = std::move(family); }
  // The def that runs `node` on `provider` at `opset` with these input dtypes, or nullptr with
  // the reason in *why_not (op unknown to this provider, opset out of range, dtype not accepted).
  // non_tensor_values: the node takes or makes sequences or optionals, so only a value kernel
  // (KernelDef::value_kernel) will do.
  const KernelDef* Find(const std::string& provider, const std::string& domain, const std::string& op_type, int opset,
                        const std::vector<DType>& input_types, std::string* why_not = nullptr,
                        bool non_tensor_values = false) const;
  const std::vector<KernelDef>& defs() const { return defs_; }

 private:
  std::vector<KernelDef> defs_;
  std::string family_;
};

// One per provider: each calls the functions of its kernel list (providers/cpu/
// cpu_kernel_families.inc, providers/cuda/cuda_kernel_families.inc).
void RegisterCpuKernels(KernelRegistry& registry);
#ifdef TOB_WITH_CUDA
void RegisterCudaKernels(KernelRegistry& registry);
#endif

}  // namespace tob
