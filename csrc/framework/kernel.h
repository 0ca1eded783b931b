// Kernels: stateless once built. Attributes are read and validated in the constructor (through a
// factory that returns a Status); Compute(ctx) const reads inputs and writes outputs that the
// executor has already allocated with the shapes the op's shape function computed.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "framework/runtime_value.h"
#include "framework/thread_pool.h"
#include "ir/graph.h"

namespace tob {

class KernelContext {
 public:
  KernelContext(const Node& node, std::vector<const Tensor*> inputs, std::vector<Tensor*> outputs, ThreadPool* pool,
                std::shared_ptr<Allocator> scratch)
      : node_(node),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        pool_(pool),
        scratch_(std::move(scratch)) {}

  const Node& node() const { return node_; }
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  // nullptr for an omitted optional input.
  const Tensor* input(int i) const { return i < num_inputs() ? inputs_[i] : nullptr; }
  // Pre-allocated output; nullptr for an omitted optional output. For a kernel registered with
  // KernelDef::KernelAllocatesOutputs, an undefined Tensor the kernel assigns.
  Tensor* output(int i) { return i < num_outputs() ? outputs_[i] : nullptr; }
  ThreadPool* thread_pool() const { return pool_; }

  // Value kernels (KernelDef::ValueKernel) see every input as a value of any kind (tensor,
  // sequence, none) and set every output themselves, tensors included: input(i) is then the
  // tensor of a tensor input (nullptr for the other kinds) and output(i) is nullptr.
  void SetValues(std::vector<const RuntimeValue*> inputs, std::vector<RuntimeValue*> outputs) {
    input_values_ = std::move(inputs);
    output_values_ = std::move(outputs);
  }
  // nullptr for an omitted input (or in a context without values).
  const RuntimeValue* input_value(int i) const {
    return i < static_cast<int>(input_values_.size()) ? input_values_[i] : nullptr;
  }
  // nullptr for an output nobody reads (or in a context without values).
  RuntimeValue* output_value(int i) {
    return i < static_cast<int>(output_values_.size()) ? output_values_[i] : nullptr;
  }
  // Temporary memory for this Compute call (freed when the returned tensor dies).
  StatusOr<Tensor> AllocateScratch(DType dtype, const Shape& shape) const {
    return Tensor::Allocate(dtype, shape, scratch_);
  }

  template <typename... Args>
  Status Fail(Args&&... args) const {
    return RuntimeError(node_.Describe(), ": ", std::forward<Args>(args)...);
  }

 private:
  const Node& node_;
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor*> outputs_;
  ThreadPool* pool_;
  std::shared_ptr<Allocator> scratch_;
  std::vector<const RuntimeValue*> input_values_;
  std::vector<RuntimeValue*> output_values_;
};

class OpKernel {
 public:
  explicit OpKernel(const Node& node) : node_(node) {}
  virtual ~OpKernel() = default;
  virtual Status Compute(KernelContext& ctx) const = 0;
  const Node& node() const { return node_; }

  // Pre-packing (after onnxruntime's OpKernel::PrePack): the session calls this once per constant
  // input (an initializer) after building the kernel and before any run, never concurrently with
  // Compute. A kernel may keep its own layout of the constant (GEMM weights in its panel layout)
  // and use it on every run instead of re-packing; it sets *packed when it did. What it keeps is
  // immutable from then on, so Compute stays const and safe on threads sharing the session.
  virtual Status PrePack(int input_index, const Tensor& constant, bool* packed) {
    (void)input_index;
    (void)constant;
    *packed = false;
    return Status::OK();
  }
  // Bytes held by what PrePack kept (the session's RunStats::prepacked_bytes sums them).
  virtual size_t PrePackedBytes() const { return 0; }

 private:
  const Node& node_;
};

}  // namespace tob
