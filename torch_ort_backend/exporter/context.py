"""What a converter works with: :class:`Val` (one ONNX value with its torch dtype and shape) and
:class:`ExportContext` (emits nodes and constants into the ONNX graph being built)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

from .._engine import MS_DOMAIN
from . import opset_compat
from .errors import UnsupportedTorchModelError

TORCH_TO_ONNX = {
    torch.float32: TensorProto.FLOAT,
    torch.float64: TensorProto.DOUBLE,
    torch.float16: TensorProto.FLOAT16,
    torch.bfloat16: TensorProto.BFLOAT16,
    torch.int8: TensorProto.INT8,
    torch.int16: TensorProto.INT16,
    torch.int32: TensorProto.INT32,
    torch.int64: TensorProto.INT64,
    torch.uint8: TensorProto.UINT8,
    torch.uint16: TensorProto.UINT16,
    torch.uint32: TensorProto.UINT32,
    torch.uint64: TensorProto.UINT64,
    torch.bool: TensorProto.BOOL,
    torch.float8_e4m3fn: TensorProto.FLOAT8E4M3FN,
    torch.float8_e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ,
    torch.float8_e5m2: TensorProto.FLOAT8E5M2,
    torch.float8_e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ,
}
ONNX_TO_TORCH = {v: k for k, v in TORCH_TO_ONNX.items()}

# ONNX has the 8-bit floats from opset 19 on (Cast-19's saturate); an export that carries one
# declares opset 19 (see ExportContext.model).
FLOAT8_OPSET = 19
_FLOAT8_CODES = frozenset({TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
                           TensorProto.FLOAT8E5M2FNUZ})
# torch's conversion to float8_e4m3fn clamps to its largest finite value (ONNX's saturate = 1); to the
# other three, a value past the range becomes inf (e5m2) or NaN (the fnuz types: saturate = 0).
_FLOAT8_SATURATES = {torch.float8_e4m3fn: 1, torch.float8_e4m3fnuz: 0, torch.float8_e5m2: 0,
                     torch.float8_e5m2fnuz: 0}

_NUMPY_OF = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16,
    torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
    torch.uint8: np.uint8, torch.uint16: np.uint16, torch.uint32: np.uint32, torch.uint64: np.uint64,
    torch.bool: np.bool_,
}

Dim = int | str  # a static size or a symbolic one (the ONNX dim_param)


def onnx_dtype(dtype: torch.dtype) -> int:
    code = TORCH_TO_ONNX.get(dtype)
    if code is None:
        raise UnsupportedTorchModelError(f"dtype {dtype} has no ONNX equivalent the engine supports")
    return code


def wrap_integer(value: int, dtype: torch.dtype) -> int:
    """A Python int as torch converts it to an integer dtype: its two's-complement bits, wrapped."""
    bits = torch.iinfo(dtype).bits
    v = int(value) & ((1 << bits) - 1)
    if dtype.is_signed and v >= 1 << (bits - 1):
        v -= 1 << bits
    return v


def dim_of(size: Any) -> Dim:
    """A torch size (int or SymInt) as an ONNX dim: an int, or the symbol's expression as dim_param."""
    if isinstance(size, int):
        return size
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        if getattr(expr, "is_number", False):
            return int(expr)
        return str(expr).replace(" ", "")
    raise UnsupportedTorchModelError(f"unexpected size {size!r} of type {type(size).__name__}")


@dataclass(eq=False)
class Val:
    """One ONNX value. ``shape`` holds ints and dim_params, or is None when unknown."""

    name: str
    dtype: torch.dtype
    shape: tuple[Dim, ...] | None = None
    is_symint: bool = False  # a SymInt of the FX graph, carried as an int64 0-d tensor

    @property
    def rank(self) -> int:
        if self.shape is None:
            raise UnsupportedTorchModelError(f"rank of '{self.name}' is unknown")
        return len(self.shape)

    def static_shape(self) -> list[int] | None:
        if self.shape is None or not all(isinstance(d, int) for d in self.shape):
            return None
        return list(self.shape)

    def __repr__(self) -> str:
        return f"Val({self.name}: {self.dtype}{list(self.shape) if self.shape is not None else '?'})"


def val_from_meta(name: str, meta_val: Any) -> Val:
    if isinstance(meta_val, torch.Tensor):
        return Val(name, meta_val.dtype, tuple(dim_of(s) for s in meta_val.shape))
    if isinstance(meta_val, (torch.SymInt, int)):
        return Val(name, torch.int64, (), is_symint=True)
    if isinstance(meta_val, (torch.SymFloat, float)):
        return Val(name, torch.float64, (), is_symint=True)
    if isinstance(meta_val, (torch.SymBool, bool)):
        return Val(name, torch.bool, (), is_symint=True)
    raise UnsupportedTorchModelError(f"value '{name}' has unsupported type {type(meta_val).__name__}")


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]", "_", name)


class ExportContext:
    """Builds one ONNX graph. Converters call :meth:`op`, :meth:`const` and friends."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self._names: set[str] = set()
        self._counter = itertools.count()
        self._const_cache: dict[tuple, Val] = {}
        self._const_values: dict[str, np.ndarray] = {}  # initializer name -> value (non-bfloat16)
        self.current_node: str = ""  # the FX node being converted (for node names and errors)
        self.uses_ms_domain = False
        # Converters may leave a node to torch's kernel where it is measured faster for its shape
        # (export_fx_graph's prefer_torch_kernels=None, the backend's default).
        self.kernels_by_shape = False

    # ---- names ----
    def fresh(self, hint: str) -> str:
        base = _sanitize(hint) or "v"
        name = base
        while name in self._names:
            name = f"{base}_{next(self._counter)}"
        self._names.add(name)
        return name

    # ---- graph IO ----
    def add_input(self, hint: str, dtype: torch.dtype, shape: Sequence[Dim] | None, is_symint=False) -> Val:
        v = Val(self.fresh(hint), dtype, tuple(shape) if shape is not None else None, is_symint)
        self.inputs.append(self._value_info(v))
        return v

    def add_output(self, v: Val, hint: str) -> str:
        name = self.fresh(hint)
        self.nodes.append(helper.make_node("Identity", [v.name], [name], name=self.fresh(f"out_{hint}")))
        self.outputs.append(self._value_info(Val(name, v.dtype, v.shape)))
        return name

    def mark_recompute(self, first: int) -> None:
        """Marks the nodes made since len(self.nodes) was `first` as a recompute copy (their FX node
        repeats a forward node for the backward): the engine's CSE must not merge them back."""
        from .._engine import RECOMPUTE_KEY

        for n in self.nodes[first:]:
            entry = n.metadata_props.add()
            entry.key, entry.value = RECOMPUTE_KEY, "1"

    def declare(self, v: Val) -> None:
        """Records v's dtype and shape in value_info (for values whose type the engine cannot infer)."""
        self.value_info.append(self._value_info(v))

    @staticmethod
    def _value_info(v: Val) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(v.name, onnx_dtype(v.dtype), list(v.shape) if v.shape is not None else None)

    # ---- nodes ----
    def op(
        self,
        op_type: str,
        *inputs: Val | None,
        outputs: int = 1,
        domain: str = "",
        dtype: torch.dtype | None = None,
        dtypes: Sequence[torch.dtype] | None = None,
        shape: Sequence[Dim] | None = None,
        **attrs: Any,
    ) -> Any:
        """Emits one node, written in its opset-18 form (opset_compat lowers it to the export opset).
        Returns a Val (or a list when outputs > 1). Output dtypes default to the first input's dtype;
        ``shape`` (optional) is the first output's shape when the converter knows it."""
        if self.opset < 18:
            lowered = opset_compat.lower(self, op_type, inputs, {k: v for k, v in attrs.items() if v is not None},
                                         domain, self._emitter(outputs, dtype, dtypes, shape))
            if lowered is not None:
                return lowered
        return self._emit(op_type, *inputs, outputs=outputs, domain=domain, dtype=dtype, dtypes=dtypes,
                          shape=shape, **attrs)

    def _emitter(self, outputs, dtype, dtypes, shape):
        """emit(op_type, *inputs, **attrs) for opset_compat: the caller's output typing is the default."""
        def emit(op_type: str, *inputs: Val | None, **kw: Any) -> Any:
            kw.setdefault("outputs", outputs)
            kw.setdefault("dtype", dtype)
            kw.setdefault("dtypes", dtypes)
            kw.setdefault("shape", shape)
            return self._emit(op_type, *inputs, **kw)
        return emit

    def _emit(
        self,
        op_type: str,
        *inputs: Val | None,
        outputs: int = 1,
        domain: str = "",
        dtype: torch.dtype | None = None,
        dtypes: Sequence[torch.dtype] | None = None,
        shape: Sequence[Dim] | None = None,
        **attrs: Any,
    ) -> Any:
        names = [("" if x is None else x.name) for x in inputs]
        while names and names[-1] == "":
            names.pop()
        if dtypes is None:
            first = next((x for x in inputs if x is not None), None)
            base = dtype or (first.dtype if first is not None else torch.float32)
            dtypes = [base] * outputs
        outs = [Val(self.fresh(f"{self.current_node or op_type}_{op_type}"), dt) for dt in dtypes]
        if shape is not None:
            outs[0].shape = tuple(shape)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        if domain == MS_DOMAIN:
            self.uses_ms_domain = True
        self.nodes.append(
            helper.make_node(op_type, names, [o.name for o in outs], name=self.fresh(f"{self.current_node}_{op_type}"),
                             domain=domain, **attrs)
        )
        return outs[0] if outputs == 1 else outs

    def const(self, value: Any, dtype: torch.dtype) -> Val:
        """A constant initializer (deduplicated) of the given torch dtype."""
        if isinstance(value, torch.Tensor):
            # Constants of the graph (get_attr) are real tensors, but AOTAutograd may call the compiler
            # with its fake mode active: read them with every dispatch mode off.
            from torch.utils._python_dispatch import _disable_current_modes

            with _disable_current_modes():
                arr = value.detach().cpu()
            if arr.dtype == torch.bfloat16 or arr.dtype in _FLOAT8_SATURATES:
                with _disable_current_modes():
                    bits = torch.int16 if arr.dtype == torch.bfloat16 else torch.uint8
                    raw = arr.contiguous().view(bits).numpy().tobytes()
                t = helper.make_tensor(self.fresh("const"), TORCH_TO_ONNX[arr.dtype], list(arr.shape), raw, raw=True)
                self.initializers.append(t)
                return Val(t.name, arr.dtype, tuple(arr.shape))
            with _disable_current_modes():
                arr = arr.numpy()
        else:
            if dtype == torch.bfloat16 or dtype in _FLOAT8_SATURATES:
                return self.cast(self.const(value, torch.float32), dtype)
            arr = np.asarray(value, dtype=_NUMPY_OF.get(dtype))
        if dtype in _NUMPY_OF:
            arr = arr.astype(_NUMPY_OF[dtype], copy=False)
        key = (arr.dtype.str, arr.shape, arr.tobytes()) if arr.size <= 64 else None
        if key is not None and key in self._const_cache:
            return self._const_cache[key]
        name = self.fresh("const")
        # (np.ascontiguousarray would turn a 0-d array into shape (1,))
        t = onnx.numpy_helper.from_array(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr), name)
        self.initializers.append(t)
        self._const_values[name] = arr
        v = Val(name, dtype, tuple(arr.shape))
        if key is not None:
            self._const_cache[key] = v
        return v

    def constant_value(self, v: Val) -> np.ndarray | None:
        """The value of a constant this context created, else None (computed at run time)."""
        return self._const_values.get(v.name)

    def scalar(self, value: Any, dtype: torch.dtype) -> Val:
        return self.const(np.asarray(value), dtype)

    def ints(self, values: Iterable[int | Val]) -> Val:
        """An int64 1-D value from static ints and SymInt Vals (concatenated when any is symbolic)."""
        values = list(values)
        if all(isinstance(x, int) for x in values):
            return self.const(np.asarray(values, dtype=np.int64), torch.int64)
        parts: list[Val] = []
        run: list[int] = []
        for x in values:
            if isinstance(x, int):
                run.append(x)
                continue
            if run:
                parts.append(self.const(np.asarray(run, dtype=np.int64), torch.int64))
                run = []
            parts.append(self.unsqueeze0(self.cast(x, torch.int64)))
        if run:
            parts.append(self.const(np.asarray(run, dtype=np.int64), torch.int64))
        return parts[0] if len(parts) == 1 else self.op("Concat", *parts, axis=0, shape=(len(values),))

    def unsqueeze0(self, v: Val) -> Val:
        return self.op("Unsqueeze", v, self.const(np.asarray([0], np.int64), torch.int64),
                       shape=(1,) if v.shape == () else None)

    def cast(self, v: Val, dtype: torch.dtype) -> Val:
        if v.dtype == dtype:
            return v
        out = self.op("Cast", v, to=onnx_dtype(dtype), dtype=dtype, saturate=_FLOAT8_SATURATES.get(dtype))
        out.shape = v.shape
        out.is_symint = v.is_symint
        return out

    def as_val(self, x: Any, dtype: torch.dtype) -> Val:
        """A tensor Val as is (cast to dtype), a Python number as a 0-d constant of dtype."""
        if isinstance(x, Val):
            return self.cast(x, dtype)
        return self.scalar(x, dtype)

    def shape_of(self, v: Val, start: int | None = None, end: int | None = None) -> Val:
        """The runtime shape of v (int64 1-D), or a constant when static."""
        static = v.static_shape()
        if static is not None:
            return self.const(np.asarray(static[start:end], dtype=np.int64), torch.int64)
        return self.op("Shape", v, dtype=torch.int64, start=start, end=end)

    def _carries_float8(self) -> bool:
        typed = (*self.inputs, *self.outputs, *self.value_info)
        if any(vi.type.tensor_type.elem_type in _FLOAT8_CODES for vi in typed):
            return True
        if any(t.data_type in _FLOAT8_CODES for t in self.initializers):
            return True
        return any(n.op_type == "Cast" and any(a.name == "to" and a.i in _FLOAT8_CODES for a in n.attribute)
                   for n in self.nodes)

    def model(self, producer: str = "torch_ort_backend") -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "torch_ort_graph", self.inputs, self.outputs,
                                  initializer=self.initializers, value_info=self.value_info)
        opset = self.opset
        if opset < FLOAT8_OPSET and self._carries_float8():
            if opset < 18:
                raise UnsupportedTorchModelError(
                    f"the graph carries 8-bit floats, which ONNX has from opset {FLOAT8_OPSET} on; the export opset is "
                    f"{opset} (set the opset option to 18 or more)")
            opset = FLOAT8_OPSET  # the nodes are written in their opset-18 form, which opset 19 reads alike
        opsets = [helper.make_opsetid("", opset)]
        if self.uses_ms_domain:
            opsets.append(helper.make_opsetid(MS_DOMAIN, 1))
        return helper.make_model(graph, opset_imports=opsets, producer_name=producer, ir_version=10)
