// Tensors across the Python boundary without copies: numpy arrays through the buffer protocol,
// torch (and anything else) through DLPack capsules; engine tensors leave as DLPack capsules
// whose deleter keeps the engine buffer alive until the consumer frees it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "core/tensor.h"

namespace tob::python {

// A C-contiguous numpy array as a Tensor sharing its memory (the array is kept alive). ml_dtypes
// arrays give the low-precision types: float8 arrays are shared too, the 4-bit and 2-bit types (one
// element per byte in numpy) are packed into a new buffer. An array of strings (numpy dtype object holding str or
// bytes, or a str_ / bytes_ dtype) becomes a string tensor holding a copy of each element: str as UTF-8
// (surrogateescape, so str made from any bytes goes back to the same bytes), bytes as they are; any other object raises
// TypeError naming it.
Tensor TensorFromNumpy(const pybind11::array& array, const std::string& what);
// A string tensor as a numpy array of dtype object holding str: each element decoded from UTF-8
// with surrogateescape (bytes that are not UTF-8 survive a round trip).
pybind11::object StringTensorToNumpy(const Tensor& tensor);
// `t`'s bytes under ONNX dtype `want` (bfloat16 and float8 arrive from the loader as uint8 /
// uint16 arrays): same-sized elements keep t's shape; a packed `want` takes t's bytes (uint8,
// onnx's packed layout) as a tensor of `shape`. ValueError naming `what` when they do not fit.
Tensor RelabelTensor(const Tensor& t, DType want, const std::optional<Shape>& shape, const std::string& what);
// One element per byte of a low-precision tensor, for numpy (which views it as the ml_dtypes
// type): a float8 tensor's own bytes as uint8 (no copy), a packed tensor's codes unpacked into a
// new uint8 tensor (int8, sign-extended, for int4/int2).
Tensor UnpackedCodes(const Tensor& t);
// A "dltensor" capsule (e.g. from torch.Tensor.__dlpack__()) as a Tensor sharing its memory;
// the capsule is consumed. Non-contiguous or unsupported dtypes raise ValueError naming `what`.
Tensor TensorFromDLPack(const pybind11::capsule& capsule, const std::string& what);
// A new "dltensor" capsule viewing `tensor`.
pybind11::capsule TensorToDLPack(const Tensor& tensor);

DType DTypeFromNumpy(const pybind11::dtype& dt);

}  // namespace tob::python
