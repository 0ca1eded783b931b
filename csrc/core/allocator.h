// Allocators and the reference-counted Buffer a Tensor points into.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace tob {

enum class DeviceType : int { kCPU = 0, kCUDA = 1 };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string ToString() const;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns nullptr when out of memory; callers turn that into a kOutOfMemory Status.
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;
};

// 64-byte aligned host memory; counts live and peak bytes.
class CpuAllocator final : public Allocator {
 public:
  void* Alloc(size_t bytes) override;
  void Free(void* p) override;
  Device device() const override { return Device{}; }
  const char* name() const override { return "cpu"; }
  static const std::shared_ptr<CpuAllocator>& Default();
};

inline constexpr size_t kTensorAlignment = 64;

// A block of memory and what frees it. Tensors share Buffers (views, aliases).
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;
  Buffer(void* data, size_t bytes, Device device, Deleter deleter)
      : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}
  ~Buffer() {
    if (deleter_) deleter_(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  Deleter deleter_;
};

// Allocates `bytes` (at least 1) from `allocator`; nullptr when out of memory.
std::shared_ptr<Buffer> AllocateBuffer(const std::shared_ptr<Allocator>& allocator, size_t bytes);

}  // namespace tob
