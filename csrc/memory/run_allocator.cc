#include "memory/run_allocator.h"

#include <algorithm>

namespace tob {

RunAllocator::RunAllocator(std::shared_ptr<Allocator> base) : base_(std::move(base)) {}

RunAllocator::RunAllocator(std::shared_ptr<Allocator> base, const BufferPlan* plan,
                           const std::vector<BufferLifetime>* expected, void* arena)
    : base_(std::move(base)), plan_(plan), expected_(expected), arena_(static_cast<char*>(arena)) {}

void* RunAllocator::Alloc(size_t bytes) {
  const size_t index = next_index_++;
  const int64_t now = clock_++;
  void* p = nullptr;
  bool from_base = true;
  if (plan_ != nullptr && index < expected_->size() && (*expected_)[index].bytes == bytes) {
    p = arena_ + plan_->offsets[index];
    from_base = false;
  } else {
    if (plan_ != nullptr) ++plan_misses_;
    p = base_->Alloc(bytes);
    if (p == nullptr) return nullptr;
  }
  live_[p] = Live{index, bytes, from_base};
  if (plan_ == nullptr) trace_.push_back(BufferLifetime{bytes, now, -1});
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  window_peak_bytes_ = std::max(window_peak_bytes_, live_bytes_);
  if (from_base) {
    base_live_bytes_ += bytes;
    base_window_peak_bytes_ = std::max(base_window_peak_bytes_, base_live_bytes_);
  }
  return p;
}

void RunAllocator::Free(void* p) {
  auto it = live_.find(p);
  if (it == live_.end()) return;
  const int64_t now = clock_++;
  // A free after TakeTrace() is a buffer something outside the engine kept beyond the run (a torch
  // operator of an ATen node that holds its input, as gloo's collectives do): the trace is gone and
  // already counts it live to the end; only the memory goes back.
  if (plan_ == nullptr && it->second.index < trace_.size()) trace_[it->second.index].last = now;
  if (it->second.from_base) {
    base_->Free(p);
    base_live_bytes_ -= it->second.bytes;
  }
  live_bytes_ -= it->second.bytes;
  live_.erase(it);
}

AllocationTrace RunAllocator::TakeTrace() {
  AllocationTrace t;
  t.lifetimes = std::move(trace_);
  for (auto& l : t.lifetimes)
    if (l.last < 0) l.last = clock_ + 1;
  trace_.clear();
  return t;
}

}  // namespace tob
