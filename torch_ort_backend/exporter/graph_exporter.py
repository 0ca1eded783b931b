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
from .context import MS_DOMAIN, ExportContext, Val, val_from_meta, wrap_integer
from .errors import UnsupportedTorchModelError

DEFAULT_OPSET = 18
# FX node meta key of a node that recomputes a forward value for the backward (memory_optimizer/
# joint_recompute.py): its ONNX nodes carry the engine's recompute mark.
RECOMPUTE_META = "tob_recompute_copy"
MIN_OPSET, MAX_OPSET = 12, 21  # below 18, exporter/opset_compat.py lowers what changed


@dataclass
class ExportedGraph:
    model: onnx.ModelProto
    input_names: list[str]
    input_kinds: list[str]  # "tensor" | "symint" | "symfloat" | "unused"
    # "tensor" | "symint" (engine outputs, in order) | ("const", value) | ("input", i): the i-th input
    # itself | ("same_as", j): the same object as output j | ("view", base, ops, copy): the view ops
    # replayed on base, which is ("input", i), ("output", j) or ("hidden", h): the h-th engine output
    # after those of the "tensor"/"symint" outputs; with copy, the result cloned
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
    def __init__(self, gm: torch.fx.GraphModule, opset: int, prefer_torch_kernels: frozenset | None = frozenset(),
                 replay_views: bool = False, unaliased_outputs: frozenset = frozenset()) -> None:
        self.gm = gm
        self.prefer_torch_kernels = prefer_torch_kernels or frozenset()
        self.replay_views = replay_views
        self.unaliased_outputs = unaliased_outputs
        self.ctx = ExportContext(opset)
        self.ctx.kernels_by_shape = prefer_torch_kernels is None
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
                first = len(ctx.nodes)
                self.env[node] = self.convert(node)
                if node.meta.get(RECOMPUTE_META):
                    ctx.mark_recompute(first)
            elif node.op == "output":
                outs = node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else (outs,)
                self.outputs(outs, placeholders, output_kinds, output_names)
            else:
                raise UnsupportedTorchModelError(f"FX node kind '{node.op}' ({node.name}) is not supported")
        model = ctx.model()
        return ExportedGraph(model, input_names, input_kinds, output_kinds, output_names, self.aten_ops,
                             self.native, sum(1 for n in self.gm.graph.nodes if n.op == "call_function"))

    def outputs(self, outs: tuple, placeholders: list, output_kinds: list, output_names: list) -> None:
        """Decides how each graph output reaches the caller: an engine output, an input handed back,
        a constant, or a view replayed on another output or input (see _view_chain)."""
        ctx = self.ctx
        input_index = {id(self.env[n]): k for k, n in enumerate(placeholders)}
        placeholder_index = {n: k for k, n in enumerate(placeholders)}
        chains = [_view_chain(o) if isinstance(o, torch.fx.Node) and self.replay_views else (o, ()) for o in outs]
        users: dict[torch.fx.Node, list[int]] = {}
        for i, (root, _) in enumerate(chains):
            if isinstance(root, torch.fx.Node):
                users.setdefault(root, []).append(i)
        emitted: dict[int, int] = {}
        hidden: dict[torch.fx.Node, int] = {}
        for i, o in enumerate(outs):
            root, chain = chains[i]
            mapped = self.env[o] if isinstance(o, torch.fx.Node) else o
            if chain and root in placeholder_index:
                output_kinds.append(("view", ("input", placeholder_index[root]), chain, False))
            elif chain and len(users[root]) > 1:
                base = next((j for j in users[root] if not chains[j][1]), None)
                if base is None:
                    hidden.setdefault(root, len(hidden))
                # An output the caller turns into a non-view (unaliased_outputs) gets a buffer of its
                # own: sharing one with the other views, but not their version counter, an in-place
                # edit of it would change what the backward reads.
                output_kinds.append(("view", ("output", base) if base is not None else ("hidden", hidden[root]), chain,
                                     i in self.unaliased_outputs))
            elif isinstance(mapped, Val) and id(mapped) in input_index:
                # An input handed back (AOTAutograd saving a parameter for the backward):
                # the caller returns its own tensor, the engine copies nothing.
                output_kinds.append(("input", input_index[id(mapped)]))
            elif isinstance(mapped, Val) and id(mapped) in emitted:
                output_kinds.append(("same_as", emitted[id(mapped)]))
            elif isinstance(mapped, Val):
                emitted[id(mapped)] = i
                output_names.append(ctx.add_output(mapped, f"output_{i}"))
                output_kinds.append("symint" if mapped.is_symint else "tensor")
            else:
                output_kinds.append(("const", mapped))
        # Bases of several views that are not outputs themselves: engine outputs after the others.
        for root, h in sorted(hidden.items(), key=lambda item: item[1]):
            output_names.append(ctx.add_output(self.env[root], f"view_base_{h}"))

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
        perm = _random_op_memory_order(op, node)
        if perm is not None:
            # The engine hands torch contiguous tensors; eager's input here is laid out otherwise
            # (channels-last, a transpose) and the op draws its random numbers in memory order. Run
            # it on the input transposed into that order, so the same draws land on the same
            # elements as in eager, and transpose the results back.
            inputs[0] = ctx.op("Transpose", inputs[0], perm=perm, shape=[inputs[0].shape[d] for d in perm])
        outs = ctx.op("ATen", *inputs, outputs=len(present), domain=MS_DOMAIN,
                      dtypes=[r.dtype for r in present], **call.attributes)
        outs = outs if isinstance(outs, list) else [outs]
        it = iter(outs)
        results = []
        for ref in refs:
            if ref is None:
                results.append(None)
                continue
            o = next(it)
            if perm is not None:
                o.shape, o.is_symint = tuple(ref.shape[d] for d in perm), ref.is_symint
                ctx.declare(o)
                o = ctx.op("Transpose", o, perm=_inverse(perm), dtype=o.dtype)
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


# Random ATen ops whose draws follow their input's memory order (checked against torch: dropout on a
# channels-last or transposed input masks the elements in storage order). bernoulli.p is not one of
# them: it draws in logical order whatever the layout.
_MEMORY_ORDER_RANDOM_OPS = frozenset({torch.ops.aten.native_dropout.default})


def _random_op_memory_order(op: torch._ops.OpOverload, node: torch.fx.Node) -> list[int] | None:
    """For a random op of _MEMORY_ORDER_RANDOM_OPS whose input (its first argument) torch holds densely
    but not contiguously, the permutation of its dims from outermost to innermost in memory; None
    when the input is contiguous, overlapping, or its layout unknown without a guard."""
    if op not in _MEMORY_ORDER_RANDOM_OPS or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    mv = node.args[0].meta.get("val")
    if not isinstance(mv, torch.Tensor) or mv.dim() < 2:
        return None
    # Read the layout without guards: int() on a symbolic size or stride would specialise it (a
    # recompile per sequence length, and mark_dynamic refused); torch's own helpers answer
    # "unknown" as "not dense" / the logical order instead.
    from torch._prims_common import (compute_elementwise_output_logical_to_physical_perm,
                                     is_non_overlapping_and_dense_or_false)

    if not is_non_overlapping_and_dense_or_false(mv):
        return None
    perm = list(compute_elementwise_output_logical_to_physical_perm(mv)[0])
    return None if perm == list(range(mv.dim())) else perm


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, d in enumerate(perm):
        inv[d] = i
    return inv


def _view_chain(node: torch.fx.Node) -> tuple[Any, tuple]:
    """The base a graph output is a view of, and the view ops from that base to it.

    In eager PyTorch a view (detach, alias, view, t, transpose, slice...) shares its base's version
    counter, so autograd notices when either is modified in place. Graph outputs that AOTAutograd
    saves for the backward are often such views of a user output (detach(softmax)) or of an input;
    returned as separate engine tensors they would share a buffer but not the counter, and an
    in-place edit by the user would silently corrupt the gradient. The runtime therefore replays
    these ops on the torch tensor of the base (docs/torch_compile.md, "Outputs that are views").
    Only ops whose other arguments are constants are replayed."""
    chain = []
    while (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and node.target.is_view
           and node.args and isinstance(node.args[0], torch.fx.Node)
           and not _contains_node((node.args[1:], node.kwargs))):
        chain.append((node.target, tuple(node.args[1:]), dict(node.kwargs)))
        node = node.args[0]
    return node, tuple(reversed(chain))


def _contains_node(value: Any) -> bool:
    found = []
    torch.fx.node.map_aggregate(value, lambda x: found.append(x) if isinstance(x, torch.fx.Node) else None)
    return bool(found)


def export_fx_graph(gm: torch.fx.GraphModule, opset: int = DEFAULT_OPSET,
                    prefer_torch_kernels: frozenset | set | tuple | None = frozenset(), replay_views: bool = False,
                    unaliased_outputs: frozenset | set = frozenset()) -> ExportedGraph:
    """Converts an ATen-level FX graph (as AOTAutograd produces) to an ONNX model. Ops named in
    `prefer_torch_kernels` (ATen op names without overload, e.g. "convolution_backward") become ATen
    nodes even where a converter exists; None lets converters choose torch's kernel per shape where it
    is measured faster (BackendOptions.prefer_torch_kernels' default). With `replay_views`, outputs that are views of an input or
    of a value other outputs view too are ("view", ...) kinds the caller builds with torch (see
    _view_chain); without, every computed output is an engine output. `unaliased_outputs`: indices
    of outputs the caller makes non-views of (AOTAutograd's _unsafe_view outputs); they never share a
    buffer with another output."""
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"opset must be in [{MIN_OPSET}, {MAX_OPSET}], got {opset}")
    prefer = None if prefer_torch_kernels is None else frozenset(prefer_torch_kernels)
    return _Exporter(gm, opset, prefer, replay_views, frozenset(unaliased_outputs)).run()
