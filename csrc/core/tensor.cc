#include "core/tensor.h"

#include <cstring>
#include <new>

#include "core/low_precision.h"

namespace tob {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeToString(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> ContiguousStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

namespace {

// The elements of a string tensor are objects: constructed here, destroyed with the buffer. They
// live on the host heap, never in a run's arena: the arena hands out raw bytes that a later buffer
// reuses without running destructors, and the characters are heap allocations of their own anyway.
StatusOr<Tensor> AllocateStrings(const Shape& shape) {
  const int64_t n = NumElements(shape);
  const std::shared_ptr<CpuAllocator>& heap = CpuAllocator::Default();
  const size_t bytes = static_cast<size_t>(n) * sizeof(std::string);
  void* p = heap->Alloc(bytes == 0 ? 1 : bytes);
  if (p == nullptr) return Status(StatusCode::kOutOfMemory, StrCat("out of memory allocating ", n, " strings"));
  auto* strings = static_cast<std::string*>(p);
  for (int64_t i = 0; i < n; ++i) new (strings + i) std::string();
  auto buffer = std::make_shared<Buffer>(p, bytes, Device{}, [heap, n](void* data) {
    auto* s = static_cast<std::string*>(data);
    for (int64_t i = 0; i < n; ++i) s[i].~basic_string();
    heap->Free(data);
  });
  return Tensor(DType::kString, shape, std::move(buffer));
}

}  // namespace

StatusOr<Tensor> Tensor::Allocate(DType dtype, const Shape& shape, const std::shared_ptr<Allocator>& allocator) {
  for (int64_t d : shape)
    if (d < 0) return InvalidArgument("cannot allocate a tensor of shape ", ShapeToString(shape));
  if (dtype == DType::kString) {
    if (allocator->device().type != DeviceType::kCPU)
      return InvalidArgument("string tensors live in host memory; cannot allocate one on ", allocator->name());
    return AllocateStrings(shape);
  }
  const size_t bytes = DTypeStorageBytes(dtype, NumElements(shape));
  auto buffer = AllocateBuffer(allocator, bytes);
  if (!buffer)
    return Status(StatusCode::kOutOfMemory,
                  StrCat("out of memory allocating ", bytes, " bytes on ", allocator->name()));
  return Tensor(dtype, shape, std::move(buffer));
}

void CopyTensorData(const Tensor& src, Tensor& dst) {
  TOB_ENFORCE(src.dtype() == dst.dtype() && src.numel() == dst.numel(), "CopyTensorData: ", DTypeName(src.dtype()),
              ShapeToString(src.shape()), " into ", DTypeName(dst.dtype()), ShapeToString(dst.shape()));
  if (src.SharesDataWith(dst) || src.numel() == 0) return;
  if (src.dtype() == DType::kString) {
    const std::string* s = src.data<std::string>();
    std::string* d = dst.data<std::string>();
    for (int64_t i = 0; i < src.numel(); ++i) d[i] = s[i];
    return;
  }
  std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
}

double Tensor::ElementAsDouble(int64_t i) const {
  if (IsLowPrecision(dtype_)) {
    const uint8_t* bytes = data<uint8_t>();
    switch (dtype_) {
      case DType::kFloat8E4M3FN: return Float8ToFloat(bytes[i], Float8Kind::kE4M3FN);
      case DType::kFloat8E4M3FNUZ: return Float8ToFloat(bytes[i], Float8Kind::kE4M3FNUZ);
      case DType::kFloat8E5M2: return Float8ToFloat(bytes[i], Float8Kind::kE5M2);
      case DType::kFloat8E5M2FNUZ: return Float8ToFloat(bytes[i], Float8Kind::kE5M2FNUZ);
      case DType::kFloat8E8M0: return Float8E8M0ToFloat(bytes[i]);
      case DType::kFloat4E2M1: return Float4E2M1ToFloat(LoadPackedCode(bytes, i, 4));
      case DType::kUInt4: return LoadPackedCode(bytes, i, 4);
      case DType::kInt4: return SignExtendCode(LoadPackedCode(bytes, i, 4), 4);
      case DType::kUInt2: return LoadPackedCode(bytes, i, 2);
      case DType::kInt2: return SignExtendCode(LoadPackedCode(bytes, i, 2), 2);
      default: break;
    }
  }
  double v = 0;
  bool ok =
      DispatchDType<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t,
                    uint64_t, bool>(dtype_, [&]<typename T>() { v = static_cast<double>(data<T>()[i]); });
  TOB_ENFORCE(ok, "ElementAsDouble on dtype ", DTypeName(dtype_));
  return v;
}

int64_t Tensor::ElementAsInt64(int64_t i) const {
  if (dtype_ == DType::kInt64) return data<int64_t>()[i];
  if (dtype_ == DType::kInt32) return data<int32_t>()[i];
  return static_cast<int64_t>(ElementAsDouble(i));
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = ElementAsInt64(i);
  return out;
}

}  // namespace tob
