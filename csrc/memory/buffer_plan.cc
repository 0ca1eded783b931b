#include "memory/buffer_plan.h"

#include <algorithm>
#include <numeric>

#include "core/status.h"

namespace tob {

namespace {

// Zero-byte buffers still get a distinct address.
size_t RoundUp(size_t v, size_t a) { return (std::max<size_t>(v, 1) + a - 1) / a * a; }

bool LivesOverlap(const BufferLifetime& a, const BufferLifetime& b) { return a.first < b.last && b.first < a.last; }

}  // namespace

BufferPlan PlanBuffers(const std::vector<BufferLifetime>& lifetimes, size_t alignment) {
  BufferPlan plan;
  const size_t n = lifetimes.size();
  plan.offsets.assign(n, 0);

  // Peak live bytes: sweep over allocation/free events.
  std::vector<std::pair<int64_t, int64_t>> events;  // (time, +bytes / -bytes)
  for (const auto& l : lifetimes) {
    int64_t b = static_cast<int64_t>(RoundUp(l.bytes, alignment));
    events.emplace_back(l.first, b);
    events.emplace_back(l.last, -b);
  }
  std::sort(events.begin(), events.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first < y.first : x.second < y.second;  // frees first
  });
  int64_t live = 0;
  for (const auto& e : events) {
    live += e.second;
    plan.peak_live_bytes = std::max(plan.peak_live_bytes, static_cast<size_t>(live));
  }

  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lifetimes[a].bytes > lifetimes[b].bytes; });
  std::vector<size_t> placed;
  placed.reserve(n);
  for (size_t idx : order) {
    const size_t size = RoundUp(lifetimes[idx].bytes, alignment);
    // Address ranges of already placed buffers whose lives overlap this one, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed)
      if (LivesOverlap(lifetimes[p], lifetimes[idx]))
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + RoundUp(lifetimes[p].bytes, alignment));
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;  // fits in the gap before this range
      offset = std::max(offset, end);
    }
    plan.offsets[idx] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    placed.push_back(idx);
  }
  return plan;
}

std::string BufferPlan::ToString() const {
  return StrCat("memory plan: ", offsets.size(), " buffers, arena ", arena_bytes, " bytes, peak live ", peak_live_bytes,
                " bytes");
}

}  // namespace tob
