// CpuAllocator's cache of large blocks: a freed large block is handed out again for the same
// size, small blocks bypass it, the byte limit holds, and release empties it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "framework/allocator.h"
#include "framework/host_block_cache.h"

namespace tob {
namespace {

struct CacheLimitScope {
  explicit CacheLimitScope(size_t bytes) : saved(GetHostBlockCacheStats().limit_bytes) {
    ReleaseHostBlockCache();
    SetHostBlockCacheLimit(bytes);
  }
  ~CacheLimitScope() {
    ReleaseHostBlockCache();
    SetHostBlockCacheLimit(saved);
  }
  size_t saved;
};

TEST(HostBlockCache, LargeBlockIsReusedForTheSameSizeAndStaysAligned) {
  CacheLimitScope scope(size_t{64} << 20);
  auto& alloc = *CpuAllocator::Default();
  const size_t bytes = (size_t{1} << 20) + 12;
  void* a = alloc.Alloc(bytes);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kTensorAlignment, 0u);
  std::memset(a, 0x5a, bytes);  // the whole requested size is usable
  alloc.Free(a);
  EXPECT_GE(GetHostBlockCacheStats().cached_bytes, bytes);
  const size_t hits = GetHostBlockCacheStats().hits;
  void* b = alloc.Alloc(bytes);
  EXPECT_EQ(b, a) << "a freed block of the same size comes back";
  EXPECT_EQ(GetHostBlockCacheStats().hits, hits + 1);
  EXPECT_EQ(GetHostBlockCacheStats().cached_bytes, 0u);
  void* c = alloc.Alloc(bytes * 2);  // another size: not that block
  EXPECT_NE(c, b);
  alloc.Free(b);
  alloc.Free(c);
}

TEST(HostBlockCache, SmallBlocksBypassTheCache) {
  CacheLimitScope scope(size_t{64} << 20);
  auto& alloc = *CpuAllocator::Default();
  void* p = alloc.Alloc(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kTensorAlignment, 0u);
  alloc.Free(p);
  EXPECT_EQ(GetHostBlockCacheStats().cached_bytes, 0u);
}

TEST(HostBlockCache, LimitIsHeldAndReleaseEmptiesIt) {
  CacheLimitScope scope(size_t{3} << 20);
  auto& alloc = *CpuAllocator::Default();
  void* blocks[4];
  for (void*& b : blocks) b = alloc.Alloc(size_t{1} << 20);
  for (void* b : blocks) alloc.Free(b);
  const HostBlockCacheStats full = GetHostBlockCacheStats();
  EXPECT_LE(full.cached_bytes, size_t{3} << 20) << "the fourth block went back to the C library";
  EXPECT_GT(full.cached_bytes, size_t{2} << 20);
  SetHostBlockCacheLimit(size_t{1} << 20);  // lowering the limit trims to it
  EXPECT_LE(GetHostBlockCacheStats().cached_bytes, size_t{1} << 20);
  ReleaseHostBlockCache();
  EXPECT_EQ(GetHostBlockCacheStats().cached_bytes, 0u);
  SetHostBlockCacheLimit(0);  // 0 disables caching
  void* p = alloc.Alloc(size_t{1} << 20);
  alloc.Free(p);
  EXPECT_EQ(GetHostBlockCacheStats().cached_bytes, 0u);
}

}  // namespace
}  // namespace tob
