#include "providers/torch/aten_tensor_bridge.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <mutex>
#include <unordered_map>

namespace tob {

namespace {

struct DTypePair {
  DType dtype;
  c10::ScalarType scalar_type;
};

constexpr DTypePair kDTypePairs[] = {
    {DType::kFloat32, c10::ScalarType::Float},
    {DType::kFloat64, c10::ScalarType::Double},
    {DType::kFloat16, c10::ScalarType::Half},
    {DType::kBFloat16, c10::ScalarType::BFloat16},
    {DType::kInt8, c10::ScalarType::Char},
    {DType::kUInt8, c10::ScalarType::Byte},
    {DType::kInt16, c10::ScalarType::Short},
    {DType::kUInt16, c10::ScalarType::UInt16},
    {DType::kInt32, c10::ScalarType::Int},
    {DType::kUInt32, c10::ScalarType::UInt32},
    {DType::kInt64, c10::ScalarType::Long},
    {DType::kUInt64, c10::ScalarType::UInt64},
    {DType::kBool, c10::ScalarType::Bool},
    {DType::kFloat8E4M3FN, c10::ScalarType::Float8_e4m3fn},
    {DType::kFloat8E4M3FNUZ, c10::ScalarType::Float8_e4m3fnuz},
    {DType::kFloat8E5M2, c10::ScalarType::Float8_e5m2},
    {DType::kFloat8E5M2FNUZ, c10::ScalarType::Float8_e5m2fnuz},
    {DType::kFloat8E8M0, c10::ScalarType::Float8_e8m0fnu},
};

// Context of a torch DataPtr over engine memory: a reference that keeps the Buffer alive.
void ReleaseBufferRef(void* ctx) { delete static_cast<std::shared_ptr<Buffer>*>(ctx); }

// Torch wants a non-null pointer even for zero elements.
alignas(64) char kEmptyStorage[64];

// The torch tensor behind each Buffer made from a torch result. TorchView hands that tensor itself
// back to torch instead of a new tensor over the same bytes, so torch sees its own storage again:
// c10d's functional collectives need it, as wait_tensor finds the pending work of all_reduce's
// result by its storage (c10d's WorkRegistry) and never waits for a tensor with another storage
// (the collective's result would be read before it arrives). The Buffer's deleter drops the entry.
std::mutex g_torch_results_mu;
std::unordered_map<const Buffer*, at::Tensor> g_torch_results;

void ForgetTorchResult(const Buffer* buffer) {
  at::Tensor dropped;  // released after the lock: freeing it may free other Buffers of this map
  std::lock_guard<std::mutex> lock(g_torch_results_mu);
  auto it = g_torch_results.find(buffer);
  if (it == g_torch_results.end()) return;
  dropped = std::move(it->second);
  g_torch_results.erase(it);
}

// The torch tensor `t` came from, shaped as `t`; undefined when t is engine memory or covers
// anything but that whole tensor.
at::Tensor TorchResultOf(const Tensor& t, c10::ScalarType scalar_type) {
  if (!t.buffer() || t.byte_offset() != 0) return at::Tensor();
  at::Tensor held;
  {
    std::lock_guard<std::mutex> lock(g_torch_results_mu);
    auto it = g_torch_results.find(t.buffer().get());
    if (it == g_torch_results.end()) return at::Tensor();
    held = it->second;
  }
  if (held.scalar_type() != scalar_type || held.numel() != t.numel() || !held.is_contiguous()) return at::Tensor();
  if (held.sizes() == c10::IntArrayRef(t.shape())) return held;
  return held.view(t.shape());
}

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
  at::Tensor own = TorchResultOf(t, static_cast<c10::ScalarType>(scalar_type));
  if (own.defined()) return own;
  return TorchTensorOver(t);
}

StatusOr<at::Tensor> TorchTensorOver(const Tensor& t) {
  const int scalar_type = TorchScalarTypeOf(t.dtype());
  if (scalar_type < 0) return InvalidArgument("dtype ", DTypeName(t.dtype()), " has no torch equivalent");
  if (t.device().type != DeviceType::kCPU)
    return InvalidArgument("tensor on ", t.device().ToString(), "; torch tensors over engine memory are cpu ones");
  const auto options = c10::TensorOptions().dtype(static_cast<c10::ScalarType>(scalar_type)).device(c10::kCPU);
  void* data = const_cast<void*>(t.raw_data());
  if (t.numel() > 0 && data == nullptr) return InvalidArgument("a tensor of ", t.numel(), " elements without memory");
  if (t.numel() == 0)
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
    return RuntimeError("torch returned a ", c10::toString(result.layout()),
                        " tensor; the engine holds dense tensors only");
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
  // The Buffer owns a reference on the torch tensor (its entry in g_torch_results); dropping the
  // Buffer drops the reference.
  auto key = std::make_shared<const Buffer*>(nullptr);
  auto buffer = std::make_shared<Buffer>(data, bytes, Device{}, [key](void*) { ForgetTorchResult(*key); });
  *key = buffer.get();
  {
    std::lock_guard<std::mutex> lock(g_torch_results_mu);
    g_torch_results.emplace(buffer.get(), std::move(t));
  }
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

}  // namespace tob
