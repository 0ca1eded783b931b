// What the control-flow kernels (If, Loop, Scan) share: reading a condition, the scalars a loop
// feeds its body, slices along the first dim as views, moving an axis to the front and back, and
// stacking per-iteration values into a scan output.
//
// Loop-carried values and states are handled as whole values that move from one iteration's
// fetches to the next iteration's feeds; only the condition, the trip count, scan inputs and scan
// outputs are looked into as tensors.
#pragma once

#include <vector>

#include "framework/kernel.h"

namespace tob::controlflow {

// The value of a one-element bool tensor (a condition); an error naming `what` otherwise.
StatusOr<bool> ReadCondition(const KernelContext& ctx, const Tensor& t, const std::string& what);

// A host tensor of `shape` (one element) holding `value`.
Tensor Int64Scalar(int64_t value, const Shape& shape);
Tensor BoolScalar(bool value, const Shape& shape);

// The concrete shape a formal input of `body` declares when it holds one element ([] or [1]);
// [] otherwise. The iteration number and the condition a Loop feeds have this shape.
Shape OneElementShape(const Graph& body, size_t input);

// Slice i of `t` along dim 0 ([d0, rest...] -> [rest...]), a view of the same memory.
Tensor SliceFirst(const Tensor& t, int64_t i);

// A copy of `t` with dim `axis` moved to the front (the other dims keep their order); `t` itself
// when axis is 0.
StatusOr<Tensor> AxisToFront(ThreadPool* pool, const Tensor& t, int64_t axis);
// The inverse: a copy of `t` with its dim 0 moved to position `axis`.
StatusOr<Tensor> FrontToAxis(ThreadPool* pool, const Tensor& t, int64_t axis);

// A copy of `t` in memory of its own (host).
StatusOr<Tensor> CopyOf(ThreadPool* pool, const Tensor& t);

// A scan output built slice by slice: [length, slice shape...], every slice of one dtype and
// shape (an error naming the output and the iteration otherwise).
class StackedOutput {
 public:
  StackedOutput(std::string what, int64_t length) : what_(std::move(what)), length_(length) {}
  // Copies `slice` into position `index`; the first slice fixes the dtype and shape.
  Status Put(ThreadPool* pool, int64_t index, const Tensor& slice, int64_t iteration);
  // The stacked tensor. With no slice (zero iterations), an empty [0, ...] tensor whose slice
  // shape is `declared` with its unknown dims taken as 0 (a rank-unknown declaration gives [0]).
  StatusOr<Tensor> Finish(const ValueType& declared);
  // Zeros in positions [from, length) (Scan 8's padding past a short sequence); with no slice
  // yet, the shape comes from `declared`, which must then be fully known.
  Status ZeroRest(int64_t from, const ValueType& declared);
  bool started() const { return data_.defined(); }

 private:
  std::string what_;
  int64_t length_;
  Tensor data_;
  int64_t first_iteration_ = 0;
};

}  // namespace tob::controlflow
