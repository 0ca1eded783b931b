"""Encoding of one ATen call as a com.microsoft ATen node (run by the engine's torch provider).

The node contract (docs/architecture.md, "ATen nodes"): attributes ``operator``, ``overload_name``
and, when the schema has tensor-list arguments, ``tensor_list_lengths``; one input per schema
argument in schema order (tensor lists expanded in place, trailing defaults left out, "" = None);
non-tensor arguments as small constant tensors (int -> int64 0-d, int[] -> int64 1-D, float ->
float64, bool -> bool, Scalar -> by its Python type, ScalarType/Layout/MemoryFormat -> torch's enum
code as int64, str -> uint8 UTF-8 bytes). Device and Generator arguments are never inputs: the
provider's device and torch's default generator.

``encode_aten_call`` does not build nodes: it tells the exporter what each input is, and the
exporter turns that into values of its graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np
import torch

__all__ = ["AtenCall", "AtenEncodingError", "Input", "encode_aten_call", "scalar_type_code"]

# ("value", obj): a graph value passed as is; ("none",): an omitted input; ("const", ndarray): an
# encoded constant; ("int_list", [int | obj, ...]): an int64 1-D the exporter concatenates from
# static ints and graph SymInt values; ("scalar", number, torch.dtype): a Python number given
# where the schema has a Tensor (a "wrapped number"), as a 0-d tensor of the dtype torch computes in.
Input = Union[tuple[str], tuple[str, Any], tuple[str, Any, torch.dtype]]


class AtenEncodingError(ValueError):
    """An ATen call the node contract cannot carry; names the op and the argument."""


@dataclass
class AtenCall:
    attributes: dict[str, Any] = field(default_factory=dict)
    inputs: list[Input] = field(default_factory=list)


# c10::ScalarType, c10::Layout and c10::MemoryFormat codes (torch/headeronly/core/*.h). These
# numbers are part of torch's serialization formats and do not change between releases.
_SCALAR_TYPE_NAMES = [
    "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex32",
    "complex64", "complex128", "bool", "qint8", "quint8", "qint32", "bfloat16", "quint4x2", "quint2x4",
    "bits1x8", "bits2x4", "bits4x2", "bits8", "bits16", "float8_e5m2", "float8_e4m3fn",
    "float8_e5m2fnuz", "float8_e4m3fnuz", "uint16", "uint32", "uint64",
]
_SCALAR_TYPE_CODES = {
    getattr(torch, name): code for code, name in enumerate(_SCALAR_TYPE_NAMES) if hasattr(torch, name)
}
_LAYOUT_CODES = {
    getattr(torch, name): code
    for code, name in enumerate(
        ["strided", "sparse_coo", "sparse_csr", "_mkldnn", "sparse_csc", "sparse_bsr", "sparse_bsc", "jagged"]
    )
    if hasattr(torch, name)
}
_MEMORY_FORMAT_CODES = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}

_STATIC = (bool, int, float, str, type(None), list, tuple, torch.dtype, torch.layout, torch.memory_format,
           torch.device)
_INT_KINDS = ("IntType", "SymIntType")
_FLOAT_KINDS = ("FloatType", "SymFloatType")
_BOOL_KINDS = ("BoolType", "SymBoolType")


def scalar_type_code(dtype: torch.dtype) -> int:
    """torch's c10::ScalarType number of a dtype (torch.float32 -> 6)."""
    try:
        return _SCALAR_TYPE_CODES[dtype]
    except KeyError:
        raise AtenEncodingError(f"dtype {dtype} has no c10::ScalarType code known to the encoder") from None


def _is_graph_value(v: Any) -> bool:
    return not isinstance(v, _STATIC)


def _operator_name(op: torch._ops.OpOverload) -> tuple[str, str]:
    schema = op._schema
    name = schema.name
    if name.startswith("aten::"):
        name = name[len("aten::"):]
    return name, schema.overload_name


class _Encoder:
    def __init__(self, op: torch._ops.OpOverload) -> None:
        self.op = op
        self.inputs: list[Input] = []
        self.list_lengths: list[int] = []
        self.wrapped = False

    def fail(self, arg: Any, message: str) -> AtenEncodingError:
        return AtenEncodingError(f"{self.op}: argument '{arg.name}' ({arg.real_type}): {message}")

    # ---- one argument ----
    def encode(self, arg: Any, value: Any) -> None:
        jit_type = arg.type
        optional = jit_type.kind() == "OptionalType"
        inner = jit_type.getElementType() if optional else jit_type
        real = arg.real_type.getElementType() if arg.real_type.kind() == "OptionalType" else arg.real_type
        kind = inner.kind()
        if kind == "DeviceObjType":
            self.inputs.append(("none",))  # always the provider's device
            return
        if kind == "GeneratorType":
            if value is not None:
                raise self.fail(arg, "an explicit Generator cannot be carried; torch's default generator is used")
            self.inputs.append(("none",))
            return
        if value is None:
            if not optional:
                raise self.fail(arg, "None given for a non-optional argument")
            self.inputs.append(("none",))
            return
        if kind == "TensorType":
            if isinstance(value, (bool, int, float)):
                self.inputs.append(("wrapped", value))  # its dtype is settled once every tensor is seen
                self.wrapped = True
            else:
                self.inputs.append(("value", self.graph_value(arg, value)))
        elif kind == "ListType":
            self.encode_list(arg, inner.getElementType(), value)
        elif kind in _INT_KINDS:
            self.inputs.append(self.int_scalar(arg, real.kind(), value))
        elif kind in _FLOAT_KINDS:
            self.inputs.append(self.number(arg, value, np.float64, (int, float)))
        elif kind in _BOOL_KINDS:
            self.inputs.append(self.number(arg, value, np.bool_, (bool,)))
        elif kind == "NumberType":
            self.inputs.append(self.scalar(arg, value))
        elif kind in ("StringType", "AnyType"):
            # An `Any` argument is carried as a string: the process-group name that torch's functional
            # collectives (_c10d_functional) take there.
            if not isinstance(value, str):
                raise self.fail(arg, f"expected a str, got {type(value).__name__}")
            self.inputs.append(("const", np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()))
        else:
            raise self.fail(arg, f"type {arg.real_type} cannot be carried by an ATen node")

    def graph_value(self, arg: Any, value: Any) -> Any:
        if not _is_graph_value(value):
            raise self.fail(arg, f"expected a tensor of the graph, got {type(value).__name__} {value!r}")
        return value

    def int_scalar(self, arg: Any, real_kind: str, value: Any) -> Input:
        if isinstance(value, int) and not isinstance(value, bool):
            return ("const", np.array(value, dtype=np.int64))  # an int, or an enum already as its code
        if real_kind == "ScalarTypeType":
            if not isinstance(value, torch.dtype):
                raise self.fail(arg, f"expected a torch.dtype, got {value!r}")
            return ("const", np.array(scalar_type_code(value), dtype=np.int64))
        if real_kind == "LayoutType":
            if value not in _LAYOUT_CODES:
                raise self.fail(arg, f"expected a torch.layout, got {value!r}")
            return ("const", np.array(_LAYOUT_CODES[value], dtype=np.int64))
        if real_kind == "MemoryFormatType":
            if value not in _MEMORY_FORMAT_CODES:
                raise self.fail(arg, f"expected a torch.memory_format, got {value!r}")
            return ("const", np.array(_MEMORY_FORMAT_CODES[value], dtype=np.int64))
        return self.number(arg, value, np.int64, (int,))

    def number(self, arg: Any, value: Any, np_dtype: type, accepted: tuple[type, ...]) -> Input:
        if _is_graph_value(value):
            return ("value", value)  # a SymInt / SymFloat computed in the graph
        if not isinstance(value, accepted):
            raise self.fail(arg, f"expected {' or '.join(t.__name__ for t in accepted)}, got {value!r}")
        return ("const", np.array(value, dtype=np_dtype))

    def scalar(self, arg: Any, value: Any) -> Input:
        if _is_graph_value(value):
            return ("value", value)
        if isinstance(value, bool):
            return ("const", np.array(value, dtype=np.bool_))
        if isinstance(value, int):
            return ("const", np.array(value, dtype=np.int64))
        if isinstance(value, float):
            return ("const", np.array(value, dtype=np.float64))
        raise self.fail(arg, f"expected a number, got {type(value).__name__} {value!r}")

    def encode_list(self, arg: Any, elem: Any, value: Any) -> None:
        elem_kind = elem.kind()
        if elem_kind == "TensorType" or (
            elem_kind == "OptionalType" and elem.getElementType().kind() == "TensorType"
        ):
            if not isinstance(value, (list, tuple)):
                raise self.fail(arg, f"expected a list of tensors, got {type(value).__name__}")
            for i, v in enumerate(value):
                if v is None and elem_kind == "OptionalType":
                    self.inputs.append(("none",))
                elif v is None:
                    raise self.fail(arg, f"element {i} is None in a list of non-optional tensors")
                else:
                    self.inputs.append(("value", self.graph_value(arg, v)))
            self.list_lengths.append(len(value))
            return
        size = arg.N
        if not isinstance(value, (list, tuple)):
            value = [value] * (size or 1)  # int[2] given as 3 means [3, 3]
        elif size and len(value) == 1 and size > 1:
            value = list(value) * size
        if elem_kind in _INT_KINDS:
            if any(_is_graph_value(v) for v in value):
                for v in value:
                    if not _is_graph_value(v) and not isinstance(v, int):
                        raise self.fail(arg, f"expected ints, got {v!r}")
                self.inputs.append(("int_list", list(value)))
                return
            self._check_all(arg, value, (int,))
            self.inputs.append(("const", np.array(value, dtype=np.int64).reshape(len(value))))
        elif elem_kind in _FLOAT_KINDS:
            self._check_all(arg, value, (int, float))
            self.inputs.append(("const", np.array(value, dtype=np.float64).reshape(len(value))))
        elif elem_kind in _BOOL_KINDS:
            self._check_all(arg, value, (bool,))
            self.inputs.append(("const", np.array(value, dtype=np.bool_).reshape(len(value))))
        else:
            raise self.fail(arg, f"lists of {elem} cannot be carried by an ATen node")

    def _check_all(self, arg: Any, values: Any, accepted: tuple[type, ...]) -> None:
        for v in values:
            if not isinstance(v, accepted):
                raise self.fail(arg, f"expected a list of {' or '.join(t.__name__ for t in accepted)}, got {v!r}")


def _settle_wrapped_numbers(inputs: list) -> None:
    """A Python number in a Tensor slot takes part in type promotion as a wrapped number (it never
    widens a tensor of its own kind); the provider sees a plain 0-d tensor, which would. So the number
    becomes a 0-d tensor of the dtype torch computes the call in: the same result dtype, and the
    value converted as torch converts it (integers wrap)."""
    probe = None
    for item in inputs:
        dtype = getattr(item[1], "dtype", None) if item[0] == "value" else None
        if not isinstance(dtype, torch.dtype):
            continue
        shape = getattr(item[1], "shape", None)
        t = torch.empty((1,) if shape != () else (), dtype=dtype)
        probe = t if probe is None else torch.empty(
            (1,) if probe.dim() or t.dim() else (), dtype=torch.result_type(probe, t))
    for i, item in enumerate(inputs):
        if item[0] != "wrapped":
            continue
        value = item[1]
        dtype = torch.result_type(probe, value) if probe is not None else torch.tensor(value).dtype
        inputs[i] = ("scalar", value, dtype)


def encode_aten_call(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> AtenCall:
    """Encodes ``op(*args, **kwargs)`` (an FX node's target and arguments, graph values opaque) as
    the inputs and attributes of a com.microsoft ATen node."""
    if not isinstance(op, torch._ops.OpOverload):
        raise AtenEncodingError(f"{op!r} is not a torch operator overload")
    schema = op._schema
    for a in schema.arguments:
        if a.is_write:
            raise AtenEncodingError(
                f"{op}: argument '{a.name}' is mutated by the operator ({schema}); "
                "ATen nodes run functional operators only"
            )
    positional = [a for a in schema.arguments if not a.kwarg_only]
    if len(args) > len(positional):
        raise AtenEncodingError(f"{op}: {len(args)} positional arguments given, the schema takes {len(positional)}")
    by_name = {a.name: a for a in schema.arguments}
    for name in kwargs:
        if name not in by_name:
            raise AtenEncodingError(f"{op}: unknown keyword argument '{name}' ({schema})")
    given: dict[str, Any] = {a.name: v for a, v in zip(positional, args)}
    for name, v in kwargs.items():
        if name in given:
            raise AtenEncodingError(f"{op}: argument '{name}' given twice")
        given[name] = v

    # Arguments after the last one given are left out: the provider takes the schema default.
    last = max((i for i, a in enumerate(schema.arguments) if a.name in given), default=-1)
    enc = _Encoder(op)
    for i, a in enumerate(schema.arguments):
        if a.name in given:
            enc.encode(a, given[a.name])
        elif a.type.kind() in ("DeviceObjType", "GeneratorType") or (
            a.type.kind() == "OptionalType" and a.type.getElementType().kind() in ("DeviceObjType", "GeneratorType")
        ):
            if i <= last:
                enc.inputs.append(("none",))
        elif not a.has_default_value():
            raise AtenEncodingError(f"{op}: required argument '{a.name}' ({a.real_type}) is missing")
        elif i <= last:
            # A default in the middle is spelled out: "" would mean None, not the default.
            enc.encode(a, a.default_value)
    for r in schema.returns:
        if r.is_write:
            raise AtenEncodingError(f"{op}: returns an alias it mutates; ATen nodes run functional operators only")
    if enc.wrapped:
        _settle_wrapped_numbers(enc.inputs)
    name, overload = _operator_name(op)
    attributes: dict[str, Any] = {"operator": name, "overload_name": overload}
    if enc.list_lengths:
        attributes["tensor_list_lengths"] = list(enc.list_lengths)
    return AtenCall(attributes=attributes, inputs=enc.inputs)
