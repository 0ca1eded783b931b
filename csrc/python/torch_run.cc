#ifdef TOB_WITH_TORCH

#include "python/torch_run.h"

#include <ATen/ops/from_blob.h>
#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <utility>

#include "core/status.h"
#include "providers/torch/aten_tensor_bridge.h"

namespace py = pybind11;

namespace tob::python {

namespace {

// The context of a torch DataPtr over engine memory: a reference that keeps the Buffer alive.
void ReleaseBufferRef(void* ctx) { delete static_cast<std::shared_ptr<Buffer>*>(ctx); }

// Torch wants a non-null data pointer even for zero elements.
alignas(64) char kEmptyStorage[64];

}  // namespace

std::vector<Tensor> EngineTensorsFromTorch(const py::list& args, const std::vector<std::string>& labels) {
  const size_t n = args.size();
  std::vector<Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    PyObject* obj = PyList_GET_ITEM(args.ptr(), static_cast<Py_ssize_t>(i));
    const std::string& what = labels[i];
    if (!THPVariable_Check(obj))
      throw py::type_error(StrCat(what, ": expected a torch tensor, got ", Py_TYPE(obj)->tp_name));
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.device().is_cpu())
      throw py::value_error(StrCat(what, ": the tensor is on ", t.device().str(), "; this path takes CPU tensors"));
    if (t.layout() != c10::kStrided) throw py::value_error(StrCat(what, ": not a dense (strided) tensor"));
    const DType dtype = DTypeOfTorchScalarType(static_cast<int>(t.scalar_type()));
    if (dtype == DType::kUndefined)
      throw py::value_error(StrCat(what, ": torch dtype ", c10::toString(t.scalar_type()), " has no engine dtype"));
    if (t.is_conj() || t.is_neg())
      throw py::value_error(StrCat(what, ": the tensor has its conjugate or negative bit set"));
    if (!t.is_contiguous()) throw py::value_error(StrCat(what, ": tensor must be contiguous (call .contiguous())"));
    const int64_t numel = t.numel();
    void* data = numel == 0 ? nullptr : t.data_ptr();
    // The Buffer holds a reference on the TensorImpl (a trivially copyable deleter, which
    // std::function keeps without an allocation of its own); releasing the Buffer drops it.
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    c10::raw::intrusive_ptr::incref(impl);
    auto buffer = std::make_shared<Buffer>(data, static_cast<size_t>(numel) * DTypeSize(dtype), Device{},
                                           [impl](void*) { c10::raw::intrusive_ptr::decref(impl); });
    out.emplace_back(dtype, Shape(t.sizes().begin(), t.sizes().end()), std::move(buffer));
  }
  return out;
}

py::list TorchTensorsFromEngine(const std::vector<Tensor>& tensors) {
  py::list out(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    const int scalar_type = TorchScalarTypeOf(t.dtype());
    if (scalar_type < 0)
      throw py::value_error(StrCat("output ", i, ": dtype ", DTypeName(t.dtype()), " has no torch equivalent"));
    if (t.device().type != DeviceType::kCPU)
      throw py::value_error(
          StrCat("output ", i, " is on ", t.device().ToString(), "; this path hands back CPU tensors"));
    const auto options = c10::TensorOptions().dtype(static_cast<c10::ScalarType>(scalar_type)).device(c10::kCPU);
    void* data = const_cast<void*>(t.raw_data());
    at::Tensor result = t.numel() == 0 || data == nullptr
                            ? at::for_blob(kEmptyStorage, t.shape())
                                  .options(options)
                                  .target_device(c10::Device(c10::kCPU))
                                  .make_tensor()
                            : at::for_blob(data, t.shape())
                                  .context(new std::shared_ptr<Buffer>(t.buffer()), ReleaseBufferRef)
                                  .options(options)
                                  .target_device(c10::Device(c10::kCPU))
                                  .make_tensor();
    PyObject* wrapped = THPVariable_Wrap(std::move(result));
    if (wrapped == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), wrapped);
  }
  return out;
}

}  // namespace tob::python

#endif  // TOB_WITH_TORCH
