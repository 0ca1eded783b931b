// A dense, contiguous, row-major tensor: dtype + concrete shape + a view into a shared Buffer.
// A string tensor's elements are std::string objects that its Buffer owns: Allocate constructs
// them (always in host heap memory, never in a run's arena) and the Buffer's deleter destroys
// them; CopyTensorData copies them one by one (docs/architecture.md, "String tensors").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/status.h"

namespace tob {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);
// Row-major strides in elements.
std::vector<int64_t> ContiguousStrides(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape, std::shared_ptr<Buffer> buffer, size_t byte_offset = 0)
      : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)), offset_(byte_offset) {}

  // Allocates a tensor from `allocator`; kOutOfMemory status on failure. A string tensor is
  // allocated on the host heap whatever `allocator` is (InvalidArgument for a device allocator),
  // its elements constructed empty.
  static StatusOr<Tensor> Allocate(DType dtype, const Shape& shape, const std::shared_ptr<Allocator>& allocator);
  // A CPU tensor holding a copy of `values` (for tests, constants and scalars).
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return buffer_ != nullptr || dtype_ != DType::kUndefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t dim(int64_t i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return DTypeStorageBytes(dtype_, numel()); }
  Device device() const { return buffer_ ? buffer_->device() : Device{}; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  size_t byte_offset() const { return offset_; }

  void* raw_data() { return buffer_ ? static_cast<char*>(buffer_->data()) + offset_ : nullptr; }
  const void* raw_data() const { return buffer_ ? static_cast<const char*>(buffer_->data()) + offset_ : nullptr; }
  template <typename T>
  T* data() {
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw_data());
  }

  // Same bytes, another shape with the same element count.
  Tensor Reshaped(Shape new_shape) const { return Tensor(dtype_, std::move(new_shape), buffer_, offset_); }
  // Whether both tensors start at the same address (aliasing check).
  bool SharesDataWith(const Tensor& other) const { return raw_data() == other.raw_data(); }

  // Reads element i (any numeric dtype, the low-precision ones decoded) as double / int64; used by
  // shape functions on small constant tensors (shapes, axes, pads) and tests, never in hot loops.
  double ElementAsDouble(int64_t i) const;
  int64_t ElementAsInt64(int64_t i) const;
  std::vector<int64_t> ToInt64Vector() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
};

// dst's elements = src's (same dtype and element count; host tensors for strings): one memcpy,
// or for strings one assignment per element. No-op when both share their data.
void CopyTensorData(const Tensor& src, Tensor& dst);

template <typename T>
Tensor Tensor::FromVector(const std::vector<T>& values, const Shape& shape) {
  if constexpr (std::is_same_v<T, std::string>) {
    TOB_ENFORCE(static_cast<int64_t>(values.size()) == NumElements(shape), "FromVector size mismatch");
    StatusOr<Tensor> t = Allocate(DType::kString, shape, CpuAllocator::Default());
    TOB_ENFORCE(t.ok(), "out of host memory");
    std::string* dst = t.value().template data<std::string>();
    for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
    return std::move(t).value();
  } else {
    auto buffer = AllocateBuffer(CpuAllocator::Default(), values.size() * sizeof(T));
    TOB_ENFORCE(buffer != nullptr, "out of host memory");
    TOB_ENFORCE(static_cast<int64_t>(values.size()) == NumElements(shape), "FromVector size mismatch");
    T* dst = static_cast<T*>(buffer->data());
    for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
    return Tensor(DTypeOf<T>(), shape, std::move(buffer));
  }
}

}  // namespace tob
