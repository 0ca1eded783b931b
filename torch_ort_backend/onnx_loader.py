"""ONNX model → engine graph.

The onnx package parses and checks; we walk the parsed ModelProto and build the engine IR through
the binding's builder. Initializers stored as raw bytes are handed over without a copy (a numpy
view on the protobuf's bytes, kept alive by the engine tensor).
"""

from __future__ import annotations

import os
from typing import Union

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, numpy_helper

from . import dtypes
from ._engine import RECOMPUTE_KEY, C, InvalidModelError, NotImplementedOpError

ModelLike = Union[str, os.PathLike, bytes, onnx.ModelProto]


def parse_model(model: ModelLike, check: bool = True) -> onnx.ModelProto:
    """Returns a checked ModelProto from a path, serialized bytes or a ModelProto. ``check=False``
    skips onnx's checker, for a ModelProto this process's exporter just made (compiled_graph.py):
    the checker's first call builds onnx's registry of every operator schema, which the process
    then holds to its end (GPT-2 at docs/memory_optimizer.md's size: 9 MiB of the memory compiling
    keeps between steps), and the engine validates each node against its own schemas anyway."""
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        try:
            proto = onnx.load_model_from_string(bytes(model))
        except (DecodeError, RuntimeWarning, ValueError) as e:
            raise InvalidModelError(f"could not parse the model bytes ({len(model)} bytes): {e}") from e
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"ONNX model file not found: {path}")
        try:
            proto = onnx.load(path)
        except (DecodeError, RuntimeWarning, ValueError) as e:
            raise InvalidModelError(f"could not parse ONNX file {path}: {e}") from e
        except onnx.checker.ValidationError as e:
            # onnx refuses external data outside the model's directory, absolute or through a link.
            raise InvalidModelError(f"could not load ONNX file {path}: {e}") from e
    else:
        raise TypeError(
            f"model must be a path, bytes or onnx.ModelProto, got {type(model).__name__}"
        )
    if len(proto.graph.node) == 0 and len(proto.graph.output) == 0:
        raise InvalidModelError("the model has an empty graph (no nodes and no outputs)")
    try:
        if check or proto is not model:  # bytes and files are always checked
            onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        raise InvalidModelError(f"the model is not valid ONNX: {e}") from e
    except UnicodeDecodeError as e:  # the checker's message quotes a name that is not UTF-8
        raise InvalidModelError(f"the model is not valid ONNX: a string field is not UTF-8 ({e})") from e
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    return proto


def _low_precision_bytes(t: TensorProto, what: str) -> np.ndarray:
    """The bytes of a float8 (one per element) or packed 4-/2-bit tensor (onnx's packed layout, the
    engine's too) as uint8: a view of raw_data, or int32_data's entries, one byte each."""
    if t.HasField("raw_data"):
        data = np.frombuffer(t.raw_data, dtype=np.uint8)
    else:
        data = np.asarray(t.int32_data, dtype=np.int64)
        if data.size and (data.min() < -128 or data.max() > 255):
            raise InvalidModelError(f"{what}: int32_data holds values outside one byte")
        data = data.astype(np.uint8)
    n = int(np.prod(tuple(t.dims), dtype=np.int64))
    bits = dtypes.PACKED_BITS.get(t.data_type, 8)
    expected = (n * bits + 7) // 8
    if data.size != expected:
        raise InvalidModelError(
            f"{what}: holds {data.size} bytes but shape {list(t.dims)} of "
            f"{dtypes.onnx_type_name(t.data_type)} needs {expected}"
        )
    return data


def _tensor_to_array(t: TensorProto, what: str) -> tuple[np.ndarray, int]:
    """A numpy view (no copy when stored as raw bytes) and the ONNX dtype it carries. The low-precision
    types come as uint8 bytes (packed for the 4-/2-bit types: see `tensor_data`)."""
    if t.data_type not in dtypes.SUPPORTED:
        raise NotImplementedOpError(
            f"{what}: tensor dtype {dtypes.onnx_type_name(t.data_type)} is not supported by the engine"
        )
    if t.data_location == TensorProto.EXTERNAL:
        raise InvalidModelError(f"{what}: external data was not loaded (load the model from its path)")
    dims = tuple(t.dims)
    if t.data_type == TensorProto.STRING:
        return _string_tensor_to_array(t, dims, what), t.data_type
    if t.data_type in dtypes.PACKED:
        return _low_precision_bytes(t, what), t.data_type  # packed: the binding takes dims separately
    if t.data_type in dtypes.FLOAT8:
        arr = _low_precision_bytes(t, what)
    elif t.data_type == TensorProto.BFLOAT16:
        if t.HasField("raw_data"):
            arr = np.frombuffer(t.raw_data, dtype=np.uint16)
        else:
            arr = np.asarray(t.int32_data, dtype=np.uint32).astype(np.uint16)
    elif t.HasField("raw_data"):
        np_dtype = dtypes.ONNX_TO_NUMPY[t.data_type]
        expected = int(np.prod(dims, dtype=np.int64)) * np_dtype.itemsize
        if len(t.raw_data) != expected:
            raise InvalidModelError(
                f"{what}: raw_data holds {len(t.raw_data)} bytes but shape {list(dims)} of "
                f"{np_dtype} needs {expected}"
            )
        arr = np.frombuffer(t.raw_data, dtype=np_dtype)
    else:
        try:
            arr = numpy_helper.to_array(t)
        except Exception as e:  # onnx raises several types for inconsistent tensors
            raise InvalidModelError(f"{what}: cannot read tensor data: {e}") from e
    try:
        arr = arr.reshape(dims)
    except ValueError as e:
        raise InvalidModelError(f"{what}: data does not match shape {list(dims)}: {e}") from e
    return (arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)), t.data_type


def _string_tensor_to_array(t: TensorProto, dims: tuple, what: str) -> np.ndarray:
    """A string tensor's elements (bytes, as ONNX stores them) as a numpy object array (a copy)."""
    if t.HasField("raw_data"):
        raise InvalidModelError(f"{what}: a string tensor keeps its strings in string_data, not raw_data")
    if any(d < 0 for d in dims):
        raise InvalidModelError(f"{what}: negative dimension in shape {list(dims)}")
    count = int(np.prod(dims, dtype=np.int64))
    if len(t.string_data) != count:
        raise InvalidModelError(
            f"{what}: string_data holds {len(t.string_data)} strings but shape {list(dims)} needs {count}"
        )
    arr = np.empty(count, dtype=object)
    arr[:] = list(t.string_data)
    return arr.reshape(dims)


def _attribute_value(node: onnx.NodeProto, a: AttributeProto, depth: int):
    what = f"node '{node.name}' ({node.op_type}) attribute '{a.name}'"
    if a.type == AttributeProto.FLOAT:
        return a.f
    if a.type == AttributeProto.INT:
        return a.i
    if a.type == AttributeProto.STRING:
        return a.s
    if a.type == AttributeProto.FLOATS:
        return list(a.floats)
    if a.type == AttributeProto.INTS:
        return list(a.ints)
    if a.type == AttributeProto.STRINGS:
        return list(a.strings)
    if a.type == AttributeProto.TENSOR:
        arr, dt = _tensor_to_array(a.t, what)
        return arr, dt, list(a.t.dims)
    if a.type == AttributeProto.GRAPH:
        return _build_subgraph(a.g, what, depth + 1)
    if a.type == AttributeProto.GRAPHS:
        return [_build_subgraph(g, f"{what}[{i}]", depth + 1) for i, g in enumerate(a.graphs)]
    if a.type == AttributeProto.TYPE_PROTO:
        # (ONNX element type, dims, kind, optional), as _value_info reads a value's type.
        elem, dims, kind, optional = _type_proto(a.tp, what)
        if elem == 0:
            raise InvalidModelError(f"{what} is a type proto without a type")
        return (elem, dims, kind, optional)
    raise NotImplementedOpError(
        f"{what} has type {AttributeProto.AttributeType.Name(a.type)}: sparse tensors and tensor lists "
        "are not supported by the engine"
    )


def _tensor_type(tt: onnx.TypeProto.Tensor, what: str) -> tuple[int, list | None]:
    elem = tt.elem_type
    if elem not in dtypes.SUPPORTED:
        raise NotImplementedOpError(f"{what} has dtype {dtypes.onnx_type_name(elem)}, which the engine does not support")
    if not tt.HasField("shape"):
        return elem, None
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return elem, dims


def _value_info(vi: onnx.ValueInfoProto, what: str) -> tuple[int, list | None, int, bool]:
    """(ONNX element type, dims, kind, optional) of a declared value: kind 0 for a tensor, 1 for a
    sequence of tensors (its dims: the shape its tensors share); optional wraps either. 0, None for
    a value without a type. Maps, sparse tensors and nested sequences or optionals are refused."""
    return _type_proto(vi.type, f"{what} '{vi.name}'")


def _type_proto(t: onnx.TypeProto, what: str) -> tuple[int, list | None, int, bool]:
    """_value_info's answer for a TypeProto (a value's type, or a TYPE_PROTO attribute)."""
    kind = t.WhichOneof("value")
    if kind is None:
        return 0, None, 0, False
    optional = kind == "optional_type"
    if optional:
        t = t.optional_type.elem_type
        kind = t.WhichOneof("value")
        if kind is None:
            raise InvalidModelError(f"{what} is an optional of no declared type")
    if kind == "tensor_type":
        return (*_tensor_type(t.tensor_type, what), 0, optional)
    if kind == "sequence_type":
        elem = t.sequence_type.elem_type
        elem_kind = elem.WhichOneof("value")
        if elem_kind != "tensor_type":
            inner = "no declared type" if elem_kind is None else elem_kind.replace("_type", "")
            raise NotImplementedOpError(
                f"{what} is a sequence of {inner}; the engine supports sequences of tensors only"
            )
        return (*_tensor_type(elem.tensor_type, f"{what} (a sequence)"), 1, optional)
    inner = kind.replace("_type", "")
    inner = f"{'an' if inner[0] in 'aeiou' else 'a'} {inner}"
    raise NotImplementedOpError(
        f"{what} is {f'an optional of {inner}' if optional else inner}; the engine supports tensors, sequences "
        "of tensors and optionals of either"
    )


def _check_names_are_text(g: onnx.GraphProto, depth: int = 0) -> None:
    """protobuf hands back a string field that is not UTF-8 as bytes (ONNX's proto2 does not check):
    refuse it here, naming it, instead of failing inside the binding."""
    def check(value, what: str) -> None:
        if not isinstance(value, str):
            raise InvalidModelError(f"{what} is not a UTF-8 string: {value!r:.80}")

    for i, n in enumerate(g.node):
        for field in ("name", "op_type", "domain"):
            check(getattr(n, field), f"node {i} {field}")
        for k, name in enumerate([*n.input, *n.output]):
            check(name, f"node {i} ({n.op_type}) input/output {k}")
        for a in n.attribute:
            check(a.name, f"node {i} ({n.op_type}) attribute name")
            if a.type == AttributeProto.GRAPH or a.type == AttributeProto.GRAPHS:
                _check_depth(n, a, depth + 1)
                for sub in [a.g] if a.type == AttributeProto.GRAPH else a.graphs:
                    _check_names_are_text(sub, depth + 1)
    for kind, infos in (("input", g.input), ("output", g.output), ("value_info", g.value_info)):
        for vi in infos:
            check(vi.name, f"graph {kind} name")
            t = vi.type
            while t.WhichOneof("value") in ("optional_type", "sequence_type"):
                t = getattr(t, t.WhichOneof("value")).elem_type
            if t.WhichOneof("value") == "tensor_type":
                for d in t.tensor_type.shape.dim:
                    check(d.dim_param, f"graph {kind} '{vi.name}' dimension name")
    for t in g.initializer:
        check(t.name, "initializer name")


def _check_depth(node: onnx.NodeProto, a: AttributeProto, depth: int) -> None:
    if depth > C.MAX_SUBGRAPH_NESTING:
        raise InvalidModelError(
            f"node '{node.name}' ({node.op_type}) attribute '{a.name}': subgraphs nest more than "
            f"{C.MAX_SUBGRAPH_NESTING} levels deep, the most the engine allows"
        )


def _build_subgraph(g: onnx.GraphProto, what: str, depth: int):
    """A _C.GraphBuilder for a GRAPH attribute's graph, walked exactly as the main graph is."""
    b = C.GraphBuilder(subgraph=g.name or what)
    try:
        _fill(b, g, depth)
    except (InvalidModelError, NotImplementedOpError) as e:
        raise type(e)(f"{what} (subgraph '{g.name}'): {e}") from e
    return b


def build_graph(proto: onnx.ModelProto):
    """Walks a checked ModelProto and returns a filled _C.GraphBuilder."""
    _check_names_are_text(proto.graph)
    b = C.GraphBuilder()
    for op in proto.opset_import:
        b.set_opset(op.domain, op.version)
    _fill(b, proto.graph, 0)
    return b


def _fill(b, g: onnx.GraphProto, depth: int) -> None:
    """Builds graph `g` (the main graph at depth 0, else a subgraph) into builder `b`: initializers,
    inputs, nodes (their subgraphs first, recursively), declared types, outputs."""
    init_names = set()
    for t in g.initializer:
        arr, dt = _tensor_to_array(t, f"initializer '{t.name}'")
        b.add_initializer(t.name, arr, dt, list(t.dims))
        init_names.add(t.name)
    if len(g.sparse_initializer):
        raise NotImplementedOpError("sparse initializers are not supported by the engine")
    for vi in g.input:
        if vi.name in init_names:
            continue
        elem, dims, kind, optional = _value_info(vi, "graph input")
        b.add_input(vi.name, elem, dims, kind, optional)
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}" if depth == 0 else n.name
        attrs = [(a.name, int(a.type), _attribute_value(n, a, depth)) for a in n.attribute]
        recompute = any(p.key == RECOMPUTE_KEY and p.value == "1" for p in n.metadata_props)
        b.add_node(n.op_type, n.domain, list(n.input), list(n.output), attrs, name, recompute)
    for vi in g.value_info:
        try:
            elem, dims, kind, optional = _value_info(vi, "value_info")
        except (InvalidModelError, NotImplementedOpError):
            continue  # a declaration we cannot use is no error: inference decides
        b.declare_value_type(vi.name, elem, dims, kind, optional)
    for vi in g.output:
        elem, dims, kind, optional = _value_info(vi, "graph output")
        b.add_output(vi.name, elem, dims, kind, optional)
