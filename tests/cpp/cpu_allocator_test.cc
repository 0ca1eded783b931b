// CpuAllocator: aligned blocks, and freed blocks that serve later requests of their size (glibc's
// aligned_alloc did not: see core/allocator.cc).
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/allocator.h"

namespace tob {
namespace {

TEST(CpuAllocator, BlocksAreAlignedAndWritable) {
  CpuAllocator& a = *CpuAllocator::Default();
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, size_t{1} << 20}) {
    void* p = a.Alloc(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kTensorAlignment, 0u) << bytes;
    std::memset(p, 0xab, bytes);
    a.Free(p);
  }
  a.Free(nullptr);
}

// A run's intermediates: blocks of a few sizes made and freed in turn, eight alive at a time, with
// a small long-lived allocation after each (a tensor's bookkeeping, a Python object). Blocks stay
// under glibc's mmap threshold (128 KiB), so they come from the heap. A freed block must serve the
// next request of its size: the heap then grows by about what is alive at once (measured 588 KiB
// for a 540 KiB live peak and 125 KiB of small blocks), where aligned_alloc(64, n) grew it by 1644
// KiB, asking the heap for n + 64 + 32 bytes that no block freed at n fits.
TEST(CpuAllocator, AFreedBlockServesTheNextRequestOfItsSize) {
  size_t growth = 0, live_peak = 0, small_bytes = 0;
  // On a thread of its own, so that the blocks come from an arena that earlier tests did not leave
  // holes in (glibc gives a new thread an arena of its own while there are few).
  std::thread t([&] {
    CpuAllocator& a = *CpuAllocator::Default();
    const size_t sizes[] = {96 << 10, 24 << 10, 96 << 10, 84 << 10, 24 << 10};
    constexpr int kIterations = 2000;
    std::vector<void*> live(8, nullptr), small;
    std::vector<size_t> live_size(8, 0);
    size_t live_bytes = 0;
    const size_t before = mallinfo2().arena;
    for (int i = 0; i < kIterations; ++i) {
      const size_t n = sizes[i % 5];
      void* p = a.Alloc(n);
      std::memset(p, 1, n);
      small.push_back(std::malloc(48));
      const int slot = i % 8;
      if (live[slot] != nullptr) {
        a.Free(live[slot]);
        live_bytes -= live_size[slot];
      }
      live[slot] = p;
      live_size[slot] = n;
      live_bytes += n;
      live_peak = std::max(live_peak, live_bytes);
    }
    growth = mallinfo2().arena - before;
    small_bytes = small.size() * 64;
    for (void* p : live) a.Free(p);
    for (void* p : small) std::free(p);
  });
  t.join();
  EXPECT_LE(growth, (live_peak + small_bytes) * 3 / 2)
      << "heap grew " << growth << " bytes for " << live_peak << " bytes of blocks alive at once";
}

}  // namespace
}  // namespace tob
