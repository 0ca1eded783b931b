#include "providers/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <map>

#include "providers/cuda/cuda_common.h"

namespace tob {

namespace {

constexpr size_t kMinBlock = 512;

}  // namespace

size_t CudaAllocator::SizeClass(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  const int top_bit = std::bit_width(bytes) - 1;  // bytes >= 2^top_bit
  const size_t granule = std::max(kMinBlock, size_t{1} << (top_bit - 2));
  return (bytes + granule - 1) / granule * granule;
}

CudaAllocator::~CudaAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked();
}

void* CudaAllocator::Alloc(size_t bytes) {
  const size_t size = SizeClass(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = nullptr;
  if (auto it = free_blocks_.find(size); it != free_blocks_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
  } else {
    CudaDeviceGuard guard(device_);
    if (!guard.status().ok()) return nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess) {
      // Out of memory (or fragmented by our cache): give the cache back and try once more.
      (void)cudaGetLastError();
      EmptyCacheLocked();
      if (cudaMalloc(&p, size) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
      }
    }
  }
  live_blocks_.emplace(p, size);
  live_bytes_ += size;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return p;
}

void CudaAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_blocks_.find(p);
  TOB_ENFORCE(it != live_blocks_.end(), "CudaAllocator::Free of a pointer it did not allocate");
  const size_t size = it->second;
  live_blocks_.erase(it);
  live_bytes_ -= size;
  free_blocks_[size].push_back(p);
  cached_bytes_ += size;
}

void CudaAllocator::EmptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  EmptyCacheLocked();
}

void CudaAllocator::EmptyCacheLocked() {
  if (cached_bytes_ == 0) return;
  CudaDeviceGuard guard(device_);
  for (auto& [size, blocks] : free_blocks_)
    for (void* p : blocks) (void)cudaFree(p);
  free_blocks_.clear();
  cached_bytes_ = 0;
}

size_t CudaAllocator::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}

size_t CudaAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

size_t CudaAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bytes_;
}

const std::shared_ptr<CudaAllocator>& CudaAllocator::ForDevice(int device) {
  static std::mutex mu;
  // Never destroyed: freeing device memory from static destructors races the driver's teardown.
  static auto* allocators = new std::map<int, std::shared_ptr<CudaAllocator>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = (*allocators)[device];
  if (!slot) slot = std::make_shared<CudaAllocator>(device);
  return slot;
}

}  // namespace tob
