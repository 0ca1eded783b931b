// Lifetime-based buffer reuse: given every allocation of a run (size and the interval of event
// sequence numbers during which it is live), place them at offsets in one arena so that no two
// allocations live at the same time overlap in memory. Greedy by size (largest first, lowest
// fitting offset), as TFLite's arena planner does; near-optimal on the interval graphs that
// sequential execution produces.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tob {

struct BufferLifetime {
  size_t bytes = 0;
  int64_t first = 0;  // sequence number of the allocation
  int64_t last = 0;   // sequence number of the free (exclusive end of life)
};

struct BufferPlan {
  std::vector<size_t> offsets;  // one per lifetime, in the input order
  size_t arena_bytes = 0;       // size of the arena the plan needs
  size_t peak_live_bytes = 0;   // the most bytes live at one time (a lower bound on arena_bytes)
  std::string ToString() const;
};

// Sizes are rounded up to `alignment` so every offset stays aligned.
BufferPlan PlanBuffers(const std::vector<BufferLifetime>& lifetimes, size_t alignment = 64);

}  // namespace tob
