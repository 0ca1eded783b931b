// The allocator behind one run's intermediate tensors and kernel scratch. The first run for an
// input-shape signature records every allocation and free (dynamic mode); the recorded lifetimes
// become a BufferPlan, and later runs with the same signature take every buffer at its planned
// offset in a single arena block (planned mode) — no malloc per tensor, and a known peak.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "memory/buffer_plan.h"

namespace tob {

// What a run allocated, in order; turns into a BufferPlan.
struct AllocationTrace {
  std::vector<BufferLifetime> lifetimes;
};

class RunAllocator final : public Allocator {
 public:
  // Dynamic mode: allocations go to `base` and are recorded.
  explicit RunAllocator(std::shared_ptr<Allocator> base);
  // Planned mode: allocations come from `arena` (arena_bytes long) at the plan's offsets, in
  // order; any allocation that departs from the recorded sequence falls back to `base`.
  RunAllocator(std::shared_ptr<Allocator> base, const BufferPlan* plan, const std::vector<BufferLifetime>* expected,
               void* arena);

  void* Alloc(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return base_->device(); }
  const char* name() const override { return "run"; }

  bool planned() const { return plan_ != nullptr; }
  // Lifetimes recorded so far (dynamic mode); allocations still live count as live to the end.
  AllocationTrace TakeTrace();
  size_t live_bytes() const { return live_bytes_; }
  size_t peak_bytes() const { return peak_bytes_; }
  // The most bytes live since the last StartWindow() (one step of a run).
  void StartWindow() {
    window_peak_bytes_ = live_bytes_;
    base_window_peak_bytes_ = base_live_bytes_;
  }
  size_t window_peak_bytes() const { return window_peak_bytes_; }
  // The same for the allocations `base` served (all of them in dynamic mode; in planned mode, the
  // ones the plan did not cover): memory of the process's besides the arena.
  size_t base_window_peak_bytes() const { return base_window_peak_bytes_; }
  // Whether `p` is an allocation this allocator made and has not freed.
  bool Serves(const void* p) const { return live_.count(const_cast<void*>(p)) != 0; }
  // Allocations in planned mode that did not match the plan (served by `base`).
  int64_t plan_misses() const { return plan_misses_; }

 private:
  std::shared_ptr<Allocator> base_;
  const BufferPlan* plan_ = nullptr;
  const std::vector<BufferLifetime>* expected_ = nullptr;
  char* arena_ = nullptr;

  int64_t clock_ = 0;
  size_t next_index_ = 0;
  struct Live {
    size_t index;
    size_t bytes;
    bool from_base;
  };
  std::unordered_map<void*, Live> live_;
  std::vector<BufferLifetime> trace_;
  size_t live_bytes_ = 0;
  size_t peak_bytes_ = 0;
  size_t window_peak_bytes_ = 0;
  size_t base_live_bytes_ = 0;
  size_t base_window_peak_bytes_ = 0;
  int64_t plan_misses_ = 0;
};

}  // namespace tob
