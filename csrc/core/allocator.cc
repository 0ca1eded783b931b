#include "core/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "core/status.h"

namespace tob {

std::string Device::ToString() const { return type == DeviceType::kCPU ? "cpu" : StrCat("cuda:", index); }

// malloc, aligned by hand: the block is kTensorAlignment + one pointer larger than asked, and the
// pointer malloc returned sits just below the aligned address. Not aligned_alloc: glibc (2.36, Debian
// 12) serves an aligned request by asking its heap for the size plus the alignment, so a freed block
// never fits the next request of its own size, and a run's freed intermediates pile up in the heap
// instead of being reused (docs/memory_optimizer.md, "glibc's heap").
void* CpuAllocator::Alloc(size_t bytes) {
  const size_t header = sizeof(void*) + kTensorAlignment - 1;
  char* raw = static_cast<char*>(std::malloc(std::max<size_t>(bytes, 1) + header));
  if (raw == nullptr) return nullptr;
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + sizeof(void*) + kTensorAlignment - 1) &
                                          ~uintptr_t{kTensorAlignment - 1});
  reinterpret_cast<void**>(aligned)[-1] = raw;
  return aligned;
}

void CpuAllocator::Free(void* p) {
  if (p != nullptr) std::free(reinterpret_cast<void**>(p)[-1]);
}

const std::shared_ptr<CpuAllocator>& CpuAllocator::Default() {
  static const std::shared_ptr<CpuAllocator> instance = std::make_shared<CpuAllocator>();
  return instance;
}

std::shared_ptr<Buffer> AllocateBuffer(const std::shared_ptr<Allocator>& allocator, size_t bytes) {
  void* p = allocator->Alloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return nullptr;
  std::shared_ptr<Allocator> keep = allocator;
  return std::make_shared<Buffer>(p, bytes, allocator->device(), [keep](void* ptr) { keep->Free(ptr); });
}

}  // namespace tob
