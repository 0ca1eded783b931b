// Kernels: stateless once built. Attributes are read and validated in the constructor (through a
// factory that returns a Status); Compute(ctx) const reads inputs and writes outputs that the
// executor has already allocated with the shapes the op's shape function computed.
#pragma once

#include <iterator>
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

// A subgraph of the node (a GRAPH attribute of If, Loop, Scan), compiled once when the session
// was created (optimised, partitioned over the session's providers, planned) and bound to this
// run's values of the enclosing graphs that it reads. Control-flow kernels run it; the executor
// owns it (session state, after onnxruntime's subgraph SessionState), the kernel stays stateless.
class SubgraphRunner {
 public:
  virtual ~SubgraphRunner() = default;
  // The subgraph as compiled: its formal inputs and its outputs with their static types.
  virtual const Graph& graph() const = 0;
  // Runs it with `feeds` for its formal inputs, in order: values of any kind (a tensor, a
  // sequence, none), as its outputs are. The fetches are the kernel's to keep: none is memory the
  // next run reuses, so a loop-carried value moves from one iteration's fetches to the next
  // iteration's feeds without a copy. Errors name the subgraph.
  virtual Status Run(std::vector<RuntimeValue> feeds, std::vector<RuntimeValue>* fetches) const = 0;
  // Run for a subgraph whose inputs and outputs the kernel reads as tensors (Scan, FlexAttention's
  // modifiers): an output that is not a tensor is an error naming it.
  Status RunTensors(std::vector<Tensor> feeds, std::vector<Tensor>* fetches) const {
    std::vector<RuntimeValue> in(std::make_move_iterator(feeds.begin()), std::make_move_iterator(feeds.end()));
    std::vector<RuntimeValue> out;
    TOB_RETURN_IF_ERROR(Run(std::move(in), &out));
    fetches->clear();
    fetches->reserve(out.size());
    for (size_t j = 0; j < out.size(); ++j) {
      if (!out[j].is_tensor())
        return RuntimeError(graph().Describe(), ": output ", j, " is ", out[j].Describe(),
                            "; the node reads this subgraph's outputs as tensors");
      fetches->push_back(std::move(out[j].mutable_tensor()));
    }
    return Status::OK();
  }
};

class KernelContext {
 public:
  KernelContext(const Node& node, std::vector<const Tensor*> inputs, std::vector<Tensor*> outputs, ThreadPool* pool,
                std::shared_ptr<Allocator> scratch, std::vector<const SubgraphRunner*> subgraphs = {})
      : node_(node),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        pool_(pool),
        scratch_(std::move(scratch)),
        subgraphs_(std::move(subgraphs)) {}

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

  // The compiled subgraph of GRAPH attribute `name`; nullptr when the node has none (or the
  // kernel runs outside a session, as constant folding does: it never folds such nodes).
  const SubgraphRunner* subgraph(const std::string& name) const {
    const Graph* wanted = node_.subgraph(name);
    for (const SubgraphRunner* s : subgraphs_)
      if (wanted != nullptr && &s->graph() == wanted) return s;
    return nullptr;
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
  std::vector<const SubgraphRunner*> subgraphs_;
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
