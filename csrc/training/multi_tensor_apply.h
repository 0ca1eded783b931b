// How a multi-tensor operation spreads its work: the tensors of one call are cut into segments of
// at most kSegmentElements, and the pool's threads take segments one after the other until none
// is left. One ParallelFor per call, however many (small) tensors there are; every segment is the
// same work whatever thread runs it, so per-segment results are deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "framework/thread_pool.h"

namespace tob::training {

struct TensorSegment {
  int32_t tensor;  // index in the call's tensor lists
  int64_t begin;   // element range inside that tensor
  int64_t end;
};

class MultiTensorPlan {
 public:
  // Small enough to balance the threads over one large tensor, large enough that the per-segment
  // overhead (an atomic increment and a std::function call) vanishes next to the memory traffic.
  static constexpr int64_t kSegmentElements = int64_t{1} << 15;
  // Below this many elements in total the call runs on the calling thread: waking workers costs
  // more than the work.
  static constexpr int64_t kParallelThreshold = int64_t{1} << 16;

  explicit MultiTensorPlan(std::span<const int64_t> numels, int64_t segment_elements = kSegmentElements);

  const std::vector<TensorSegment>& segments() const { return segments_; }
  int64_t total_elements() const { return total_; }

  // Calls fn(segment_index, segment) once for every segment, on `pool` (inline when null).
  void Run(ThreadPool* pool, const std::function<void(size_t, const TensorSegment&)>& fn) const;

 private:
  std::vector<TensorSegment> segments_;
  int64_t total_ = 0;
};

}  // namespace tob::training
