#ifdef TOB_WITH_TORCH

#include "python/torch_run.h"

#include <torch/csrc/autograd/python_variable.h>

#include <memory>
#include <utility>

#include "core/status.h"
#include "providers/torch/aten_tensor_bridge.h"

namespace py = pybind11;

namespace tob::python {

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
    // A ZeroTensor, a FakeTensor or a wrapper subclass (TwoTensor) has no memory of its own: its
    // data pointer is null. Refused by name, so that the caller takes the checked path.
    const int64_t numel = t.numel();
    if (t._is_zerotensor() || !t.has_storage())
      throw py::value_error(
          StrCat(what, ": has no memory to borrow (a ZeroTensor, a FakeTensor or a wrapper subclass)"));
    void* data = numel == 0 ? nullptr : t.data_ptr();
    if (numel > 0 && data == nullptr)
      throw py::value_error(StrCat(what, ": has no memory to borrow (its data pointer is null)"));
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

void CheckTorchDTypes(const std::vector<std::string>& labels, const std::vector<DType>& dtypes) {
  for (size_t i = 0; i < dtypes.size(); ++i)
    if (dtypes[i] != DType::kUndefined && TorchScalarTypeOf(dtypes[i]) < 0)
      throw py::value_error(StrCat(labels[i], ": dtype ", DTypeName(dtypes[i]), " has no torch equivalent"));
}

py::list TorchTensorsFromEngine(const std::vector<Tensor>& tensors, const std::vector<std::string>& labels) {
  py::list out(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    StatusOr<at::Tensor> t = TorchTensorOver(tensors[i]);  // refuses a non-empty tensor without memory
    if (!t.ok()) {  // the label is built on this path only (no string copy per output per run)
      const std::string what = i < labels.size() ? labels[i] : StrCat("output ", i);
      throw py::value_error(StrCat(what, ": ", t.status().message()));
    }
    PyObject* wrapped = THPVariable_Wrap(std::move(t).value());
    if (wrapped == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), wrapped);
  }
  return out;
}

}  // namespace tob::python

#endif  // TOB_WITH_TORCH
