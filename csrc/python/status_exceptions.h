// The one mapping from engine Status codes to the exception classes of torch_ort_backend._C, used
// by every binding file (module.cc, optim_bindings.cc):
//   kInvalidArgument  -> InvalidArgumentError (also a ValueError)
//   kInvalidModel     -> InvalidModelError (also a ValueError)
//   kNotImplemented   -> NotImplementedOpError (also a NotImplementedError)
//   kOutOfMemory      -> OutOfMemoryError (also a MemoryError)
//   kRuntimeError     -> KernelError
//   kPermissionDenied -> OpNotAllowedError (also a PermissionError)
// All derive from EngineError (a RuntimeError), which is also what tob::InternalError becomes.
#pragma once

#include <pybind11/pybind11.h>

#include <utility>

#include "core/status.h"

namespace tob::python {

// Creates the classes as attributes of `m` and installs the translator of tob::InternalError.
// Called once, first thing in the module's init.
void RegisterStatusExceptions(pybind11::module_& m);

// Sets the Python exception of `s` (not OK) and throws pybind11::error_already_set.
[[noreturn]] void Raise(const Status& s);

inline void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Unwrap(StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return std::move(v).value();
}

}  // namespace tob::python
