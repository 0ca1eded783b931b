// Tensors across the Python boundary without copies: numpy arrays through the buffer protocol,
// torch (and anything else) through DLPack capsules; engine tensors leave as DLPack capsules
// whose deleter keeps the engine buffer alive until the consumer frees it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "core/tensor.h"

namespace tob::python {

// A C-contiguous numpy array as a Tensor sharing its memory (the array is kept alive). An array
// of strings (numpy dtype object holding str or bytes, or a str_ / bytes_ dtype) becomes a string
// tensor holding a copy of each element: str as UTF-8 (surrogateescape, so str made from any bytes
// goes back to the same bytes), bytes as they are; any other object raises TypeError naming it.
Tensor TensorFromNumpy(const pybind11::array& array, const std::string& what);
// A string tensor as a numpy array of dtype object holding str: each element decoded from UTF-8
// with surrogateescape (bytes that are not UTF-8 survive a round trip).
pybind11::object StringTensorToNumpy(const Tensor& tensor);
// A "dltensor" capsule (e.g. from torch.Tensor.__dlpack__()) as a Tensor sharing its memory;
// the capsule is consumed. Non-contiguous or unsupported dtypes raise ValueError naming `what`.
Tensor TensorFromDLPack(const pybind11::capsule& capsule, const std::string& what);
// A new "dltensor" capsule viewing `tensor`.
pybind11::capsule TensorToDLPack(const Tensor& tensor);

DType DTypeFromNumpy(const pybind11::dtype& dt);

}  // namespace tob::python
