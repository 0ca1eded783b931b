#include "python/tensor_bridge.h"

#include <cstring>
#include <memory>
#include <stdexcept>

#include "core/low_precision.h"
#include "python/dlpack.h"
#include "python/status_exceptions.h"

namespace py = pybind11;

namespace tob::python {

namespace {

// DLPack's type codes, one row per engine dtype (both directions read this table).
struct DLDTypeRow {
  DType dtype;
  uint8_t code;
  uint8_t bits;
};
constexpr DLDTypeRow kDLDTypes[] = {
    {DType::kFloat32, kDLFloat, 32},
    {DType::kFloat64, kDLFloat, 64},
    {DType::kFloat16, kDLFloat, 16},
    {DType::kBFloat16, kDLBfloat, 16},
    {DType::kInt8, kDLInt, 8},
    {DType::kInt16, kDLInt, 16},
    {DType::kInt32, kDLInt, 32},
    {DType::kInt64, kDLInt, 64},
    {DType::kUInt8, kDLUInt, 8},
    {DType::kUInt16, kDLUInt, 16},
    {DType::kUInt32, kDLUInt, 32},
    {DType::kUInt64, kDLUInt, 64},
    {DType::kBool, kDLBool, 8},
    {DType::kFloat8E4M3FN, kDLFloat8_e4m3fn, 8},
    {DType::kFloat8E4M3FNUZ, kDLFloat8_e4m3fnuz, 8},
    {DType::kFloat8E5M2, kDLFloat8_e5m2, 8},
    {DType::kFloat8E5M2FNUZ, kDLFloat8_e5m2fnuz, 8},
    {DType::kFloat8E8M0, kDLFloat8_e8m0fnu, 8},
};

bool DTypeFromDL(const DLDataType& t, DType* out) {
  if (t.lanes != 1) return false;
  for (const DLDTypeRow& row : kDLDTypes) {
    if (row.code == t.code && row.bits == t.bits) {
      *out = row.dtype;
      return true;
    }
  }
  return false;
}

DLDataType DTypeToDL(DType t) {
  for (const DLDTypeRow& row : kDLDTypes) {
    if (row.dtype == t) return {row.code, row.bits, 1};
  }
  throw std::invalid_argument(StrCat("dtype ", DTypeName(t), " cannot be exported by DLPack"));
}

// What an exported capsule owns: the engine tensor (keeps its buffer) and the shape array.
struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape;
  DLManagedTensor managed;
};

void DeleteExport(DLManagedTensor* self) { delete static_cast<ExportContext*>(self->manager_ctx); }

void CapsuleDestructor(PyObject* capsule) {
  // Called when the capsule dies unconsumed (name still "dltensor").
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

}  // namespace

DType DTypeFromNumpy(const py::dtype& dt) {
  const char kind = dt.kind();
  const size_t size = dt.itemsize();
  if (size <= 2 && (kind == 'V' || kind == 'f')) {
    // ml_dtypes' types, known by name (their kind is 'V', except float8_e5m2's, which is 'f').
    static const std::pair<const char*, DType> kNames[] = {{"bfloat16", DType::kBFloat16},
                                                           {"float8_e4m3fn", DType::kFloat8E4M3FN},
                                                           {"float8_e4m3fnuz", DType::kFloat8E4M3FNUZ},
                                                           {"float8_e5m2", DType::kFloat8E5M2},
                                                           {"float8_e5m2fnuz", DType::kFloat8E5M2FNUZ},
                                                           {"float8_e8m0fnu", DType::kFloat8E8M0},
                                                           {"float4_e2m1fn", DType::kFloat4E2M1},
                                                           {"int4", DType::kInt4},
                                                           {"uint4", DType::kUInt4},
                                                           {"int2", DType::kInt2},
                                                           {"uint2", DType::kUInt2}};
    const std::string name = py::str(dt);
    for (const auto& [n, t] : kNames)
      if (name == n) return t;
  }
  if (kind == 'f') {
    if (size == 4) return DType::kFloat32;
    if (size == 8) return DType::kFloat64;
    if (size == 2) return DType::kFloat16;
  } else if (kind == 'i') {
    if (size == 1) return DType::kInt8;
    if (size == 2) return DType::kInt16;
    if (size == 4) return DType::kInt32;
    if (size == 8) return DType::kInt64;
  } else if (kind == 'u') {
    if (size == 1) return DType::kUInt8;
    if (size == 2) return DType::kUInt16;
    if (size == 4) return DType::kUInt32;
    if (size == 8) return DType::kUInt64;
  } else if (kind == 'b') {
    return DType::kBool;
  }
  return DType::kUndefined;
}

namespace {

Tensor StringTensorFromNumpy(const py::array& array, const std::string& what) {
  Shape shape(array.shape(), array.shape() + array.ndim());
  StatusOr<Tensor> made = Tensor::Allocate(DType::kString, shape, CpuAllocator::Default());
  if (!made.ok()) throw std::bad_alloc();
  Tensor t = std::move(made).value();
  std::string* out = t.data<std::string>();
  // ravel() walks any layout in C order; tolist() gives str for str_ arrays, bytes for bytes_.
  py::list items = array.attr("ravel")().attr("tolist")();
  for (size_t i = 0; i < items.size(); ++i) {
    PyObject* item = items[i].ptr();
    if (PyUnicode_Check(item)) {
      py::object encoded =
          py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(item, "utf-8", "surrogateescape"));
      if (!encoded) throw py::error_already_set();
      out[i].assign(PyBytes_AS_STRING(encoded.ptr()), static_cast<size_t>(PyBytes_GET_SIZE(encoded.ptr())));
    } else if (PyBytes_Check(item)) {
      out[i].assign(PyBytes_AS_STRING(item), static_cast<size_t>(PyBytes_GET_SIZE(item)));
    } else {
      throw py::type_error(StrCat(what, ": element ", i, " of the string array is a ",
                                  std::string(py::str(py::type::handle_of(py::handle(item)).attr("__name__"))),
                                  "; a string tensor holds str or bytes"));
    }
  }
  return t;
}

}  // namespace

py::object StringTensorToNumpy(const Tensor& tensor) {
  const std::string* in = tensor.data<std::string>();
  py::list items(static_cast<size_t>(tensor.numel()));
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    PyObject* text = PyUnicode_DecodeUTF8(in[i].data(), static_cast<Py_ssize_t>(in[i].size()), "surrogateescape");
    if (text == nullptr) throw py::error_already_set();
    items[static_cast<size_t>(i)] = py::reinterpret_steal<py::object>(text);
  }
  py::module_ np = py::module_::import("numpy");
  py::object flat = np.attr("array")(items, py::arg("dtype") = "object");
  py::tuple shape(tensor.shape().size());
  for (size_t d = 0; d < tensor.shape().size(); ++d) shape[d] = py::int_(tensor.shape()[d]);
  return flat.attr("reshape")(shape);
}

Tensor RelabelTensor(const Tensor& t, DType want, const std::optional<Shape>& shape, const std::string& what) {
  if (want == DType::kUndefined || want == DType::kString)
    throw py::value_error(StrCat(what, ": ONNX dtype ", static_cast<int>(want), " is not supported"));
  if (IsPackedDType(want)) {
    const Shape s = shape ? *shape : t.shape();
    for (int64_t d : s)
      if (d < 0) throw py::value_error(StrCat(what, ": negative dimension in ", ShapeToString(s)));
    const size_t need = DTypeStorageBytes(want, NumElements(s));
    if (t.dtype() != DType::kUInt8 || t.nbytes() != need)
      throw py::value_error(StrCat(what, ": ", DTypeName(want), ShapeToString(s), " needs ", need,
                                   " packed bytes (uint8), got ", DTypeName(t.dtype()), ShapeToString(t.shape())));
    return Tensor(want, s, t.buffer(), t.byte_offset());
  }
  if (DTypeSize(want) != DTypeSize(t.dtype()))
    throw py::value_error(StrCat(what, ": cannot view ", DTypeName(t.dtype()), " data as ", DTypeName(want)));
  return Tensor(want, t.shape(), t.buffer(), t.byte_offset());
}

Tensor UnpackedCodes(const Tensor& t) {
  if (!IsPackedDType(t.dtype())) {
    if (DTypeSize(t.dtype()) != 1) throw py::value_error(StrCat(DTypeName(t.dtype()), " is not a one-byte type"));
    return Tensor(DType::kUInt8, t.shape(), t.buffer(), t.byte_offset());
  }
  const bool is_signed = t.dtype() == DType::kInt4 || t.dtype() == DType::kInt2;
  const int bits = DTypeBits(t.dtype());
  Tensor out = Unwrap(Tensor::Allocate(is_signed ? DType::kInt8 : DType::kUInt8, t.shape(), CpuAllocator::Default()));
  const uint8_t* src = t.data<uint8_t>();
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const uint8_t code = LoadPackedCode(src, i, bits);
    dst[i] = is_signed ? static_cast<uint8_t>(SignExtendCode(code, bits)) : code;
  }
  return out;
}

Tensor TensorFromNumpy(const py::array& array, const std::string& what) {
  const char kind = array.dtype().kind();
  if (kind == 'O' || kind == 'U' || kind == 'S') return StringTensorFromNumpy(array, what);
  DType dtype = DTypeFromNumpy(array.dtype());
  if (dtype == DType::kUndefined)
    throw py::value_error(StrCat(what, ": numpy dtype ", std::string(py::str(array.dtype())), " is not supported"));
  if (!(array.flags() & py::array::c_style)) throw py::value_error(StrCat(what, ": array must be C-contiguous"));
  Shape shape(array.shape(), array.shape() + array.ndim());
  if (IsPackedDType(dtype)) {  // numpy holds one element per byte: pack them (a copy)
    Tensor packed = Unwrap(Tensor::Allocate(dtype, shape, CpuAllocator::Default()));
    const auto* src = static_cast<const uint8_t*>(array.data());
    uint8_t* dst = packed.data<uint8_t>();
    if (packed.nbytes() > 0) std::memset(dst, 0, packed.nbytes());
    const int bits = DTypeBits(dtype);
    for (int64_t i = 0; i < packed.numel(); ++i) StorePackedCode(dst, i, bits, src[i]);
    return packed;
  }
  auto* keep = new py::object(array);
  void* data = const_cast<void*>(array.data());
  auto buffer = std::make_shared<Buffer>(data, array.nbytes(), Device{}, [keep](void*) {
    py::gil_scoped_acquire gil;
    delete keep;
  });
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

Tensor TensorFromDLPack(const py::capsule& capsule, const std::string& what) {
  PyObject* cap = capsule.ptr();
  if (!PyCapsule_IsValid(cap, "dltensor"))
    throw py::value_error(StrCat(what, ": expected an unconsumed DLPack capsule"));
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  const DLTensor& dl = m->dl_tensor;
  DType dtype;
  if (!DTypeFromDL(dl.dtype, &dtype))
    throw py::value_error(
        StrCat(what, ": DLPack dtype (code ", int(dl.dtype.code), ", bits ", int(dl.dtype.bits), ") is not supported"));
  Device device;
  if (dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDAHost) {
    device = Device{};
  } else if (dl.device.device_type == kDLCUDA) {
    device = Device{DeviceType::kCUDA, dl.device.device_id};
  } else {
    throw py::value_error(StrCat(what, ": DLPack device type ", dl.device.device_type, " is not supported"));
  }
  Shape shape(dl.shape, dl.shape + dl.ndim);
  // Strides of an empty tensor address nothing (torch gives [3, 0] strides (1, 1)): any are fine.
  if (dl.strides != nullptr && NumElements(shape) > 0) {
    std::vector<int64_t> want = ContiguousStrides(shape);
    for (int i = 0; i < dl.ndim; ++i)
      if (shape[i] > 1 && dl.strides[i] != want[i])
        throw py::value_error(StrCat(what, ": tensor must be contiguous (call .contiguous())"));
  }
  size_t bytes = DTypeStorageBytes(dtype, NumElements(shape));
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  // Consume the capsule: from now on we own `m` and call its deleter.
  PyCapsule_SetName(cap, "used_dltensor");
  auto buffer = std::make_shared<Buffer>(data, bytes, device, [m](void*) {
    if (m->deleter) {
      py::gil_scoped_acquire gil;
      m->deleter(m);
    }
  });
  return Tensor(dtype, std::move(shape), std::move(buffer));
}

py::capsule TensorToDLPack(const Tensor& tensor) {
  auto* ctx = new ExportContext();
  ctx->tensor = tensor;
  ctx->shape = tensor.shape();
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = const_cast<void*>(tensor.raw_data());
  Device d = tensor.device();
  dl.device = DLDevice{d.type == DeviceType::kCPU ? kDLCPU : kDLCUDA, d.index};
  dl.ndim = static_cast<int32_t>(ctx->shape.size());
  try {
    dl.dtype = DTypeToDL(tensor.dtype());
  } catch (...) {
    delete ctx;
    throw;
  }
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = DeleteExport;
  PyObject* cap = PyCapsule_New(&ctx->managed, "dltensor", CapsuleDestructor);
  if (cap == nullptr) {
    delete ctx;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

}  // namespace tob::python
