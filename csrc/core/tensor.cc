#include "core/tensor.h"

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

StatusOr<Tensor> Tensor::Allocate(DType dtype, const Shape& shape, const std::shared_ptr<Allocator>& allocator) {
  for (int64_t d : shape)
    if (d < 0) return InvalidArgument("cannot allocate a tensor of shape ", ShapeToString(shape));
  const size_t bytes = DTypeStorageBytes(dtype, NumElements(shape));
  auto buffer = AllocateBuffer(allocator, bytes);
  if (!buffer)
    return Status(StatusCode::kOutOfMemory,
                  StrCat("out of memory allocating ", bytes, " bytes on ", allocator->name()));
  return Tensor(dtype, shape, std::move(buffer));
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
