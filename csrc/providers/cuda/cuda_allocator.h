// Device memory for one GPU: cudaMalloc behind a caching free list, so the executor's per-run
// allocations stop paying for cudaMalloc/cudaFree (each of which synchronises the device). Blocks
// are rounded to size classes and a freed block waits in its class's list for the next request
// of that class. Reuse is safe without events because every kernel and copy of a device runs on
// that device's one stream (CudaDeviceContext), in order.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"

namespace tob {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  // Cached blocks go back to the driver; blocks still handed out are the owners' business.
  ~CudaAllocator() override;

  // nullptr when the device is out of memory even after the cache was returned to the driver.
  void* Alloc(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return Device{DeviceType::kCUDA, device_}; }
  const char* name() const override { return "cuda"; }

  // Returns every cached block to the driver.
  void EmptyCache();
  size_t live_bytes() const;    // handed out, in size-class bytes
  size_t cached_bytes() const;  // held in the free lists
  size_t peak_bytes() const;    // most live bytes at once

  // The block size a request of `bytes` gets: a multiple of 512 up to 2 KiB, then four classes
  // per power of two (4096, 5120, 6144, 7168, 8192, ...), so large requests waste under 25%.
  static size_t SizeClass(size_t bytes);

  // The process-wide allocator of `device`, shared by every provider and session using it.
  static const std::shared_ptr<CudaAllocator>& ForDevice(int device);

 private:
  void EmptyCacheLocked();

  const int device_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // size class -> blocks
  std::unordered_map<void*, size_t> live_blocks_;               // block -> size class
  size_t live_bytes_ = 0, cached_bytes_ = 0, peak_bytes_ = 0;
};

}  // namespace tob
