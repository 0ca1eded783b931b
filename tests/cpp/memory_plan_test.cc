// Buffer planner: non-overlap of simultaneously live buffers, reuse of dead ones, peak accounting;
// RunAllocator: record then replay.
#include <gtest/gtest.h>

#include <random>

#include "memory/buffer_plan.h"
#include "memory/run_allocator.h"

namespace tob {
namespace {

bool Overlap(size_t a0, size_t a1, size_t b0, size_t b1) { return a0 < b1 && b0 < a1; }

void ExpectValid(const std::vector<BufferLifetime>& l, const BufferPlan& p) {
  ASSERT_EQ(p.offsets.size(), l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    EXPECT_EQ(p.offsets[i] % 64, 0u);
    EXPECT_LE(p.offsets[i] + l[i].bytes, p.arena_bytes);
    for (size_t j = i + 1; j < l.size(); ++j) {
      bool live_together = l[i].first < l[j].last && l[j].first < l[i].last;
      if (live_together)
        EXPECT_FALSE(Overlap(p.offsets[i], p.offsets[i] + l[i].bytes, p.offsets[j], p.offsets[j] + l[j].bytes))
            << "buffers " << i << " and " << j << " live together but overlap";
    }
  }
  EXPECT_GE(p.arena_bytes, p.peak_live_bytes);
}

TEST(MemoryPlan, ChainReusesDeadBuffers) {
  // a -> b -> c -> d: each buffer dies when the next one is made; two slots suffice.
  std::vector<BufferLifetime> l = {{1024, 0, 3}, {1024, 2, 5}, {1024, 4, 7}, {1024, 6, 8}};
  BufferPlan p = PlanBuffers(l);
  ExpectValid(l, p);
  EXPECT_EQ(p.arena_bytes, 2048u);
  EXPECT_EQ(p.peak_live_bytes, 2048u);
  EXPECT_EQ(p.offsets[0], p.offsets[2]);
}

TEST(MemoryPlan, AllLiveMeansNoReuse) {
  std::vector<BufferLifetime> l = {{100, 0, 10}, {200, 1, 10}, {300, 2, 10}};
  BufferPlan p = PlanBuffers(l);
  ExpectValid(l, p);
  EXPECT_EQ(p.arena_bytes, 128u + 256u + 320u);
}

TEST(MemoryPlan, ZeroByteBuffersGetDistinctAddresses) {
  std::vector<BufferLifetime> l = {{0, 0, 4}, {0, 1, 4}};
  BufferPlan p = PlanBuffers(l);
  EXPECT_NE(p.offsets[0], p.offsets[1]);
}

TEST(MemoryPlan, RandomLifetimesNeverOverlapAndStayNearPeak) {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<BufferLifetime> l;
    for (int i = 0; i < 60; ++i) {
      int64_t first = gen() % 100;
      l.push_back({static_cast<size_t>(1 + gen() % 100000), first, first + 1 + static_cast<int64_t>(gen() % 30)});
    }
    BufferPlan p = PlanBuffers(l);
    ExpectValid(l, p);
    EXPECT_LE(p.arena_bytes, p.peak_live_bytes * 2) << "plan far from the peak";
  }
}

TEST(MemoryPlan, RunAllocatorRecordsThenReplaysAtPlannedOffsets) {
  auto host = CpuAllocator::Default();
  RunAllocator record(host);
  void* a = record.Alloc(4096);
  void* b = record.Alloc(4096);
  record.Free(a);
  void* c = record.Alloc(4096);  // may reuse a's slot in the plan
  record.Free(b);
  record.Free(c);
  EXPECT_EQ(record.peak_bytes(), 8192u);
  AllocationTrace trace = record.TakeTrace();
  ASSERT_EQ(trace.lifetimes.size(), 3u);
  BufferPlan plan = PlanBuffers(trace.lifetimes);
  EXPECT_EQ(plan.arena_bytes, 8192u);

  std::vector<char> arena(plan.arena_bytes);
  RunAllocator replay(host, &plan, &trace.lifetimes, arena.data());
  void* a2 = replay.Alloc(4096);
  void* b2 = replay.Alloc(4096);
  replay.Free(a2);
  void* c2 = replay.Alloc(4096);
  EXPECT_EQ(a2, arena.data() + plan.offsets[0]);
  EXPECT_EQ(c2, arena.data() + plan.offsets[2]);
  EXPECT_NE(b2, c2);
  // A departure from the recorded sequence is served by the base allocator, not the arena.
  void* extra = replay.Alloc(100);
  EXPECT_EQ(replay.plan_misses(), 1);
  replay.Free(extra);
  replay.Free(b2);
  replay.Free(c2);
}

TEST(MemoryPlan, RunAllocatorAcceptsAFreeAfterTheTraceWasTaken) {
  // A torch operator may keep an input alive past the run (gloo's work objects do) and release it
  // later: the recording allocator's trace is gone by then.
  auto host = CpuAllocator::Default();
  RunAllocator record(host);
  void* kept = record.Alloc(256);
  void* done = record.Alloc(256);
  record.Free(done);
  AllocationTrace trace = record.TakeTrace();
  ASSERT_EQ(trace.lifetimes.size(), 2u);
  EXPECT_GT(trace.lifetimes[0].last, trace.lifetimes[1].last);  // counted live to the end
  record.Free(kept);
  EXPECT_EQ(record.live_bytes(), 0u);
}

}  // namespace
}  // namespace tob
