#include "framework/allocator.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "framework/host_block_cache.h"

namespace tob {

namespace {

// Every CpuAllocator block carries its size in a header one alignment unit long, so Free knows
// which cache bucket it belongs to (and the data stays 64-byte aligned).
constexpr size_t kHeaderBytes = kTensorAlignment;
constexpr size_t kPageBytes = 4096;

size_t DefaultLimit() {
  const char* env = std::getenv("TOB_HOST_CACHE_MB");
  if (env == nullptr || *env == '\0') return size_t{256} << 20;
  try {
    return static_cast<size_t>(std::stoull(env)) << 20;
  } catch (...) {
    return size_t{256} << 20;  // an unparsable value keeps the default rather than failing allocations
  }
}

struct HostBlockCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // total size (header included) -> raw blocks
  HostBlockCacheStats stats{0, DefaultLimit(), 0, 0};

  // Frees blocks until at most `keep` bytes are cached; mu must be held.
  void TrimTo(size_t keep) {
    for (auto it = free_blocks.begin(); it != free_blocks.end() && stats.cached_bytes > keep;) {
      while (!it->second.empty() && stats.cached_bytes > keep) {
        std::free(it->second.back());
        it->second.pop_back();
        stats.cached_bytes -= it->first;
      }
      it = it->second.empty() ? free_blocks.erase(it) : std::next(it);
    }
  }
};

// Never destroyed: tensors freed during interpreter shutdown still return their blocks here.
HostBlockCache& Cache() {
  static HostBlockCache* cache = new HostBlockCache();
  return *cache;
}

}  // namespace

HostBlockCacheStats GetHostBlockCacheStats() {
  std::lock_guard<std::mutex> lock(Cache().mu);
  return Cache().stats;
}

void ReleaseHostBlockCache() {
  std::lock_guard<std::mutex> lock(Cache().mu);
  Cache().TrimTo(0);
}

void SetHostBlockCacheLimit(size_t bytes) {
  std::lock_guard<std::mutex> lock(Cache().mu);
  Cache().stats.limit_bytes = bytes;
  Cache().TrimTo(bytes);
}

std::string Device::ToString() const {
  return type == DeviceType::kCPU ? "cpu" : StrCat("cuda:", index);
}

void* CpuAllocator::Alloc(size_t bytes) {
  size_t total = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment + kHeaderBytes;
  if (total >= kHostBlockCacheMinBytes) {
    total = (total + kPageBytes - 1) / kPageBytes * kPageBytes;  // sizes that recur match exactly
    HostBlockCache& cache = Cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.free_blocks.find(total);
    if (it != cache.free_blocks.end() && !it->second.empty()) {
      void* raw = it->second.back();
      it->second.pop_back();
      cache.stats.cached_bytes -= total;
      ++cache.stats.hits;
      return static_cast<char*>(raw) + kHeaderBytes;
    }
    ++cache.stats.misses;
  }
  void* raw = std::aligned_alloc(kTensorAlignment, total);
  if (raw == nullptr) return nullptr;
  *static_cast<size_t*>(raw) = total;
  return static_cast<char*>(raw) + kHeaderBytes;
}

void CpuAllocator::Free(void* p) {
  if (p == nullptr) return;
  void* raw = static_cast<char*>(p) - kHeaderBytes;
  const size_t total = *static_cast<size_t*>(raw);
  if (total >= kHostBlockCacheMinBytes) {
    HostBlockCache& cache = Cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    if (cache.stats.cached_bytes + total <= cache.stats.limit_bytes) {
      cache.free_blocks[total].push_back(raw);
      cache.stats.cached_bytes += total;
      return;
    }
  }
  std::free(raw);
}

const std::shared_ptr<CpuAllocator>& CpuAllocator::Default() {
  static const std::shared_ptr<CpuAllocator> instance = std::make_shared<CpuAllocator>();
  return instance;
}

std::shared_ptr<Buffer> AllocateBuffer(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
  void* p = allocator->Alloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return nullptr;
  std::shared_ptr<Allocator> keep = allocator;
  return std::make_shared<Buffer>(p, bytes, allocator->device(),
                                  [keep](void* ptr) { keep->Free(ptr); });
}

}  // namespace tob
