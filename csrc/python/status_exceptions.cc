#include "python/status_exceptions.h"

namespace py = pybind11;

namespace tob::python {

namespace {

PyObject* g_engine_error = nullptr;
PyObject* g_invalid_argument = nullptr;
PyObject* g_invalid_model = nullptr;
PyObject* g_not_implemented = nullptr;
PyObject* g_out_of_memory = nullptr;
PyObject* g_kernel_error = nullptr;
PyObject* g_op_not_allowed = nullptr;

// A class deriving from EngineError and, when given, a builtin exception.
PyObject* NewEngineException(const char* name, PyObject* builtin) {
  if (builtin == nullptr) return PyErr_NewException(name, g_engine_error, nullptr);
  return PyErr_NewException(name, py::make_tuple(py::handle(g_engine_error), py::handle(builtin)).release().ptr(),
                            nullptr);
}

PyObject* ExceptionFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return g_invalid_argument;
    case StatusCode::kInvalidModel: return g_invalid_model;
    case StatusCode::kNotImplemented: return g_not_implemented;
    case StatusCode::kOutOfMemory: return g_out_of_memory;
    case StatusCode::kRuntimeError: return g_kernel_error;
    case StatusCode::kPermissionDenied: return g_op_not_allowed;
    case StatusCode::kOk: break;
  }
  return g_engine_error;
}

}  // namespace

void RegisterStatusExceptions(py::module_& m) {
  g_engine_error = PyErr_NewException("torch_ort_backend._C.EngineError", PyExc_RuntimeError, nullptr);
  g_invalid_argument = NewEngineException("torch_ort_backend._C.InvalidArgumentError", PyExc_ValueError);
  g_invalid_model = NewEngineException("torch_ort_backend._C.InvalidModelError", PyExc_ValueError);
  g_not_implemented = NewEngineException("torch_ort_backend._C.NotImplementedOpError", PyExc_NotImplementedError);
  g_out_of_memory = NewEngineException("torch_ort_backend._C.OutOfMemoryError", PyExc_MemoryError);
  g_kernel_error = NewEngineException("torch_ort_backend._C.KernelError", nullptr);
  g_op_not_allowed = NewEngineException("torch_ort_backend._C.OpNotAllowedError", PyExc_PermissionError);
  m.attr("EngineError") = py::handle(g_engine_error);
  m.attr("InvalidArgumentError") = py::handle(g_invalid_argument);
  m.attr("InvalidModelError") = py::handle(g_invalid_model);
  m.attr("NotImplementedOpError") = py::handle(g_not_implemented);
  m.attr("OutOfMemoryError") = py::handle(g_out_of_memory);
  m.attr("KernelError") = py::handle(g_kernel_error);
  m.attr("OpNotAllowedError") = py::handle(g_op_not_allowed);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const InternalError& e) {
      PyErr_SetString(g_engine_error, e.what());
    }
  });
}

void Raise(const Status& s) {
  // A message may quote bytes from the model (an attribute that is not UTF-8): replace, never fail.
  PyObject* message = PyUnicode_DecodeUTF8(s.message().data(), static_cast<Py_ssize_t>(s.message().size()), "replace");
  PyErr_SetObject(ExceptionFor(s.code()), message);
  Py_XDECREF(message);
  throw py::error_already_set();
}

}  // namespace tob::python
