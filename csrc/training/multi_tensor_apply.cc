#include "training/multi_tensor_apply.h"

#include <algorithm>
#include <atomic>

namespace tob::training {

MultiTensorPlan::MultiTensorPlan(std::span<const int64_t> numels, int64_t segment_elements) {
  segment_elements = std::max<int64_t>(1, segment_elements);
  for (size_t t = 0; t < numels.size(); ++t) {
    for (int64_t begin = 0; begin < numels[t]; begin += segment_elements) {
      segments_.push_back({static_cast<int32_t>(t), begin, std::min(numels[t], begin + segment_elements)});
    }
    total_ += std::max<int64_t>(0, numels[t]);
  }
}

void MultiTensorPlan::Run(ThreadPool* pool, const std::function<void(size_t, const TensorSegment&)>& fn) const {
  const int64_t workers =
      (pool == nullptr || total_ < kParallelThreshold) ? 1 : std::min<int64_t>(pool->num_threads(), segments_.size());
  if (workers <= 1) {
    for (size_t s = 0; s < segments_.size(); ++s) fn(s, segments_[s]);
    return;
  }
  // Each worker takes the next segment until none is left: a thread that starts late (another
  // process has its core) does less instead of holding up the call.
  std::atomic<size_t> next{0};
  pool->ParallelFor(workers, 1, [&](int64_t, int64_t) {
    for (size_t s = next.fetch_add(1, std::memory_order_relaxed); s < segments_.size();
         s = next.fetch_add(1, std::memory_order_relaxed))
      fn(s, segments_[s]);
  });
}

}  // namespace tob::training
