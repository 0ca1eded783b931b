#include "core/allocator.h"

#include <cstdlib>

#include "core/status.h"

namespace tob {

std::string Device::ToString() const { return type == DeviceType::kCPU ? "cpu" : StrCat("cuda:", index); }

void* CpuAllocator::Alloc(size_t bytes) {
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  return std::aligned_alloc(kTensorAlignment, rounded);
}

void CpuAllocator::Free(void* p) { std::free(p); }

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
