#include "providers/torch/aten_tensor_bridge.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

namespace tob {

namespace {

struct DTypePair {
  DType dtype;
  c10::ScalarType scalar_type;
};

constexpr DTypePair kDTypePairs[] = {
    {DType::kFloat32, c10::ScalarType::Float},   {DType::kFloat64, c10::ScalarType::Double},
    {DType::kFloat16, c10::ScalarType::Half},    {DType::kBFloat16, c10::ScalarType::BFloat16},
    {DType::kInt8, c10::ScalarType::Char},       {DType::kUInt8, c10::ScalarType::Byte},
    {DType::kInt16, c10::ScalarType::Short},     {DType::kUInt16, c10::ScalarType::UInt16},
    {DType::kInt32, c10::ScalarType::Int},       {DType::kUInt32, c10::ScalarType::UInt32},
    {DType::kInt64, c10::ScalarType::Long},      {DType::kUInt64, c10::ScalarType::UInt64},
    {DType::kBool, c10::ScalarType::Bool},
};

// Context of a torch DataPtr over engine memory: a reference that keeps the Buffer alive.
void ReleaseBufferRef(void* ctx) { delete static_cast<std::shared_ptr<Buffer>*>(ctx); }

// Torch wants a non-null pointer even for zero elements.
alignas(64) char kEmptyStorage[64];

}  // namespace

int TorchScalarTypeOf(DType dtype) {
  for (const DTypePair& p : kDTypePairs)
    if (p.dtype == dtype) return static_cast<int>(p.scalar_type);
  return -1;
}

DType DTypeOfTorchScalarType(int scalar_type) {
  for (const DTypePair& p : kDTypePairs)
    if (static_cast<int>(p.scalar_type) == scalar_type) return p.dtype;
  return DType::kUndefined;
}

std::string TorchScalarTypeName(int scalar_type) {
  if (scalar_type < 0 || scalar_type >= static_cast<int>(c10::ScalarType::NumOptions))
    return "scalar type " + std::to_string(scalar_type);
  return c10::toString(static_cast<c10::ScalarType>(scalar_type));
}

StatusOr<at::Tensor> TorchView(const Tensor& t) {
  const int scalar_type = TorchScalarTypeOf(t.dtype());
  if (scalar_type < 0) return InvalidArgument("dtype ", DTypeName(t.dtype()), " has no torch equivalent");
  if (t.device().type != DeviceType::kCPU)
    return InvalidArgument("tensor on ", t.device().ToString(), "; the torch provider runs on cpu");
  const auto options = c10::TensorOptions().dtype(static_cast<c10::ScalarType>(scalar_type)).device(c10::kCPU);
  void* data = const_cast<void*>(t.raw_data());
  if (t.numel() == 0 || data == nullptr)
    return at::for_blob(kEmptyStorage, t.shape()).options(options).target_device(c10::Device(c10::kCPU)).make_tensor();
  return at::for_blob(data, t.shape())
      .context(new std::shared_ptr<Buffer>(t.buffer()), ReleaseBufferRef)
      .options(options)
      .target_device(c10::Device(c10::kCPU))
      .make_tensor();
}

StatusOr<Tensor> EngineTensorFromTorch(const at::Tensor& result) {
  if (!result.defined()) return Tensor();
  if (result.layout() != c10::kStrided)
    return RuntimeError("torch returned a ", c10::toString(result.layout()), " tensor; the engine holds dense tensors only");
  if (!result.device().is_cpu())
    return RuntimeError("torch returned a tensor on ", result.device().str(), "; the torch provider runs on cpu");
  const DType dtype = DTypeOfTorchScalarType(static_cast<int>(result.scalar_type()));
  if (dtype == DType::kUndefined)
    return RuntimeError("torch returned a ", c10::toString(result.scalar_type()),
                        " tensor, a dtype the engine does not have");
  at::Tensor t = result;
  if (t.is_neg()) t = t.resolve_neg();
  if (!t.is_contiguous()) t = t.contiguous();
  Shape shape(t.sizes().begin(), t.sizes().end());
  const size_t bytes = static_cast<size_t>(t.numel()) * DTypeSize(dtype);
  void* data = t.numel() == 0 ? nullptr : t.data_ptr();
  // The Buffer owns a reference on the torch tensor; dropping the Buffer drops the reference.
  auto buffer = std::make_shared<Buffer>(data, bytes, Device{}, [held = std::move(t)](void*) {});
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

}  // namespace tob
