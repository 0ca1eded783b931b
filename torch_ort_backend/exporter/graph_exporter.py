"""FX (ATen) graph -> ONNX ModelProto.

Placeholders become graph inputs (tensors with dim_params for symbolic sizes; SymInts as int64 0-d
inputs), each call_function node goes through its registered converter, and any op without one (or
whose converter declines) becomes an ATen node run by torch's dispatcher inside the engine.
"""

from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import onnx
import torch
import torch.fx

from . import registry
from .context import ExportContext, Val, val_from_meta, wrap_integer
from .errors import UnsupportedTorchModelError

DEFAULT_OPSET = 18
MIN_OPSET, MAX_OPSET = 12, 21  # below 18, exporter/opset_compat.py lowers what changed


@dataclass
class ExportedGraph:
    model: onnx.ModelProto
    input_names: list[str]
    input_kinds: list[str]  # "tensor" | "symint" | "symfloat" | "unused"
    # "tensor" | "symint" (engine outputs, in order) | ("const", value) | ("input", i): the i-th input
    # itself | ("same_as", j): the same object as output j
    output_kinds: list[Any]
    output_names: list[str]
    aten_fallback_ops: Counter = field(default_factory=Counter)
    native_nodes: int = 0
    fx_nodes: int = 0


def _bind(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> SimpleNamespace:
    bound = {}
    schema_args = op._schema.arguments
    for i, a in enumerate(schema_args):
        if i < len(args) and not a.kwarg_only:
            bound[a.name] = args[i]
        elif a.name in kwargs:
            bound[a.name] = kwargs[a.name]
        elif a.has_default_value():
            bound[a.name] = a.default_value
        else:
            bound[a.name] = None
    return SimpleNamespace(**bound)


class _Exporter:
    def __init__(self, gm: torch.fx.GraphModule, opset: int, prefer_torch_kernels: frozenset = frozenset()) -> None:
        self.gm = gm
        self.prefer_torch_kernels = prefer_torch_kernels
        self.ctx = ExportContext(opset)
        self.env: dict[torch.fx.Node, Any] = {}
        self.ctx.env = self.env  # converters that fuse look at their producers' values
        self.aten_ops: Counter = Counter()
        self.native = 0

    def map_arg(self, a: Any) -> Any:
        return torch.fx.node.map_aggregate(a, lambda x: self.env[x] if isinstance(x, torch.fx.Node) else x)

    def run(self) -> ExportedGraph:
        ctx = self.ctx
        input_names, input_kinds = [], []
        output_kinds, output_names = [], []
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node in self.gm.graph.nodes:
            ctx.current_node = node.name
            if node.op == "placeholder":
                mv = node.meta.get("val")
                if mv is None:
                    raise UnsupportedTorchModelError(f"placeholder '{node.name}' has no example value")
                if isinstance(mv, torch.Tensor):
                    v = val_from_meta(node.name, mv)
                    self.env[node] = ctx.add_input(node.name, v.dtype, v.shape)
                    kind = "tensor"
                elif isinstance(mv, (torch.SymInt, int)):
                    self.env[node] = ctx.add_input(node.name, torch.int64, (), is_symint=True)
                    kind = "symint"
                elif isinstance(mv, (torch.SymFloat, float)):
                    self.env[node] = ctx.add_input(node.name, torch.float64, (), is_symint=True)
                    kind = "symfloat"
                else:
                    raise UnsupportedTorchModelError(
                        f"graph input '{node.name}' is a {type(mv).__name__}; tensors and SymInts are supported")
                input_names.append(self.env[node].name)
                input_kinds.append(kind)
            elif node.op == "get_attr":
                value = getattr(self.gm, node.target)
                if not isinstance(value, torch.Tensor):
                    raise UnsupportedTorchModelError(f"attribute '{node.target}' is a {type(value).__name__}")
                self.env[node] = ctx.const(value, value.dtype)
            elif node.op == "call_function":
                self.env[node] = self.convert(node)
            elif node.op == "output":
                outs = node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else (outs,)
                input_index = {id(self.env[n]): k for k, n in enumerate(placeholders)}
                emitted: dict[int, int] = {}
                for i, o in enumerate(outs):
                    mapped = self.env[o] if isinstance(o, torch.fx.Node) else o
                    if isinstance(mapped, Val) and id(mapped) in input_index:
                        # An input handed back (AOTAutograd saving a parameter for the backward):
                        # the caller returns its own tensor, the engine copies nothing.
                        output_kinds.append(("input", input_index[id(mapped)]))
                    elif isinstance(mapped, Val) and id(mapped) in emitted:
                        output_kinds.append(("same_as", emitted[id(mapped)]))
                    elif isinstance(mapped, Val):
                        emitted[id(mapped)] = i
                        name = ctx.add_output(mapped, f"output_{i}")
                        output_names.append(name)
                        output_kinds.append("symint" if mapped.is_symint else "tensor")
                    else:
                        output_kinds.append(("const", mapped))
            else:
                raise UnsupportedTorchModelError(f"FX node kind '{node.op}' ({node.name}) is not supported")
        model = ctx.model()
        return ExportedGraph(model, input_names, input_kinds, output_kinds, output_names, self.aten_ops,
                             self.native, sum(1 for n in self.gm.graph.nodes if n.op == "call_function"))

    def convert(self, node: torch.fx.Node) -> Any:
        target = node.target
        if target is operator.getitem:
            seq, idx = self.map_arg(node.args)
            return seq[idx]
        args = self.map_arg(node.args)
        kwargs = self.map_arg(node.kwargs)
        fn = registry.lookup(target)
        if fn is not None and isinstance(target, torch._ops.OpOverload) and (
                target.__name__.split(".")[0] in self.prefer_torch_kernels):
            fn = None  # torch's kernel is the faster one (options.PREFER_TORCH_KERNELS)
        result = None
        if fn is not None:
            a = _bind(target, args, kwargs) if isinstance(target, torch._ops.OpOverload) else SimpleNamespace(args=args)
            result = fn(self.ctx, node, a)
        if result is None:
            if not isinstance(target, torch._ops.OpOverload):
                raise UnsupportedTorchModelError(f"no converter for {target} (node '{node.name}')")
            return self.aten_node(node, target, args, kwargs)
        self.native += 1
        return self.fix_types(node, result)

    def fix_types(self, node: torch.fx.Node, result: Any) -> Any:
        """Casts converter outputs to the dtype torch computed (type promotion is implicit in ATen) and
        fills in shapes from the FX metadata."""
        mv = node.meta.get("val")
        if isinstance(result, Val):
            return self._fix_one(result, mv)
        if isinstance(result, (list, tuple)) and isinstance(mv, (list, tuple)):
            return type(result)(self._fix_one(r, m) if isinstance(r, Val) else r for r, m in zip(result, mv))
        return result

    def _fix_one(self, v: Val, mv: Any) -> Val:
        if mv is None:
            return v
        ref = val_from_meta(v.name, mv)
        if ref.dtype != v.dtype:
            v = self.ctx.cast(v, ref.dtype)
        v.shape = ref.shape
        v.is_symint = ref.is_symint
        return v

    def aten_node(self, node: torch.fx.Node, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        from .aten_encoding import AtenEncodingError, encode_aten_call

        ctx = self.ctx
        try:
            call = encode_aten_call(op, args, kwargs)
        except AtenEncodingError as e:
            raise UnsupportedTorchModelError(f"node '{node.name}' ({op}): {e}") from e
        inputs: list[Val | None] = []
        for item in call.inputs:
            kind = item[0]
            if kind == "value":
                v = item[1]
                if not isinstance(v, Val):
                    raise UnsupportedTorchModelError(f"node '{node.name}' ({op}): unexpected argument {v!r}")
                inputs.append(v)
            elif kind == "none":
                inputs.append(None)
            elif kind == "const":
                arr = item[1]
                inputs.append(ctx.const(arr, torch.from_numpy(arr[None].copy()).dtype))
            elif kind == "int_list":
                inputs.append(ctx.ints(item[1]))
            elif kind == "scalar":
                value, dtype = item[1], item[2]
                if not dtype.is_floating_point and dtype != torch.bool:
                    value = wrap_integer(value, dtype)
                inputs.append(ctx.scalar(value, dtype))
            else:
                raise UnsupportedTorchModelError(f"node '{node.name}': unknown ATen input kind {kind}")
        mv = node.meta.get("val")
        metas = list(mv) if isinstance(mv, (list, tuple)) else [mv]
        if mv is None:
            raise UnsupportedTorchModelError(f"node '{node.name}' ({op}) has no example output to type it")
        # Outputs torch does not compute (None in the metadata, e.g. an output_mask entry that is False)
        # are omitted ONNX outputs ("").
        refs = [None if m is None else val_from_meta(node.name, m) for m in metas]
        present = [r for r in refs if r is not None]
        outs = ctx.op("ATen", *inputs, outputs=len(present), domain="com.microsoft",
                      dtypes=[r.dtype for r in present], **call.attributes)
        outs = outs if isinstance(outs, list) else [outs]
        it = iter(outs)
        results = []
        for ref in refs:
            if ref is None:
                results.append(None)
                continue
            o = next(it)
            o.shape, o.is_symint = ref.shape, ref.is_symint
            ctx.declare(o)
            results.append(o)
        if len(present) != len(refs):
            onnx_node = ctx.nodes[-1]
            names = [("" if r is None else results[i].name) for i, r in enumerate(refs)]
            del onnx_node.output[:]
            onnx_node.output.extend(names)
        outs = results
        self.aten_ops[str(op)] += 1
        if isinstance(mv, (list, tuple)):
            return outs
        return outs[0]


def export_fx_graph(gm: torch.fx.GraphModule, opset: int = DEFAULT_OPSET,
                    prefer_torch_kernels: frozenset | set = frozenset()) -> ExportedGraph:
    """Converts an ATen-level FX graph (as AOTAutograd produces) to an ONNX model. Ops named in
    `prefer_torch_kernels` (ATen op names without overload, e.g. "convolution_backward") become ATen
    nodes even where a converter exists."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be in [{MIN_OPSET}, {MAX_OPSET}], got {opset}")
    return _Exporter(gm, opset, frozenset(prefer_torch_kernels)).run()
