// The cache of large host blocks behind CpuAllocator (see allocator.cc).
//
// Graph outputs (and every other CpuAllocator block) leave the engine as torch tensors and come
// back to the allocator when torch drops them, once per training step. Handed to the C library,
// large blocks are returned to the kernel (munmap, heap trimming) and the next step's blocks of
// the same sizes are fresh pages: a page fault and a zeroed page per 4 KiB, which cost a
// LogSoftmax over GPT-2's logits a quarter of its time. Freed blocks of at least kMinBytes are
// therefore kept, by exact (page-rounded) size, up to a byte limit, and handed out again.
#pragma once

#include <cstddef>

namespace tob {

struct HostBlockCacheStats {
  size_t cached_bytes = 0;  // held for reuse now
  size_t limit_bytes = 0;
  size_t hits = 0;          // allocations served from the cache
  size_t misses = 0;        // cacheable allocations that went to the C library
};

// Blocks below this size go straight to the C library (its own free lists serve them well).
inline constexpr size_t kHostBlockCacheMinBytes = size_t{64} << 10;

HostBlockCacheStats GetHostBlockCacheStats();
// Frees every cached block to the C library.
void ReleaseHostBlockCache();
// The most bytes the cache may hold (default 256 MiB, or TOB_HOST_CACHE_MB from the environment;
// 0 disables caching). Lowering it releases blocks above the new limit.
void SetHostBlockCacheLimit(size_t bytes);

}  // namespace tob
